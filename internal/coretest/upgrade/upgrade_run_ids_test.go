package upgrade_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// The v0.20.0 migration grants pgflow._new_run_id() and pgflow._new_run_ids(integer) to the roles that could start runs (execute on start_flow or
// start_flows) or insert them (the column default runs as the inserting role) before it. A role that could start
// runs keeps starting them even where PUBLIC cannot execute the new function (roles.sql's default privileges
// revoke it from PUBLIC for functions pgflow_owner creates), and its runs get version 7 ids.
func TestUpgradeToV020GrantsNewRunIDToStarters(t *testing.T) {
	t.Parallel()
	db := newAt(t, "v0.19.0")
	ctx := fx.Ctx(t)

	fx.Exec(t, db.Pool, "select pgflow.create_flow('up'); select pgflow.add_step('up', 'a')")
	starter, inserter, bystander := newRole(t, db.URL), newRole(t, db.URL), newRole(t, db.URL)
	fx.Exec(t, db.Pool, fmt.Sprintf(`grant usage on schema pgflow, pgmq to %[1]s, %[2]s, %[3]s;
		grant execute on all functions in schema pgflow, pgmq to %[1]s;
		grant select, insert, update on all tables in schema pgflow to %[1]s;
		grant select, insert, update, delete on all tables in schema pgmq to %[1]s;
		grant usage, select, update on all sequences in schema pgmq to %[1]s;
		grant select, insert on pgflow.runs to %[2]s;
		grant select on pgflow.runs to %[3]s`, starter, inserter, bystander))

	_, err := db.upTo(t, "v0.20.0")
	require.NoError(t, err)
	fx.Exec(t, db.Pool, "revoke execute on function pgflow._new_run_id(), pgflow._new_run_ids(integer) from public")

	for _, fn := range []string{"pgflow._new_run_id()", "pgflow._new_run_ids(integer)"} {
		granted := executors(t, db.Pool, fn)
		require.Contains(t, granted, starter, fn)
		require.Contains(t, granted, inserter, fn)
		require.NotContains(t, granted, bystander, "%s: a role that can neither start nor insert runs gets nothing", fn)
	}

	// Who could start runs with start_flow_with_states may start several with start_flows_with_states.
	canBatch := executors(t, db.Pool, "pgflow.start_flows_with_states(text, jsonb[])")
	require.Contains(t, canBatch, starter)
	require.NotContains(t, canBatch, inserter)
	require.NotContains(t, canBatch, bystander)

	as := connectAs(t, db.URL, starter)
	var id string
	require.NoError(t, as.QueryRow(ctx, `select r.run_id::text from pgflow.start_flow('up', '{}') as r`).Scan(&id))
	require.Equal(t, byte('7'), id[14], "version 7: %s", id)
	require.NoError(t, as.QueryRow(ctx, `select r.run_id::text from pgflow.start_flows('up', array['{}'::jsonb]) as r`).Scan(&id))
	require.Equal(t, byte('7'), id[14], "version 7: %s", id)
}

// newRole creates a login role and, when the test ends, drops what it was granted in the database at dbURL and
// then the role (roles are cluster-wide; their grants keep them alive until revoked).
func newRole(t *testing.T, dbURL string) string {
	t.Helper()
	ctx := context.Background()
	adminURL, err := url.Parse(pgtest.AdminURL(t))
	require.NoError(t, err)
	target, err := url.Parse(dbURL)
	require.NoError(t, err)
	adminURL.Path = target.Path // the superuser, in the test's database
	admin, err := pgx.Connect(ctx, adminURL.String())
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	var name string
	require.NoError(t, admin.QueryRow(ctx, `select 'runids_' || substr(md5(random()::text), 1, 10)`).Scan(&name))
	_, err = admin.Exec(ctx, fmt.Sprintf("create role %s login nosuperuser", name))
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), fmt.Sprintf("drop owned by %[1]s; drop role %[1]s", name)); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	return name
}

func connectAs(t *testing.T, dbURL, role string) *pgx.Conn {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.User = url.User(role)
	c, err := pgx.Connect(context.Background(), u.String())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// executors returns the roles other than the owner and PUBLIC that may execute fn (a regprocedure text).
func executors(t *testing.T, db fx.DB, fn string) []string {
	t.Helper()
	return fx.Val[[]string](t, db, `select coalesce(array_agg(a.grantee::regrole::text order by 1), '{}')
		from pg_proc as p cross join lateral aclexplode(p.proacl) as a
		where p.oid = $1::regprocedure and a.privilege_type = 'EXECUTE' and a.grantee <> p.proowner and a.grantee <> 0`, fn)
}
