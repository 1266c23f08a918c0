package poller

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/claimer"
	"github.com/pgflow-go/pgflow/internal/completer"
	"github.com/pgflow-go/pgflow/internal/executor"
	"github.com/pgflow-go/pgflow/internal/notify"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/taskrun"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// Two queues of one worker share its handler slots (here one). A poller that found its queue empty waits for a
// notification without holding any slot: the other queue's poller can read and claim meanwhile. Before, the idle
// poller kept the slots it had gathered for its read until its wait ended (here an hour: its periodic read), and a
// run of the other flow waited for that.
func TestAnIdlePollerLeavesTheSharedSlotsToTheOthers(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ids := map[string]string{"fa": "c0000000-0000-4000-8000-00000000000a", "fb": "c0000000-0000-4000-8000-00000000000b"}
	for flow, id := range ids {
		oneStepFlow(t, db, flow, id)
	}
	listener := notify.New(notify.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, db.URL) }})
	t.Cleanup(listener.Close)
	slots := NewSlots(1)
	startPoller := func(flow string) *countingDB {
		wake, err := listener.Subscribe(sqlapi.QueueChannel(flow))
		require.NoError(t, err)
		testutil.WaitClosed(t, "LISTEN on the queue's channel of "+flow, wake.Active())
		wake.Drain() // the poller's first read covers the first Resync
		read := &countingDB{DBTX: db.Pool}
		runPoller(t, db, Config{DB: db.Pool, Flow: flow, Queue: flow, WorkerID: ids[flow], BatchSize: 1, VisibilitySeconds: 30,
			MaxPollSeconds: 1, PollIntervalMs: 100, MaxPollWait: time.Hour, ListenPollInterval: time.Hour,
			Slots: slots, Wake: wake, Listener: listener}, read)
		return read
	}

	// fa's poller reads first, finds nothing and waits for news (an hour without any).
	fa := startPoller("fa")
	testutil.WaitFor(t, "the first read of fa's poller", func() bool { return fa.reads.Load() == 1 })
	fb := startPoller("fb")
	testutil.WaitFor(t, "the first read of fb's poller", func() bool { return fb.reads.Load() >= 1 })

	runID := testutil.StartRun(t, db.Pool, "fb", map[string]any{})
	require.Equal(t, "completed", testutil.WaitRun(t, db.Pool, runID).Status)
	require.Equal(t, int32(1), fa.reads.Load(), "fa's poller was not woken: it read once")
}

// A poller that does not listen waits for messages inside pgmq.read_with_poll (here for up to an hour) without
// holding a handler slot: the test takes the worker's only slot while the poller waits. The message the read then
// returns finds no free slot: the poller makes it visible again at once instead of keeping it hidden for its
// visibility timeout, and claims it once the slot is free again.
func TestAPollerWaitingInReadWithPollHoldsNoSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	const id = "c0000000-0000-4000-8000-0000000000c1"
	oneStepFlow(t, db, "fc", id)
	slots := NewSlots(1)
	runPoller(t, db, Config{DB: db.Pool, Flow: "fc", Queue: "fc", WorkerID: id, BatchSize: 1, VisibilitySeconds: 3600,
		MaxPollSeconds: 3600, PollIntervalMs: 20, Slots: slots}, db.Pool)

	// The poller takes the slot, then frees it for its wait in read_with_poll: once it waits there, this send
	// takes the slot.
	testutil.WaitFor(t, "the poller waits in pgmq.read_with_poll", func() bool {
		var waiting bool
		require.NoError(t, db.Pool.QueryRow(ctx, `select exists (select from pg_catalog.pg_stat_activity
			where state = 'active' and query like '%pgmq.read_with_poll%' and pid <> pg_catalog.pg_backend_pid())`).Scan(&waiting))
		return waiting
	})
	select {
	case slots <- struct{}{}:
	case <-time.After(testutil.WaitTimeout):
		t.Fatal("the poller kept the only slot while it waited for messages")
	}
	runID := testutil.StartRun(t, db.Pool, "fc", map[string]any{})
	var msgID int64
	testutil.WaitFor(t, "the poller read the message, found no slot and made it visible again", func() bool {
		var readCount int
		var visible bool
		err := db.Pool.QueryRow(ctx, `select m.msg_id, m.read_ct, m.vt <= clock_timestamp() from pgmq.q_fc as m`).
			Scan(&msgID, &readCount, &visible)
		require.NoError(t, err)
		return readCount >= 1 && visible
	})
	var status string
	require.NoError(t, db.Pool.QueryRow(ctx, `select status from pgflow.step_tasks where run_id = $1`, runID).Scan(&status))
	require.Equal(t, "queued", status, "not claimed without a slot")

	<-slots // free the slot: the poller claims the task now
	require.Equal(t, "completed", testutil.WaitRun(t, db.Pool, runID).Status)
}

// callCounter counts the pgmq.read_with_poll calls made through it, when they are sent.
type callCounter struct {
	sqlapi.DBTX
	readWithPoll atomic.Int32
}

func (c *callCounter) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if strings.Contains(sql, "read_with_poll") {
		c.readWithPoll.Add(1)
	}
	return c.DBTX.Query(ctx, sql, args...)
}

// A poller that is to listen makes its first read once its LISTEN is in effect: a notified read
// (read_and_start_tasks), not a wait inside pgmq.read_with_poll (here an hour long), which would hold a pool
// connection meanwhile. The listener's connection is held back until the poller runs, as at a worker's start.
func TestThePollersFirstReadWaitsForItsListener(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const id = "c0000000-0000-4000-8000-0000000000d1"
	oneStepFlow(t, db, "fd", id)
	gate := make(chan struct{})
	listener := notify.New(notify.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return pgx.Connect(ctx, db.URL)
		}})
	t.Cleanup(listener.Close)
	wake, err := listener.Subscribe(sqlapi.QueueChannel("fd"))
	require.NoError(t, err)
	calls := &callCounter{DBTX: db.Pool}
	reads := &countingDB{DBTX: db.Pool}
	runPoller(t, db, Config{DB: calls, Flow: "fd", Queue: "fd", WorkerID: id, BatchSize: 1, VisibilitySeconds: 30,
		MaxPollSeconds: 3600, PollIntervalMs: 20, MaxPollWait: time.Hour, ListenPollInterval: time.Hour,
		FirstListenWait: time.Hour, Slots: NewSlots(1), Wake: wake, Listener: listener}, reads)

	close(gate)
	// At least one: the LISTEN's first Resync may reach the poller after its first read and cause a second.
	testutil.WaitFor(t, "the poller's first read", func() bool { return reads.reads.Load() >= 1 })
	require.Zero(t, calls.readWithPoll.Load(), "the first read did not wait inside pgmq.read_with_poll")
	runID := testutil.StartRun(t, db.Pool, "fd", map[string]any{})
	require.Equal(t, "completed", testutil.WaitRun(t, db.Pool, runID).Status)
	require.Zero(t, calls.readWithPoll.Load())
}

// oneStepFlow creates flow with one step, "only", and registers the worker row id on its queue.
func oneStepFlow(t *testing.T, db *pgtest.DB, flow, id string) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{`select pgflow.create_flow($1)`, `select pgflow.add_step($1, 'only')`} {
		_, err := db.Pool.Exec(ctx, q, flow)
		require.NoError(t, err)
	}
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, id, flow, "poller-test"))
}

// runPoller runs a poller of cfg until the test ends: cfg.Flow is a oneStepFlow whose handler returns at once,
// and the poller gets its executor, completer, task count and claimer (reading and claiming through read) here.
func runPoller(t *testing.T, db *pgtest.DB, cfg Config, read sqlapi.DBTX) {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tasks := &Tasks{}
	comp := completer.New(completer.Config{DB: db.Pool, Logger: log, QueueSize: cap(cfg.Slots), HardStop: ctx, Calls: ctx, Base: ctx})
	run := func(context.Context, *taskrun.Env) (json.RawMessage, error) { return json.RawMessage(`"done"`), nil }
	cfg.Executor = executor.New(executor.Config{DB: db.Pool, Completer: comp, Logger: log, Handlers: ctx,
		GiveUp: make(chan struct{}),
		Flows:  map[string]*taskrun.Flow{cfg.Flow: {Slug: cfg.Flow, Steps: map[string]*taskrun.Step{"only": {Slug: "only", Run: run}}}}})
	cfg.Claimer = claimer.New(claimer.Config{DB: db.Pool, Read: read, Flow: cfg.Flow, Queue: cfg.Queue, WorkerID: cfg.WorkerID, Logger: log})
	cfg.Tasks, cfg.Logger = tasks, log
	p := New(cfg)
	loop, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(loop, ctx)
	}()
	t.Cleanup(func() {
		stop()
		<-done
		tasks.Wait()
		comp.Stop()
	})
}
