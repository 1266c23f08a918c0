package queueidentity_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/schema"
)

// newDB returns the pool of a fresh database of the test's own, migrated to the latest version.
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return pgtest.New(t).Pool
}

// newV016DB returns a fresh database migrated to v0.16.0 only, and a function that upgrades it to the latest version.
func newV016DB(t *testing.T) (*pgtest.DB, func()) {
	t.Helper()
	db := pgtest.NewWithPGMQ(t)
	conn, err := pgx.Connect(fx.Ctx(t), db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = schema.NewMigrator(conn, nil).Up(fx.Ctx(t), "v0.16.0")
	require.NoError(t, err)
	return db, func() {
		t.Helper()
		report, err := schema.NewMigrator(conn, nil).Up(fx.Ctx(t), "")
		require.NoError(t, err)
		migs, err := schema.Migrations()
		require.NoError(t, err)
		require.Equal(t, migs[len(migs)-1].Version, report.Current)
	}
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

func execErr(db fx.DB, sql string, args ...any) error {
	_, err := db.Exec(context.Background(), sql, args...)
	return err
}

func count(t *testing.T, db fx.DB, sql string, args ...any) int {
	t.Helper()
	return fx.Val[int](t, db, `select count(*)::int from (`+sql+`) as c`, args...)
}

// listed returns the spellings PGMQ lists whose lower case is name.
func listed(t *testing.T, db fx.DB, name string) []string {
	t.Helper()
	return fx.Val[[]string](t, db, `select coalesce(array_agg(queue_name::text order by queue_name), '{}')
		from pgmq.list_queues() where lower(queue_name) = lower($1)`, name)
}

// tableExists reports whether pgmq.<table> exists (test-side inspection only).
func tableExists(t *testing.T, db fx.DB, table string) bool {
	t.Helper()
	return fx.Val[bool](t, db, `select to_regclass('pgmq.' || quote_ident($1)) is not null`, table)
}

// msgState is what the tests compare to prove a message was not touched.
type msgState struct {
	VT     time.Time
	ReadCt int
}

func messageState(t *testing.T, db fx.DB, queue string, id int64) msgState {
	t.Helper()
	var s msgState
	require.NoError(t, db.QueryRow(fx.Ctx(t), fmt.Sprintf("select vt, read_ct from pgmq.%s where msg_id = $1",
		pgx.Identifier{"q_" + queue}.Sanitize()), id).Scan(&s.VT, &s.ReadCt), "message %d of queue %s", id, queue)
	return s
}

// decoys are messages put into a queue that no task uses, with the same ids the fixture queue gives its tasks.
// A message operation that rebuilt the queue from the flow slug instead of using the task's stored queue would hit
// one of them.
type decoys struct {
	queue  string
	states map[int64]msgState
}

// sendDecoys sends n messages (invisible for an hour) to queue, which must be new, so they get ids 1..n.
func sendDecoys(t *testing.T, db fx.DB, queue string, n int) decoys {
	t.Helper()
	ids := fx.Val[[]int64](t, db, `select array_agg(id order by id)
		from pgmq.send_batch($1, array(select jsonb_build_object('decoy', i) from generate_series(1, $2) as i), 3600) as id`,
		queue, n)
	d := decoys{queue: queue, states: map[int64]msgState{}}
	for _, id := range ids {
		d.states[id] = messageState(t, db, queue, id)
	}
	require.Contains(t, d.states, int64(1), "decoys must start at id 1 (a fresh queue)")
	return d
}

// requireUntouched fails unless every decoy is still in its queue with its visibility and read count unchanged and
// none of them was archived or deleted.
func (d decoys) requireUntouched(t *testing.T, db fx.DB) {
	t.Helper()
	for id, want := range d.states {
		require.True(t, fx.InQueue(t, db, d.queue, id), "decoy %d of queue %s was removed", id, d.queue)
		require.False(t, fx.InArchive(t, db, d.queue, id), "decoy %d of queue %s was archived", id, d.queue)
		require.Equal(t, want, messageState(t, db, d.queue, id), "decoy %d of queue %s was changed", id, d.queue)
	}
}

// requireSnapshots fails unless the run has tasks and every one of them stored queue.
func requireSnapshots(t *testing.T, db fx.DB, runID, queue string) {
	t.Helper()
	tasks := fx.GetTasks(t, db, runID, "")
	require.NotEmpty(t, tasks)
	for _, tk := range tasks {
		require.Equal(t, queue, tk.QueueName, "task %s/%d", tk.StepSlug, tk.TaskIndex)
	}
}

// routedFlow defines a flow with the given add_step calls (SQL), routes all its steps to the fixture queue and puts
// decoys into the flow's own queue.
func routedFlow(t *testing.T, db fx.DB, flow string, stmts ...string) decoys {
	t.Helper()
	for _, s := range stmts {
		fx.Exec(t, db, s)
	}
	fx.RouteSteps(t, db, flow, fx.FixtureQueue)
	fx.EnsureWorker(t, db, fx.FixtureQueue, fx.DefaultWorker)
	return sendDecoys(t, db, flow, 20)
}

// waitUntilBlocked polls until the backend pid waits for a lock; finished reports whether the blocked call already
// returned, which fails the test.
func waitUntilBlocked(t *testing.T, db fx.DB, pid uint32, finished func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !fx.Val[bool](t, db, `select exists (select 1 from pg_locks where pid = $1 and not granted)`, int64(pid)) {
		require.False(t, finished(), "the concurrent call finished instead of waiting for the lock")
		require.True(t, time.Now().Before(deadline), "the concurrent call never waited for a lock")
		time.Sleep(10 * time.Millisecond)
	}
}
