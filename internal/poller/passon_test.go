package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/claimer"
	"github.com/pgflow-go/pgflow/internal/completer"
	"github.com/pgflow-go/pgflow/internal/executor"
	"github.com/pgflow-go/pgflow/internal/maintenance"
	"github.com/pgflow-go/pgflow/internal/notify"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/taskrun"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// countingDB counts the calls of pgflow.read_and_start_tasks made through it that have finished (their rows
// closed): the reads of one poller. Counting at the end, not when a read is sent, means a count seen by the test
// is a read that can no longer see a message sent after it.
type countingDB struct {
	sqlapi.DBTX
	reads atomic.Int32
}

// countedRows counts its read once when closed.
type countedRows struct {
	pgx.Rows
	once  sync.Once
	reads *atomic.Int32
}

func (r *countedRows) Close() {
	r.Rows.Close()
	r.once.Do(func() { r.reads.Add(1) })
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := c.DBTX.Query(ctx, sql, args...)
	if err != nil || !strings.Contains(sql, "read_and_start_tasks") {
		return rows, err
	}
	return &countedRows{Rows: rows, reads: &c.reads}, nil
}

// member is one poller of a group: one worker row (one worker process) of the queue, with its own listener.
type member struct {
	id      string
	deaf    bool // its listener never connects
	read    *countingDB
	running atomic.Int32 // handlers running now
	ran     atomic.Int32 // handler calls
}

// startMembers runs one real poller per worker id on the queue (each with slots free handler slots and batch as
// its batch size, listening on the queue's channel and on its own), after their LISTENs are active, and the real
// heartbeat loop of each worker row (maintenance.Heartbeat), which tells the schema that the row listens on its own
// channel. Their periodic read is an hour away: only notifications make them read. Handlers block until release is
// closed. The members named in deaf have a listener that can never connect (a worker whose LISTEN connection is
// unavailable): they read with pgmq.read_with_poll (not counted in reads) and heartbeat without listening.
func startMembers(t *testing.T, db *pgtest.DB, flow, queue string, ids []string, slots, batch int,
	release <-chan struct{}, deaf ...string) []*member {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	loop, stop := context.WithCancel(ctx)
	var stopped []chan struct{}
	var members []*member
	for _, id := range ids {
		m := &member{id: id, read: &countingDB{DBTX: db.Pool}, deaf: slices.Contains(deaf, id)}
		members = append(members, m)
		listener := notify.New(notify.Config{Logger: log, Connect: func(ctx context.Context) (*pgx.Conn, error) {
			if m.deaf {
				return nil, errors.New("simulated: the listen connection is unavailable")
			}
			return pgx.Connect(ctx, db.URL)
		}})
		t.Cleanup(listener.Close)
		wake, err := listener.Subscribe(sqlapi.QueueChannel(queue))
		require.NoError(t, err)
		own, err := listener.Subscribe(sqlapi.WorkerChannel(id))
		require.NoError(t, err)
		if !m.deaf {
			testutil.WaitClosed(t, "LISTEN on the queue's channel", wake.Active())
			testutil.WaitClosed(t, "LISTEN on the worker's channel", own.Active())
			// Drop the first Resyncs: the poller's first read (it always reads once when it starts) covers them,
			// and without them that read is the only one until a notification comes.
			wake.Drain()
			own.Drain()
		}
		stopped = append(stopped, runHeartbeat(loop, db, maintenance.Row{WorkerID: id, Queue: queue, ListenerPID: own.ListenerPID}, log))

		comp := completer.New(completer.Config{DB: db.Pool, Logger: log, QueueSize: slots, HardStop: ctx, Calls: ctx, Base: ctx})
		run := func(context.Context, *taskrun.Env) (json.RawMessage, error) {
			m.running.Add(1)
			defer m.running.Add(-1)
			m.ran.Add(1)
			<-release
			return json.RawMessage(`"done"`), nil
		}
		exec := executor.New(executor.Config{DB: db.Pool, Completer: comp, Logger: log, Handlers: ctx, GiveUp: make(chan struct{}),
			Flows: map[string]*taskrun.Flow{flow: {Slug: flow, Steps: map[string]*taskrun.Step{"only": {Slug: "only", Run: run}}}}})
		tasks := &Tasks{}
		p := New(Config{DB: db.Pool, Flow: flow, Queue: queue, WorkerID: id, BatchSize: batch, VisibilitySeconds: 30,
			MaxPollSeconds: 1, PollIntervalMs: 100, MaxPollWait: time.Hour, ListenPollInterval: time.Hour,
			Slots: NewSlots(slots), Wake: wake, Own: own, Listener: listener,
			Claimer:  claimer.New(claimer.Config{DB: db.Pool, Read: m.read, Flow: flow, Queue: queue, WorkerID: id, Logger: log}),
			Executor: exec, Tasks: tasks, Logger: log})
		done := make(chan struct{})
		stopped = append(stopped, done)
		go func() {
			defer close(done)
			p.Run(loop, ctx)
		}()
		t.Cleanup(func() {
			tasks.Wait()
			comp.Stop()
		})
	}
	t.Cleanup(func() {
		stop()
		for _, done := range stopped {
			<-done
		}
	})
	for _, m := range members {
		// The heartbeat says what the row's LISTEN is: listening once it is active, never for a deaf member.
		testutil.WaitFor(t, "the heartbeat of worker "+m.id, func() bool {
			var said, listening bool
			require.NoError(t, db.Pool.QueryRow(ctx, `select last_heartbeat_at > started_at, listens_at is not null
				from pgflow.workers where worker_id = $1`, m.id).Scan(&said, &listening))
			return said && listening == !m.deaf
		})
		if !m.deaf {
			// Both LISTENs were active before Run: after its first read, a poller reads only when notified.
			testutil.WaitFor(t, "the first read of worker "+m.id, func() bool { return m.read.reads.Load() == 1 })
		}
	}
	return members
}

// runHeartbeat runs the heartbeat loop of one worker row (interval an hour: only its first pass and the changes of
// its listening state write) until ctx ends; the returned channel is closed when it has returned.
func runHeartbeat(ctx context.Context, db *pgtest.DB, row maintenance.Row, log *slog.Logger) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		maintenance.Heartbeat(ctx, db.Pool, []maintenance.Row{row}, "poller-test", time.Hour, log, func() {})
	}()
	return done
}

func reads(ms []*member) []int32 {
	out := make([]int32, len(ms))
	for i, m := range ms {
		out[i] = m.read.reads.Load()
	}
	return out
}

// With three alive workers on a queue, a start is read by one of them only: the one the schema woke reads the
// message and, having found fewer than it could take, waits for news instead of reading again; the two others do
// not read at all.
func TestOneStartIsReadByOneWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	for _, q := range []string{`select pgflow.create_flow('herd')`, `select pgflow.add_step('herd', 'only')`} {
		_, err := db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	ids := []string{"b0000000-0000-4000-8000-000000000001", "b0000000-0000-4000-8000-000000000002",
		"b0000000-0000-4000-8000-000000000003"}
	for _, id := range ids {
		require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, id, "herd", "poller-test"))
	}
	release := make(chan struct{})
	close(release) // handlers return at once
	ms := startMembers(t, db, "herd", "herd", ids, 4, 10, release)

	readers := map[string]bool{}
	for i := range 12 {
		before := reads(ms)
		runID := testutil.StartRun(t, db.Pool, "herd", map[string]any{"i": i})
		require.Equal(t, "completed", testutil.WaitRun(t, db.Pool, runID).Status)
		var total int32
		testutil.WaitFor(t, "the woken worker's read", func() bool {
			total = 0
			for j, n := range reads(ms) {
				total += n - before[j]
			}
			return total >= 1
		})
		after := reads(ms)
		var woken []string
		for j := range ms {
			if after[j] != before[j] {
				woken = append(woken, ms[j].id)
				require.Equal(t, before[j]+1, after[j], "the woken worker reads once: the message, and no empty read after it")
			}
		}
		require.Len(t, woken, 1, "start %d: exactly one worker read (reads before %v, after %v)", i, before, after)
		readers[woken[0]] = true
	}
	// Over all starts: the first reads, then one per start (12 random choices among 3 all alike: 3^-11).
	final := reads(ms)
	var sum int32
	for _, n := range final {
		sum += n
	}
	require.Equal(t, int32(3+12), sum, "3 first reads, then 1 per start: %v", final)
	require.Greater(t, len(readers), 1, "the schema spreads the starts over the workers")
}

// A worker whose LISTEN connection is unavailable is alive (it heartbeats) but never chosen: its heartbeat says it
// does not listen on its own channel, so every start wakes the worker that listens. Each of 12 starts is read by
// that worker exactly once, and its periodic read is an hour away: the read is the wake's (before v0.20.0's
// listening flag, about half the starts woke the deaf worker and waited for a periodic read). The deaf worker reads
// with pgmq.read_with_poll and may take some of the tasks; that changes nothing in the count.
func TestAWorkerThatDoesNotListenIsNeverWoken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	for _, q := range []string{`select pgflow.create_flow('deaf')`, `select pgflow.add_step('deaf', 'only')`} {
		_, err := db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	const hearing, deaf = "f0000000-0000-4000-8000-000000000001", "f0000000-0000-4000-8000-000000000002"
	for _, id := range []string{hearing, deaf} {
		require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, id, "deaf", "poller-test"))
	}
	release := make(chan struct{})
	close(release)
	ms := startMembers(t, db, "deaf", "deaf", []string{hearing, deaf}, 4, 10, release, deaf)
	listener := ms[0]
	var alive int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.workers where queue_name = 'deaf'
		and stopped_at is null and deprecated_at is null and last_heartbeat_at >= now() - interval '30 seconds'`).Scan(&alive))
	require.Equal(t, 2, alive, "both workers are alive")

	for i := range 12 {
		before := listener.read.reads.Load()
		runID := testutil.StartRun(t, db.Pool, "deaf", map[string]any{"i": i})
		require.Equal(t, "completed", testutil.WaitRun(t, db.Pool, runID).Status)
		testutil.WaitFor(t, fmt.Sprintf("start %d: the listening worker's read", i), func() bool {
			return listener.read.reads.Load() == before+1
		})
	}
	require.Equal(t, int32(1+12), listener.read.reads.Load(), "the first read, then one per start, each woken")
}

// A worker woken alone that cannot take everything passes the wake on to the queue's channel, so the other workers
// take the rest without waiting for their periodic read (an hour away here). Worker A is the only alive worker
// (the schema always wakes it); worker B's heartbeat is old, so it is never chosen and reads only when the queue's
// channel wakes it. Each has one handler slot.
func TestWokenWorkerPassesOnWhatItCannotTake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	for _, q := range []string{
		`select pgflow.create_flow('burst')`,
		`select pgflow.add_step('burst', 'only', step_type => 'map')`,
	} {
		_, err := db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	const a, b = "c0000000-0000-4000-8000-00000000000a", "c0000000-0000-4000-8000-00000000000b"
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, a, "burst", "poller-test"))
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, b, "burst", "poller-test"))

	queueConn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = queueConn.Close(context.Background()) })
	_, err = queueConn.Exec(ctx, `listen "pgflow:queue:burst"`)
	require.NoError(t, err)
	nextQueueNote := func() string {
		wctx, cancel := context.WithTimeout(ctx, testutil.WaitTimeout)
		defer cancel()
		n, err := queueConn.WaitForNotification(wctx)
		require.NoError(t, err)
		return n.Payload
	}

	release := make(chan struct{})
	ms := startMembers(t, db, "burst", "burst", []string{a, b}, 1, 1, release)
	mA, mB := ms[0], ms[1]
	// B's heartbeat loop writes only when its listening state changes (its interval is an hour): B stays stale.
	_, err = db.Pool.Exec(ctx, `update pgflow.workers set last_heartbeat_at = now() - interval '1 hour' where worker_id = $1`, b)
	require.NoError(t, err)

	// A burst of two tasks in one start: A's read of one message comes back full; it passes the wake on and B takes
	// the second task while A's handler still runs.
	runID := testutil.StartRun(t, db.Pool, "burst", []int{1, 2})
	testutil.WaitFor(t, "both workers running a task", func() bool { return mA.running.Load() == 1 && mB.running.Load() == 1 })
	require.Empty(t, nextQueueNote(), "the pass-on: a read-now wake on the queue's channel")

	// A third task while both are busy: A, woken alone with no free slot, passes the wake on at once (whichever
	// worker frees a slot first then takes the task).
	second := testutil.StartRun(t, db.Pool, "burst", []int{3})
	require.Empty(t, nextQueueNote(), "the pass-on of a starved worker")
	close(release)
	require.Equal(t, "completed", testutil.WaitRun(t, db.Pool, runID).Status)
	require.Equal(t, "completed", testutil.WaitRun(t, db.Pool, second).Status)
	require.EqualValues(t, 3, mA.ran.Load()+mB.ran.Load())
}
