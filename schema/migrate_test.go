package schema_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/schema"
)

func openConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestEmbeddedMigrationsAreWellFormed(t *testing.T) {
	t.Parallel()
	migs, err := schema.Migrations()
	require.NoError(t, err)
	require.NotEmpty(t, migs, "no migrations embedded")
	require.Equal(t, "v0.16.0", migs[0].Version, "the lineage starts at v0.16.0")
	for i, m := range migs {
		require.Equal(t, i+1, m.Seq)
		require.NotEmpty(t, strings.TrimSpace(m.SQL), m.File)
	}
}

// Released migrations are never edited: RELEASED pins each released file's checksum.
func TestReleasedMigrationsAreUnchanged(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("sql", "migrations", "RELEASED"))
	if os.IsNotExist(err) {
		t.Fatalf("schema/sql/migrations/RELEASED is missing; it must list every released migration with its sha256")
	}
	require.NoError(t, err)
	migs, err := schema.Migrations()
	require.NoError(t, err)
	byFile := map[string]schema.Migration{}
	for _, m := range migs {
		byFile[m.File] = m
	}
	pinned := 0
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		require.Len(t, f, 2, "RELEASED line %q must be: FILE SHA256", line)
		m, ok := byFile[f[0]]
		require.True(t, ok, "released migration %s is no longer embedded", f[0])
		require.Equal(t, f[1], m.Checksum(), "released migration %s was edited; add a new migration instead", f[0])
		pinned++
	}
	require.NotZero(t, pinned, "RELEASED pins no migration")
}

func TestUpAppliesEverythingAndIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	conn := openConn(t, db.URL)
	migs, err := schema.Migrations()
	require.NoError(t, err)

	report, err := schema.NewMigrator(conn, nil).Up(ctx, "")
	require.NoError(t, err)
	require.Len(t, report.Applied, len(migs))
	require.Equal(t, migs[len(migs)-1].Version, report.Current)
	require.NotEmpty(t, report.PGMQ)

	again, err := schema.NewMigrator(conn, nil).Up(ctx, "")
	require.NoError(t, err)
	require.Empty(t, again.Applied)
	require.Equal(t, report.Current, again.Current)

	st, err := schema.NewMigrator(conn, nil).Status(ctx)
	require.NoError(t, err)
	require.Empty(t, st.Pending)
	for _, m := range st.Migrations {
		require.True(t, m.Applied, m.Version)
	}
}

func TestUpToVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	conn := openConn(t, db.URL)

	report, err := schema.NewMigrator(conn, nil).Up(ctx, "0.16.0")
	require.NoError(t, err)
	require.Equal(t, "v0.16.0", report.Current)

	_, err = schema.NewMigrator(conn, nil).Up(ctx, "v9.9.9")
	require.ErrorContains(t, err, `unknown version "v9.9.9"`)
	require.ErrorContains(t, err, "v0.16.0")
}

func TestConcurrentUpAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	migs, err := schema.Migrations()
	require.NoError(t, err)

	const n = 3
	reports := make([]*schema.UpReport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		conn := openConn(t, db.URL)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			reports[i], errs[i] = schema.NewMigrator(conn, nil).Up(ctx, "")
		}()
	}
	close(start)
	wg.Wait()
	total := 0
	for i := range n {
		require.NoError(t, errs[i])
		total += len(reports[i].Applied)
	}
	require.Equal(t, len(migs), total, "each migration applied exactly once across concurrent migrators")

	var rows int
	require.NoError(t, db.Pool.QueryRow(ctx, "select count(*) from pgflow.schema_migrations").Scan(&rows))
	require.Equal(t, len(migs), rows)
}

func TestFailingMigrationLeavesNoTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	conn := openConn(t, db.URL)

	good := schema.Migration{Seq: 1, Version: "v0.0.1", File: "0001_v0.0.1.sql",
		SQL: "create table pgflow.first_table (id int);"}
	bad := schema.Migration{Seq: 2, Version: "v0.0.2", File: "0002_v0.0.2.sql",
		SQL: "create table pgflow.second_table (id int); select 1/0;"}

	// Failing first migration: not even the version table or schema survives.
	m := schema.NewMigrator(conn, nil)
	schema.SetMigrationsForTest(m, []schema.Migration{{Seq: 1, Version: "v0.0.1", File: "0001_v0.0.1.sql",
		SQL: "create table pgflow.first_table (id int); select 1/0;"}})
	_, err := m.Up(ctx, "")
	require.ErrorContains(t, err, "v0.0.1")
	require.ErrorContains(t, err, "division by zero")
	var exists bool
	require.NoError(t, conn.QueryRow(ctx, "select to_regnamespace('pgflow') is not null").Scan(&exists))
	require.False(t, exists, "a failed first migration must not leave schema pgflow behind")

	// Failing second migration: the first stays applied, nothing of the second remains.
	m = schema.NewMigrator(conn, nil)
	schema.SetMigrationsForTest(m, []schema.Migration{good, bad})
	_, err = m.Up(ctx, "")
	require.ErrorContains(t, err, "v0.0.2")
	require.NoError(t, conn.QueryRow(ctx, "select to_regclass('pgflow.first_table') is not null").Scan(&exists))
	require.True(t, exists)
	require.NoError(t, conn.QueryRow(ctx, "select to_regclass('pgflow.second_table') is not null").Scan(&exists))
	require.False(t, exists)
	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, "v0.0.1", st.Current)
	require.Equal(t, []string{"v0.0.2"}, st.Pending)
}

func TestLockTimeoutBoundsTheWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	conn := openConn(t, db.URL)
	holder := openConn(t, db.URL)

	first := schema.Migration{Seq: 1, Version: "v0.0.1", File: "0001_v0.0.1.sql", SQL: "create table pgflow.t (id int);"}
	second := schema.Migration{Seq: 2, Version: "v0.0.2", File: "0002_v0.0.2.sql", SQL: "alter table pgflow.t add column x int;"}
	m := schema.NewMigrator(conn, &schema.MigratorConfig{LockTimeout: 200 * time.Millisecond})
	schema.SetMigrationsForTest(m, []schema.Migration{first})
	_, err := m.Up(ctx, "")
	require.NoError(t, err)

	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "lock table pgflow.t in access share mode")
	require.NoError(t, err)

	m = schema.NewMigrator(conn, &schema.MigratorConfig{LockTimeout: 200 * time.Millisecond})
	schema.SetMigrationsForTest(m, []schema.Migration{first, second})
	_, err = m.Up(ctx, "")
	require.ErrorContains(t, err, "lock timeout")
	require.ErrorContains(t, err, "v0.0.2")
}

func TestUpRefusesADatabaseNewerThanTheBinary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	conn := openConn(t, db.URL)
	one := schema.Migration{Seq: 1, Version: "v0.0.1", File: "0001_v0.0.1.sql", SQL: "select 1;"}
	two := schema.Migration{Seq: 2, Version: "v0.0.2", File: "0002_v0.0.2.sql", SQL: "select 2;"}
	m := schema.NewMigrator(conn, nil)
	schema.SetMigrationsForTest(m, []schema.Migration{one, two})
	_, err := m.Up(ctx, "")
	require.NoError(t, err)

	old := schema.NewMigrator(conn, nil)
	schema.SetMigrationsForTest(old, []schema.Migration{one, {Seq: 2, Version: "v0.0.3", File: "0002_v0.0.3.sql", SQL: "select 3;"}})
	_, err = old.Up(ctx, "")
	require.ErrorContains(t, err, "v0.0.2")
	require.ErrorContains(t, err, "does not know")
	st, err := old.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"v0.0.2"}, st.Unknown)
}

func TestExportWritesAppliableFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	files, err := schema.Export(dir)
	require.NoError(t, err)
	migs, err := schema.Migrations()
	require.NoError(t, err)
	require.Len(t, files, len(migs))

	// Applying the exported files by hand (as another runner would) yields a database the migrator considers
	// up to date.
	db := pgtest.NewWithPGMQ(t)
	conn := openConn(t, db.URL)
	for _, f := range files {
		body, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, string(body))
			return err
		}), f)
	}
	report, err := schema.NewMigrator(conn, nil).Up(ctx, "")
	require.NoError(t, err)
	require.Empty(t, report.Applied)
	require.Equal(t, migs[len(migs)-1].Version, report.Current)
}
