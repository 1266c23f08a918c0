package schema_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/schema"
)

func pgmqCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func pgmqConnect(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// serverOffersPGMQ reports whether the test server could create the pgmq extension at version >= 1.5.
func serverOffersPGMQ(t *testing.T, ctx context.Context, pool *pgxpool.Pool) bool {
	t.Helper()
	var offered bool
	require.NoError(t, pool.QueryRow(ctx, `
select exists (select 1 from pg_available_extension_versions
               where name = 'pgmq' and string_to_array(version, '.')::int[] >= array[1, 5])`).Scan(&offered))
	return offered
}

func schemaComment(t *testing.T, ctx context.Context, pool *pgxpool.Pool) *string {
	t.Helper()
	var c *string
	require.NoError(t, pool.QueryRow(ctx,
		"select obj_description(oid, 'pg_namespace') from pg_namespace where nspname = 'pgmq'").Scan(&c))
	return c
}

func pgmqSchemaExists(t *testing.T, ctx context.Context, pool *pgxpool.Pool) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(ctx, "select exists (select 1 from pg_namespace where nspname = 'pgmq')").Scan(&ok))
	return ok
}

func TestInstallPGMQBundledIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := pgmqCtx(t)
	db := pgtest.NewEmpty(t)
	conn := pgmqConnect(t, ctx, db.URL)

	mode, err := schema.InstallPGMQ(ctx, conn, schema.PGMQPreferBundled)
	require.NoError(t, err)
	require.Equal(t, schema.PGMQBundled, mode)
	c := schemaComment(t, ctx, db.Pool)
	require.NotNil(t, c)
	require.Contains(t, *c, schema.BundledPGMQMarker)

	_, err = conn.Exec(ctx, "select pgmq.create('keep'); select pgmq.send('keep', '{\"x\": 1}')")
	require.NoError(t, err)

	// Already installed: nothing changes, whatever the preference.
	for _, prefer := range []string{"", schema.PGMQPreferAuto, schema.PGMQPreferBundled, schema.PGMQPreferExtension} {
		mode, err = schema.InstallPGMQ(ctx, conn, prefer)
		require.NoError(t, err, "prefer %q", prefer)
		require.Equal(t, schema.PGMQBundled, mode, "prefer %q", prefer)
	}
	var n int
	require.NoError(t, conn.QueryRow(ctx, "select count(*) from pgmq.q_keep").Scan(&n))
	require.Equal(t, 1, n)

	mode, found, err := schema.DetectPGMQ(ctx, conn)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, schema.PGMQBundled, mode)
}

func TestInstallPGMQWorksWithEmptySearchPathPool(t *testing.T) {
	t.Parallel()
	ctx := pgmqCtx(t)
	db := pgtest.NewEmpty(t) // db.Pool runs with search_path = ''

	mode, err := schema.InstallPGMQ(ctx, db.Pool, schema.PGMQPreferBundled)
	require.NoError(t, err)
	require.Equal(t, schema.PGMQBundled, mode)
	var id int64
	_, err = db.Pool.Exec(ctx, "select pgmq.create('q')")
	require.NoError(t, err)
	require.NoError(t, db.Pool.QueryRow(ctx, "select pgmq.send('q', '{}'::jsonb)").Scan(&id))
	require.EqualValues(t, 1, id)
}

func TestInstallPGMQAuto(t *testing.T) {
	t.Parallel()
	ctx := pgmqCtx(t)
	db := pgtest.NewEmpty(t)
	conn := pgmqConnect(t, ctx, db.URL)
	offered := serverOffersPGMQ(t, ctx, db.Pool)

	mode, err := schema.InstallPGMQ(ctx, conn, schema.PGMQPreferAuto)
	require.NoError(t, err)
	var extVersion *string
	require.NoError(t, conn.QueryRow(ctx, "select (select extversion from pg_extension where extname = 'pgmq')").Scan(&extVersion))
	if offered {
		require.Equal(t, schema.PGMQExtension, mode, "the server offers pgmq >= 1.5")
		require.NotNil(t, extVersion)
	} else {
		require.Equal(t, schema.PGMQBundled, mode, "the server offers no pgmq >= 1.5")
		require.Nil(t, extVersion)
	}
	_, err = conn.Exec(ctx, "select pgmq.create('auto_q')")
	require.NoError(t, err)
}

func TestInstallPGMQPreferExtension(t *testing.T) {
	t.Parallel()
	ctx := pgmqCtx(t)
	db := pgtest.NewEmpty(t)
	conn := pgmqConnect(t, ctx, db.URL)

	mode, err := schema.InstallPGMQ(ctx, conn, schema.PGMQPreferExtension)
	if serverOffersPGMQ(t, ctx, db.Pool) {
		require.NoError(t, err)
		require.Equal(t, schema.PGMQExtension, mode)
		return
	}
	require.Error(t, err)
	require.Contains(t, err.Error(), "pgmq")
	require.Contains(t, err.Error(), "install the pgmq extension")
	require.Contains(t, err.Error(), `"bundled"`)
	require.False(t, pgmqSchemaExists(t, ctx, db.Pool), "a failed install leaves nothing behind")
}

func TestInstallPGMQUnknownPreference(t *testing.T) {
	t.Parallel()
	ctx := pgmqCtx(t)
	db := pgtest.NewEmpty(t)

	_, err := schema.InstallPGMQ(ctx, db.Pool, "sometimes")
	require.ErrorContains(t, err, `"sometimes"`)
	require.False(t, pgmqSchemaExists(t, ctx, db.Pool))
}

func TestInstallPGMQJoinsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := pgmqCtx(t)
	db := pgtest.NewEmpty(t)
	conn := pgmqConnect(t, ctx, db.URL)

	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	mode, err := schema.InstallPGMQ(ctx, tx, schema.PGMQPreferBundled)
	require.NoError(t, err)
	require.Equal(t, schema.PGMQBundled, mode)
	require.NoError(t, tx.Rollback(ctx))
	require.False(t, pgmqSchemaExists(t, ctx, db.Pool), "rolling back the caller's transaction undoes the install")

	tx, err = conn.Begin(ctx)
	require.NoError(t, err)
	_, err = schema.InstallPGMQ(ctx, tx, schema.PGMQPreferBundled)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.True(t, pgmqSchemaExists(t, ctx, db.Pool))
}

func TestInstallPGMQFailureIsAtomicAndNamesTheFile(t *testing.T) {
	t.Parallel()
	ctx := pgmqCtx(t)
	db := pgtest.NewEmpty(t)
	conn := pgmqConnect(t, ctx, db.URL)

	// A half-made schema pgmq (no meta table, so not a PGMQ) that clashes with the layer's first type.
	_, err := conn.Exec(ctx, "create schema pgmq; create type pgmq.message_record as (x int)")
	require.NoError(t, err)

	_, err = schema.InstallPGMQ(ctx, conn, schema.PGMQPreferBundled)
	require.ErrorContains(t, err, "sql/pgmq/0010_type_message_record.sql")
	require.ErrorContains(t, err, "message_record")

	var metaExists bool
	require.NoError(t, conn.QueryRow(ctx, "select to_regclass('pgmq.meta') is not null").Scan(&metaExists))
	require.False(t, metaExists, "nothing of the failed install is left")
	require.Nil(t, schemaComment(t, ctx, db.Pool))
}

func TestInstallPGMQFindsPreexistingInstall(t *testing.T) {
	t.Parallel()
	ctx := pgmqCtx(t)

	t.Run("1.5 shape", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewEmpty(t)
		conn := pgmqConnect(t, ctx, db.URL)
		_, err := conn.Exec(ctx, `create schema pgmq;
create table pgmq.meta (queue_name varchar unique not null, is_partitioned boolean not null,
                        is_unlogged boolean not null, created_at timestamptz not null default now());
create type pgmq.message_record as (msg_id bigint, read_ct int, enqueued_at timestamptz, vt timestamptz,
                                    message jsonb, headers jsonb)`)
		require.NoError(t, err)

		mode, err := schema.InstallPGMQ(ctx, conn, schema.PGMQPreferBundled)
		require.NoError(t, err)
		require.Equal(t, schema.PGMQPreexisting, mode)
		require.Nil(t, schemaComment(t, ctx, db.Pool), "a preexisting install is left untouched")
	})

	t.Run("older than 1.5", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewEmpty(t)
		conn := pgmqConnect(t, ctx, db.URL)
		_, err := conn.Exec(ctx, `create schema pgmq;
create table pgmq.meta (queue_name varchar unique not null, is_partitioned boolean not null,
                        is_unlogged boolean not null, created_at timestamptz not null default now());
create type pgmq.message_record as (msg_id bigint, read_ct int, enqueued_at timestamptz, vt timestamptz,
                                    message jsonb)`)
		require.NoError(t, err)

		_, err = schema.InstallPGMQ(ctx, conn, schema.PGMQPreferAuto)
		require.ErrorContains(t, err, "older than 1.5")
		require.ErrorContains(t, err, "headers")
	})
}

func TestInstallPGMQConcurrentCallsDoNotRace(t *testing.T) {
	t.Parallel()
	ctx := pgmqCtx(t)
	db := pgtest.NewEmpty(t)

	const n = 4
	conns := make([]*pgx.Conn, n)
	for i := range conns {
		conns[i] = pgmqConnect(t, ctx, db.URL)
	}
	modes := make([]schema.PGMQMode, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			modes[i], errs[i] = schema.InstallPGMQ(ctx, conns[i], schema.PGMQPreferBundled)
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i], "installer %d", i)
		require.Equal(t, schema.PGMQBundled, modes[i], "installer %d", i)
	}
	var metaTables int
	require.NoError(t, db.Pool.QueryRow(ctx,
		"select count(*) from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'pgmq' and c.relname = 'meta'").
		Scan(&metaTables))
	require.Equal(t, 1, metaTables)
}

func TestBundledPGMQFilesAreOrderedAndFunctionsPinSearchPath(t *testing.T) {
	t.Parallel()
	files, err := schema.BundledPGMQFiles()
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for i := 1; i < len(files); i++ {
		require.Less(t, files[i-1].Name, files[i].Name)
	}
	require.Equal(t, "sql/pgmq/0001_schema.sql", files[0].Name)
	for _, f := range files {
		require.NotEmpty(t, f.SQL, f.Name)
		if strings.Contains(f.SQL, "create function") {
			require.Equal(t, 1, strings.Count(f.SQL, "create function pgmq."), "%s: one pgmq function per file", f.Name)
			require.Contains(t, f.SQL, "set search_path = pg_catalog, pg_temp", f.Name)
			require.True(t, strings.HasPrefix(f.SQL, "--"), "%s: starts with a comment saying what it guarantees", f.Name)
		}
	}
}
