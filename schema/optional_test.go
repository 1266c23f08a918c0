package schema_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/schema"
)

func TestOptionalSQL(t *testing.T) {
	t.Parallel()
	onDisk, err := os.ReadFile(filepath.Join("sql", "optional", "prune_data_older_than.sql"))
	require.NoError(t, err)

	for _, name := range []string{"prune_data_older_than", "prune_data_older_than.sql"} {
		got, err := schema.OptionalSQL(name)
		require.NoError(t, err, name)
		require.Equal(t, string(onDisk), got, "the embedded snippet is the file in sql/optional")
	}

	names, err := schema.OptionalNames()
	require.NoError(t, err)
	require.Contains(t, names, "prune_data_older_than")

	for _, bad := range []string{"", "../core/0000_schema", "nope", ".sql"} {
		_, err := schema.OptionalSQL(bad)
		require.Error(t, err, "%q", bad)
	}
	_, err = schema.OptionalSQL("nope")
	require.ErrorContains(t, err, `no optional snippet "nope"; available: prune_data_older_than`)
}

// roles.sql with the real pgmq extension created by pgflow_owner (the simplest set-up roles.sql describes):
// pgflow_owner creates the extension, migrates and creates queues itself, owns their tables, and the worker role
// gets its privileges on queues created before and after roles.sql ran. Skipped when the server offers no pgmq extension >= 1.5; with the bundled layer and
// with an extension another role owns, TestSecurityRoleModel (root package) covers the role model.
func TestRolesSQLWithPGMQExtensionOwnedByPgflowOwner(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := pgtest.NewEmpty(t)
	var offered bool
	require.NoError(t, db.Pool.QueryRow(ctx, `
select exists (select 1 from pg_catalog.pg_available_extension_versions
               where name = 'pgmq' and pg_catalog.string_to_array(version, '.')::int[] >= array[1, 5])`).Scan(&offered))
	if !offered {
		t.Skip("the server offers no pgmq extension >= 1.5 (run with PGFLOW_TEST_DATABASE_URL naming a server that does)")
	}

	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	exec := func(sql string) {
		t.Helper()
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	exec(`do $$ begin create role pgflow_owner nologin; exception when duplicate_object or unique_violation then null; end $$`)
	exec(`grant create on database ` + pgx.Identifier{db.Name}.Sanitize() + ` to pgflow_owner`)
	exec(`set role pgflow_owner`)
	mode, err := schema.InstallPGMQ(ctx, conn, schema.PGMQPreferExtension)
	require.NoError(t, err)
	require.Equal(t, schema.PGMQExtension, mode)
	_, err = schema.NewMigrator(conn, nil).Up(ctx, "") // as pgflow_owner, as roles.sql asks
	require.NoError(t, err)

	rolesSQL, err := schema.OptionalSQL("roles")
	require.NoError(t, err)
	exec(`select pgflow.create_flow('before')`)
	exec(`reset role`)
	exec(rolesSQL)
	exec(rolesSQL) // idempotent
	exec(`set role pgflow_owner`)
	exec(`select pgflow.create_flow('after')`)
	exec(`select pgflow.add_step('after', 'a')`)
	exec(`select pgflow.start_flow('after', '{}'::jsonb)`)
	exec(`reset role`)

	for _, q := range []string{"before", "after"} {
		for _, table := range []string{"pgmq.q_" + q, "pgmq.a_" + q} {
			var owner string
			var member, ownerAll, workerAll, clientAny bool
			require.NoError(t, conn.QueryRow(ctx, `
select pg_catalog.pg_get_userbyid(c.relowner)::text,
       exists (select 1 from pg_catalog.pg_depend as d
                where d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass and d.objid = c.oid and d.deptype = 'e'),
       pg_catalog.has_table_privilege('pgflow_owner', c.oid, 'select, insert, update, delete'),
       pg_catalog.has_table_privilege('pgflow_worker', c.oid, 'select')
         and pg_catalog.has_table_privilege('pgflow_worker', c.oid, 'insert')
         and pg_catalog.has_table_privilege('pgflow_worker', c.oid, 'update')
         and pg_catalog.has_table_privilege('pgflow_worker', c.oid, 'delete'),
       pg_catalog.has_table_privilege('pgflow_client', c.oid, 'select, insert, update, delete')
  from pg_catalog.pg_class as c where c.oid = $1::text::pg_catalog.regclass`, table).
				Scan(&owner, &member, &ownerAll, &workerAll, &clientAny))
			require.Equal(t, "pgflow_owner", owner, table)
			require.True(t, member, "%s is a member of the pgmq extension", table)
			require.True(t, ownerAll, table)
			require.True(t, workerAll, table)
			require.False(t, clientAny, table)
		}
	}

	// The worker role polls the queue pgflow_owner created after roles.sql ran.
	exec(`set role pgflow_worker`)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `select count(*) from pgmq.read('after', 30, 10)`).Scan(&n))
	require.Equal(t, 1, n)
	exec(`reset role`)
}
