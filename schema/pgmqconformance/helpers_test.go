// Package pgmqconformance_test pins the PGMQ 1.5 behaviour pgflow-go relies on. It runs against whatever
// pgtest.NewWithPGMQ installs: the bundled SQL-only layer, or the real pgmq extension when PGFLOW_PGMQ=extension
// (and the server offers it). The same tests must pass unchanged against both.
package pgmqconformance_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// message is one pgmq.message_record.
type message struct {
	MsgID      int64
	ReadCt     int32
	EnqueuedAt time.Time
	VT         time.Time
	Message    map[string]any
	Headers    map[string]any
}

// archived is one row of pgmq.a_<queue>.
type archived struct {
	MsgID      int64
	ReadCt     int32
	EnqueuedAt time.Time
	ArchivedAt time.Time
	VT         time.Time
	Message    map[string]any
	Headers    map[string]any
}

// queueRow is one pgmq.queue_record.
type queueRow struct {
	QueueName     string
	IsPartitioned bool
	IsUnlogged    bool
	CreatedAt     time.Time
}

// metricsRow is one pgmq.metrics_result.
type metricsRow struct {
	QueueName          string
	QueueLength        int64
	NewestMsgAgeSec    *int32
	OldestMsgAgeSec    *int32
	TotalMessages      int64
	ScrapeTime         time.Time
	QueueVisibleLength int64
}

const (
	msgInvalidChars = `queue name contains invalid characters: $, ;, --, or \'`
	msgTooLong      = "queue name is too long, maximum length is 48 characters"
)

// setup gives the test its own database with PGMQ and a context bounded by the test's life.
func setup(t *testing.T) (context.Context, *pgxpool.Pool) {
	t.Helper()
	db := pgtest.NewWithPGMQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, db.Pool
}

func createQueue(t *testing.T, ctx context.Context, pool *pgxpool.Pool, name string) {
	t.Helper()
	_, err := pool.Exec(ctx, "select pgmq.create($1)", name)
	require.NoError(t, err, "pgmq.create(%q)", name)
}

func sendOne(t *testing.T, ctx context.Context, pool *pgxpool.Pool, queue, body string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.send($1, $2::jsonb)", queue, body).Scan(&id))
	return id
}

// sendMany sends n messages {"n": i} one by one and returns their ids.
func sendMany(t *testing.T, ctx context.Context, pool *pgxpool.Pool, queue string, n int) []int64 {
	t.Helper()
	ids := make([]int64, 0, n)
	for i := range n {
		var id int64
		require.NoError(t, pool.QueryRow(ctx, "select pgmq.send($1, jsonb_build_object('n', $2::int))", queue, i).Scan(&id))
		ids = append(ids, id)
	}
	return ids
}

func queryMessages(t *testing.T, ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) []message {
	t.Helper()
	rows, err := q.Query(ctx, sql, args...)
	require.NoError(t, err, sql)
	msgs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[message])
	require.NoError(t, err, sql)
	return msgs
}

func queryIDs(t *testing.T, ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) []int64 {
	t.Helper()
	rows, err := pool.Query(ctx, sql, args...)
	require.NoError(t, err, sql)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err, sql)
	return ids
}

func readMessages(t *testing.T, ctx context.Context, pool *pgxpool.Pool, queue string, vt, qty int) []message {
	t.Helper()
	return queryMessages(t, ctx, pool, "select * from pgmq.read($1, $2::int, $3::int)", queue, vt, qty)
}

func archiveRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, queue string) []archived {
	t.Helper()
	sql := "select msg_id, read_ct, enqueued_at, archived_at, vt, message, headers from pgmq." +
		pgx.Identifier{"a_" + queue}.Sanitize() + " order by msg_id"
	rows, err := pool.Query(ctx, sql)
	require.NoError(t, err, sql)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[archived])
	require.NoError(t, err, sql)
	return out
}

func listQueues(t *testing.T, ctx context.Context, pool *pgxpool.Pool) []queueRow {
	t.Helper()
	rows, err := pool.Query(ctx, "select * from pgmq.list_queues()")
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[queueRow])
	require.NoError(t, err)
	slices.SortFunc(out, func(a, b queueRow) int {
		switch {
		case a.QueueName < b.QueueName:
			return -1
		case a.QueueName > b.QueueName:
			return 1
		}
		return 0
	})
	return out
}

func queueNames(rows []queueRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.QueueName
	}
	return out
}

func ids(msgs []message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.MsgID
	}
	return out
}

// sortedIDs returns the ids of msgs in ascending order: PGMQ does not promise the order of rows it returns.
func sortedIDs(msgs []message) []int64 {
	out := ids(msgs)
	slices.Sort(out)
	return out
}

func countRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, table string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(ctx, "select count(*) from pgmq."+pgx.Identifier{table}.Sanitize()).Scan(&n))
	return n
}

// relationExists reports whether pgmq.<name> exists (name taken literally, no case folding).
func relationExists(t *testing.T, ctx context.Context, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(ctx,
		"select exists (select 1 from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'pgmq' and c.relname = $1)",
		name).Scan(&ok))
	return ok
}

// requirePgError requires err to be a server error with the given SQLSTATE and exact message.
func requirePgError(t *testing.T, err error, code, msg string) {
	t.Helper()
	require.Error(t, err)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a server error, got %T: %v", err, err)
	require.Equal(t, code, pgErr.Code, "SQLSTATE of %q", pgErr.Message)
	require.Equal(t, msg, pgErr.Message)
}
