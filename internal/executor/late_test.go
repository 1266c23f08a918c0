package executor

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/completer"
	"github.com/pgflow-go/pgflow/internal/observe"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/taskrun"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// failGate is the pool with every batch that calls pgflow.fail_task held until open is closed (entered is closed
// when the first one arrives).
type failGate struct {
	*pgxpool.Pool
	entered, open chan struct{}
	once          sync.Once
}

func (g *failGate) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		if strings.Contains(q.SQL, "pgflow.fail_task(") {
			g.once.Do(func() { close(g.entered) })
			<-g.open
			break
		}
	}
	return g.Pool.SendBatch(ctx, b)
}

// staleSink records the stale results and finished tasks the executor reports.
type staleSink struct {
	testutil.NopSink
	mu       sync.Mutex
	stale    []observe.StaleResult
	finished []observe.Finished
}

func (s *staleSink) TaskFinished(_ context.Context, e observe.Finished) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = append(s.finished, e)
}
func (s *staleSink) StaleResult(_ context.Context, e observe.StaleResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stale = append(s.stale, e)
}

func (s *staleSink) counts() (stale, finished int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.stale), len(s.finished)
}

// The handler runs on the task's own goroutine. When it ignores its context past the step timeout, the attempt is
// failed at the deadline without waiting for it; a handler that returns while that failure is still being
// recorded has its result dropped and counted stale once, after the failure, and the task is settled once.
func TestHandlerReturningWhileItsTimeoutIsRecordedIsStaleOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	const flow, queue = "late_exec", "late_exec"
	for _, q := range []string{`select pgflow.create_flow('late_exec', max_attempts => 2, timeout => 1)`,
		`select pgflow.add_step('late_exec', 'only')`} {
		_, err := db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	const workerID = "5c1e0b7a-3d2f-4e6a-8b9c-0d1e2f3a4b5c"
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerID, queue, "executor-test"))
	runID := testutil.StartRun(t, db.Pool, flow, map[string]int{"n": 1})
	claimedAt := time.Now()
	claimed, _, _, err := sqlapi.ReadAndStartTasks(ctx, db.Pool, flow, queue, workerID, 1, 30)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, 1, claimed[0].TimeoutSeconds)

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	gate := &failGate{Pool: db.Pool, entered: make(chan struct{}), open: make(chan struct{})}
	sink := &staleSink{}
	obs := observe.New([]observe.Sink{sink}, log)
	stopObs := obs.Start(ctx)
	comp := completer.New(completer.Config{DB: gate, Logger: log, Observer: obs, QueueSize: 1, HardStop: ctx, Calls: ctx, Base: ctx})
	release := make(chan struct{})
	run := func(context.Context, *taskrun.Env) (json.RawMessage, error) {
		<-release // ignores its context
		return json.RawMessage(`"late"`), nil
	}
	exec := New(Config{DB: db.Pool, Completer: comp, Observer: obs, Logger: log, Handlers: ctx, GiveUp: make(chan struct{}),
		Flows: map[string]*taskrun.Flow{flow: {Slug: flow, Steps: map[string]*taskrun.Step{"only": {Slug: "only", Run: run}}}}})

	var settled atomic.Int32
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		exec.Start(&Task{ClaimedTask: claimed[0], QueueName: queue, WorkerID: workerID, ClaimedAt: claimedAt},
			func() { settled.Add(1) })
	}()
	// At the deadline the watcher fails the attempt; the gate holds that call while the handler returns.
	testutil.WaitClosed(t, "the timed-out attempt's failure to be sent", gate.entered)
	close(release)
	testutil.WaitClosed(t, "the handler's goroutine to return with the attempt taken over", returned)
	stale, _ := sink.counts()
	require.Zero(t, stale, "the late result waits for the failure to be recorded")
	require.Zero(t, settled.Load(), "not settled before the failure is recorded")
	close(gate.open)
	testutil.WaitFor(t, "the late result to be counted stale", func() bool { s, _ := sink.counts(); return s == 1 })
	require.EqualValues(t, 1, settled.Load())

	comp.Stop()
	stopObs()
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Len(t, sink.stale, 1)
	require.Equal(t, observe.StaleTimedOut, sink.stale[0].Reason)
	require.NoError(t, sink.stale[0].Err)
	require.Equal(t, runID, sink.stale[0].RunID)
	require.Len(t, sink.finished, 1)
	require.Equal(t, observe.Retried, sink.finished[0].Outcome, "the timeout failed the attempt; one attempt is left")
	var status, msg string
	var attempts int
	require.NoError(t, db.Pool.QueryRow(ctx, `select status, error_message, attempts_count from pgflow.step_tasks
		where run_id = $1::uuid and step_slug = 'only'`, runID).Scan(&status, &msg, &attempts))
	require.Equal(t, "queued", status)
	require.Equal(t, 1, attempts)
	require.Equal(t, `step "only" timed out after 1s (attempt 1 of 2)`, msg)
}
