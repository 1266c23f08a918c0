package definitions_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// newDB returns the pool of a fresh, fully migrated database of the test's own.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return pgtest.New(t).Pool
}

// newDBFull is newDB for tests that also need the database's URL.
func newDBFull(t *testing.T) *pgtest.DB {
	t.Helper()
	return pgtest.New(t)
}

// mustExec runs statements that the test needs to succeed.
func mustExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err, "exec %s", sql)
}

// queryVal scans the single value of a one-row query.
func queryVal[T any](t *testing.T, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&v), "query %s", sql)
	return v
}

// requirePgError asserts that err is a PostgreSQL error with the given SQLSTATE (when not empty) and exact message.
func requirePgError(t *testing.T, err error, code, message string) *pgconn.PgError {
	t.Helper()
	require.Error(t, err)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "expected a PostgreSQL error, got %v", err)
	if code != "" {
		require.Equal(t, code, pgErr.Code, "SQLSTATE of %q", pgErr.Message)
	}
	require.Equal(t, message, pgErr.Message)
	return pgErr
}

// execErr runs sql and returns its error (for statements that must fail).
func execErr(pool *pgxpool.Pool, sql string, args ...any) error {
	_, err := pool.Exec(context.Background(), sql, args...)
	return err
}

// queueExists reports whether PGMQ lists a queue of exactly this name.
func queueExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	return queryVal[bool](t, pool, `select exists (select 1 from pgmq.list_queues() where queue_name = $1)`, name)
}

// count returns count(*) of a query's rows.
func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	return queryVal[int](t, pool, `select count(*)::int from (`+sql+`) as c`, args...)
}

// waitUntilBlocked polls until the backend pid waits for a heavyweight lock (row, transaction or advisory lock).
// finished reports whether the blocked call already returned, which fails the test: it should have waited.
func waitUntilBlocked(t *testing.T, pool *pgxpool.Pool, pid uint32, finished func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if queryVal[bool](t, pool, `select exists (select 1 from pg_locks where pid = $1 and not granted)`, int64(pid)) {
			return
		}
		require.False(t, finished(), "the concurrent call finished instead of waiting for the open transaction")
		require.True(t, time.Now().Before(deadline), "the concurrent call never waited for a lock")
		time.Sleep(10 * time.Millisecond)
	}
}
