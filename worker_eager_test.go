package pgflow

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// eagerTask is what the database says about a run's only task, and whether it was claimed in the transaction
// that started the run (the same transaction has the same now(): no other claim can share it).
type eagerTask struct {
	Status      string
	Worker      *string
	InStartTx   bool
	Attempts    int
	MessageSeen bool // the message's read count says it was read once (by the claim)
}

func eagerTaskOf(t *testing.T, pool *pgxpool.Pool, runID string) eagerTask {
	t.Helper()
	var e eagerTask
	require.NoError(t, pool.QueryRow(context.Background(), `
		select t.status, t.last_worker_id::text, t.started_at is not distinct from r.started_at, t.attempts_count,
		       coalesce((select m.read_ct = 1 from pgmq.q_eager as m where m.msg_id = t.message_id),
		                (select a.read_ct = 1 from pgmq.a_eager as a where a.msg_id = t.message_id), false)
		  from pgflow.step_tasks as t join pgflow.runs as r using (run_id)
		 where t.run_id = $1`, runID).Scan(&e.Status, &e.Worker, &e.InStartTx, &e.Attempts, &e.MessageSeen))
	return e
}

// waitEagerReady waits until the worker's poller takes reservations (its Run has begun reading), so that the
// next start of the flow through c finds free slots.
func waitEagerReady(t *testing.T, c *Client, flowSlug string) {
	t.Helper()
	waitFor(t, "the worker's poller of "+flowSlug+" takes reservations", func() bool {
		r := c.reserveEager(flowSlug, 1)
		if r == nil {
			return false
		}
		r.Cancel()
		return true
	})
}

func TestEagerStartsClaimTheStartedTasksInTheStartTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("eager")
	Step(f, "double", func(ctx context.Context, tk *Task[int]) (int, error) {
		in, err := tk.FlowInput(ctx)
		return in * 2, err
	})

	cfg, _ := testConfig(t)
	cfg.EagerStarts = true
	rw := startWorker(t, db.Pool, f, cfg)
	c := rw.w.client
	waitEagerReady(t, c, "eager")

	run, err := StartRun(context.Background(), c, f, 21, nil)
	require.NoError(t, err)
	res := waitRun(t, db.Pool, run.ID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"double": 42}`, string(res.Output))
	task := eagerTaskOf(t, db.Pool, run.ID)
	require.True(t, task.InStartTx, "the task was claimed by the start's transaction")
	require.NotNil(t, task.Worker)
	require.Equal(t, rw.w.ID(), *task.Worker)
	require.Equal(t, 1, task.Attempts)
	require.True(t, task.MessageSeen, "the message was read once, by the start's claim")

	// The same worker without EagerStarts claims through its poller, in a transaction of its own.
	require.NoError(t, rw.stop(t))
	cfg.EagerStarts = false
	rw = startWorker(t, db.Pool, f, cfg)
	run, err = StartRun(context.Background(), rw.w.client, f, 1, nil)
	require.NoError(t, err)
	require.Equal(t, "completed", waitRun(t, db.Pool, run.ID).Status)
	task = eagerTaskOf(t, db.Pool, run.ID)
	require.False(t, task.InStartTx, "without EagerStarts the claim is a transaction of its own")
	require.Equal(t, rw.w.ID(), *task.Worker)
}

func TestEagerStartsTakeOnlyFreeSlotsAndNothingOnceStopped(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("eager")
	release := make(chan struct{})
	Step(f, "wait", func(ctx context.Context, tk *Task[int]) (int, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return tk.FlowInput(ctx)
	})

	cfg, _ := testConfig(t)
	cfg.EagerStarts = true
	cfg.MaxConcurrent = 1
	rw := startWorker(t, db.Pool, f, cfg)
	c := rw.w.client
	waitEagerReady(t, c, "eager")

	first, err := StartRun(context.Background(), c, f, 1, nil)
	require.NoError(t, err)
	task := eagerTaskOf(t, db.Pool, first.ID)
	require.Equal(t, "started", task.Status)
	require.True(t, task.InStartTx)

	// The one slot is busy: the next start claims nothing, and its task waits in the queue.
	second, err := StartRun(context.Background(), c, f, 2, nil)
	require.NoError(t, err)
	require.Equal(t, "queued", eagerTaskOf(t, db.Pool, second.ID).Status)

	close(release)
	require.Equal(t, "completed", waitRun(t, db.Pool, first.ID).Status)
	require.Equal(t, "completed", waitRun(t, db.Pool, second.ID).Status)
	second2 := eagerTaskOf(t, db.Pool, second.ID)
	require.False(t, second2.InStartTx, "claimed later, by the poller")
	require.Equal(t, 1, second2.Attempts)

	// A stopped worker takes nothing: the client still starts runs, and their tasks stay queued.
	require.NoError(t, rw.stop(t))
	require.Nil(t, c.reserveEager("eager", 1))
	third, err := StartRun(context.Background(), c, f, 3, nil)
	require.NoError(t, err)
	third2 := eagerTaskOf(t, db.Pool, third.ID)
	require.Equal(t, "queued", third2.Status)
	require.Nil(t, third2.Worker)
}

// Many concurrent starts through one EagerStarts worker's client: every run completes, every task ran once.
func TestEagerStartsUnderConcurrentStarts(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("eager")
	Step(f, "id", func(ctx context.Context, tk *Task[int]) (int, error) { return tk.FlowInput(ctx) })

	cfg, _ := testConfig(t)
	cfg.EagerStarts = true
	cfg.MaxConcurrent = 4
	cfg.BatchSize = 4
	rw := startWorker(t, db.Pool, f, cfg)
	c := rw.w.client
	waitEagerReady(t, c, "eager")

	const n = 200
	ids := make(chan string, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			r, err := StartRun(context.Background(), c, f, i, nil)
			if err != nil {
				errs <- err
				return
			}
			ids <- r.ID
		}()
	}
	deadline := time.After(waitTimeout)
	for range n {
		select {
		case err := <-errs:
			require.NoError(t, err)
		case id := <-ids:
			require.Equal(t, "completed", waitRun(t, db.Pool, id).Status)
		case <-deadline:
			t.Fatal("starts did not return")
		}
	}
	var tasks, once, eager int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		select count(*), count(*) filter (where t.attempts_count = 1 and t.status = 'completed'),
		       count(*) filter (where t.started_at = r.started_at)
		  from pgflow.step_tasks as t join pgflow.runs as r using (run_id)
		 where r.flow_slug = 'eager'`).Scan(&tasks, &once, &eager))
	require.Equal(t, n, tasks)
	require.Equal(t, n, once)
	require.Positive(t, eager, "some tasks were claimed by their start")
}
