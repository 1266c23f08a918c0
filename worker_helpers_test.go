package pgflow

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/backoff"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// waitTimeout bounds every wait in the worker tests; it is a deadline for something to happen, not a timing
// assertion.
const waitTimeout = 60 * time.Second

// logBuffer collects a worker's logs; the test prints them when it fails.
type logBuffer = testutil.SyncBuffer

func newTestLogger(t *testing.T) (*slog.Logger, *logBuffer) {
	t.Helper()
	lb := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker logs:\n%s", lb.String())
		}
	})
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

// testConfig returns a configuration with short waits, so tests and their shutdowns are quick.
func testConfig(t *testing.T) (WorkerConfig, *logBuffer) {
	logger, lb := newTestLogger(t)
	return WorkerConfig{
		MaxPollWait:         time.Second,
		PollInterval:        20 * time.Millisecond,
		HeartbeatInterval:   200 * time.Millisecond,
		ShutdownTimeout:     20 * time.Second,
		MaintenanceInterval: -1,
		Logger:              logger,
	}, lb
}

// newClient returns a client of pool for the test (cfg may be nil), closed when the test ends.
func newClient(t testing.TB, pool *pgxpool.Pool, cfg *ClientConfig) *Client {
	t.Helper()
	c, err := NewClient(pool, cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// newWorkerFor builds a worker serving flow (first) and cfg.Flows on a client of its own.
func newWorkerFor(t testing.TB, pool *pgxpool.Pool, flow AnyFlow, cfg WorkerConfig) (*Worker, error) {
	t.Helper()
	if pool == nil {
		return NewWorker(nil, &cfg)
	}
	c := newClient(t, pool, &ClientConfig{Logger: cfg.Logger})
	cfg.Flows = append([]WorkerFlow{{Flow: flow}}, cfg.Flows...)
	return NewWorker(c, &cfg)
}

// forgetStep makes a worker run code that lacks a step of its (compiled) flow, as a worker running an older build
// of the flow would.
func forgetStep(slug string) func(*Worker) {
	return func(w *Worker) {
		for _, f := range w.flows {
			delete(f.def.Steps, slug)
		}
	}
}

// runningWorker is a worker whose Run runs in a goroutine of the test.
type runningWorker struct {
	w      *Worker
	cancel context.CancelFunc
	done   chan error
}

// startWorker creates a worker with NewWorker, applies mods (test hooks) and runs it until stop or the end of
// the test. It waits until the worker is registered.
func startWorker(t *testing.T, pool *pgxpool.Pool, flow AnyFlow, cfg WorkerConfig, mods ...func(*Worker)) *runningWorker {
	t.Helper()
	rw := launchWorker(t, pool, flow, cfg, mods...)
	waitFor(t, "worker "+rw.w.ID()+" registered", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(),
			`select count(*) from pgflow.workers where worker_id = $1 and stopped_at is null`, rw.w.ID()).Scan(&n))
		return n == 1
	})
	return rw
}

// launchWorker is startWorker without waiting for registration.
func launchWorker(t *testing.T, pool *pgxpool.Pool, flow AnyFlow, cfg WorkerConfig, mods ...func(*Worker)) *runningWorker {
	t.Helper()
	w, err := newWorkerFor(t, pool, flow, cfg)
	require.NoError(t, err)
	w.retry = backoff.Policy{Base: 10 * time.Millisecond, Max: 200 * time.Millisecond}
	for _, m := range mods {
		m(w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{w: w, cancel: cancel, done: make(chan error, 1)}
	go func() { rw.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rw.done:
		case <-time.After(waitTimeout):
			t.Errorf("worker %s did not stop", w.ID())
		}
	})
	return rw
}

// stop cancels the worker's context and returns Run's result.
func (rw *runningWorker) stop(t *testing.T) error {
	t.Helper()
	rw.cancel()
	return rw.wait(t)
}

// wait returns Run's result once Run has returned.
func (rw *runningWorker) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-rw.done:
		rw.done <- err // keep it for the cleanup
		return err
	case <-time.After(waitTimeout):
		t.Fatalf("worker %s did not stop", rw.w.ID())
		return nil
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, cond)
}

func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	testutil.WaitClosed(t, what, ch)
}

func startRun(t *testing.T, pool *pgxpool.Pool, flowSlug string, input any) string {
	t.Helper()
	raw, err := json.Marshal(input)
	require.NoError(t, err)
	return testutil.StartRun(t, pool, flowSlug, json.RawMessage(raw))
}

func waitRun(t *testing.T, pool *pgxpool.Pool, runID string) testutil.RunResult {
	t.Helper()
	return testutil.WaitRun(t, pool, runID)
}

type stepResult struct {
	Status     string
	Output     json.RawMessage
	SkipReason *string
	Error      *string
}

func stepState(t *testing.T, pool *pgxpool.Pool, runID, step string) stepResult {
	t.Helper()
	var s stepResult
	require.NoError(t, pool.QueryRow(context.Background(),
		`select status, output, skip_reason, error_message from pgflow.step_states where run_id = $1 and step_slug = $2`,
		runID, step).Scan(&s.Status, &s.Output, &s.SkipReason, &s.Error))
	return s
}

type taskResult struct {
	Status   string
	Attempts int
	Error    *string
	Requeued int
}

func taskRow(t *testing.T, pool *pgxpool.Pool, runID, step string, index int) taskResult {
	t.Helper()
	var r taskResult
	require.NoError(t, pool.QueryRow(context.Background(),
		`select status, attempts_count, error_message, requeued_count from pgflow.step_tasks
		  where run_id = $1 and step_slug = $2 and task_index = $3`, runID, step, index).
		Scan(&r.Status, &r.Attempts, &r.Error, &r.Requeued))
	return r
}

// storedShape returns pgflow._get_flow_shape(slug).
func storedShape(t *testing.T, pool *pgxpool.Pool, slug string) string {
	t.Helper()
	var raw json.RawMessage
	require.NoError(t, pool.QueryRow(context.Background(), `select pgflow._get_flow_shape($1)`, slug).Scan(&raw))
	return string(raw)
}

// storedSteps returns the step slugs of a flow in the database, in step_index order.
func storedSteps(t *testing.T, pool *pgxpool.Pool, slug string) []string {
	t.Helper()
	var steps []string
	require.NoError(t, pool.QueryRow(context.Background(),
		`select coalesce(array_agg(step_slug order by step_index), '{}') from pgflow.steps where flow_slug = $1`, slug).Scan(&steps))
	return steps
}

func workerRow(t *testing.T, pool *pgxpool.Pool, id string) (exists, stopped bool) {
	t.Helper()
	err := pool.QueryRow(context.Background(),
		`select true, stopped_at is not null from pgflow.workers where worker_id = $1`, id).Scan(&exists, &stopped)
	if err != nil && strings.Contains(err.Error(), "no rows") {
		return false, false
	}
	require.NoError(t, err)
	return exists, stopped
}
