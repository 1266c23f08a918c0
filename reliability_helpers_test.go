package pgflow_test

// Shared helpers of the reliability tests (reliability_*_test.go): databases with invocation and event capture,
// flow compilation, runs, waits and invariant checks. The flows and the worker subprocess live in
// internal/reliability.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/reliability"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// relWait bounds every wait of the reliability tests: a deadline for something to happen, never a timing
// assertion. Stalled-task recovery needs the step timeout + 30 s, so it is generous.
const relWait = 3 * time.Minute

// relDB returns a migrated test database with invocation and event capture installed.
func relDB(t *testing.T) *pgtest.DB {
	t.Helper()
	db := pgtest.New(t)
	require.NoError(t, reliability.Setup(context.Background(), db.Pool))
	return db
}

// relFlow returns a reliability flow wired to h.
func relFlow(t *testing.T, slug string, h reliability.Handlers) *pgflow.Flow[reliability.Input] {
	t.Helper()
	f, err := reliability.NewFlow(slug, h)
	require.NoError(t, err)
	return f
}

// compileRelFlow creates a reliability flow in the database (as a migration would), before any worker starts.
func compileRelFlow(t *testing.T, pool *pgxpool.Pool, slug string) {
	t.Helper()
	f := relFlow(t, slug, reliability.Handlers{Recorder: &reliability.MemRecorder{}})
	stmts, err := f.CompileSQL()
	require.NoError(t, err)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, s := range stmts {
		_, err := tx.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	require.NoError(t, tx.Commit(ctx))
}

// startRelRuns starts n runs of slug with input and returns their ids.
func startRelRuns(t *testing.T, pool *pgxpool.Pool, slug string, input reliability.Input, n int) []string {
	t.Helper()
	raw, err := json.Marshal(input)
	require.NoError(t, err)
	var ids []string
	require.NoError(t, pool.QueryRow(context.Background(),
		`select coalesce(array_agg((s.r).run_id::text), '{}')
		   from (select pgflow.start_flow($1, $2::jsonb) as r from generate_series(1, $3)) as s`,
		slug, string(raw), n).Scan(&ids))
	require.Len(t, ids, n)
	return ids
}

// eventually polls cond every 50 ms until it returns true, failing the test after limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for: %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func queryInt(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// waitRegistered waits until the worker has a live row in pgflow.workers.
func waitRegistered(t *testing.T, pool *pgxpool.Pool, workerID string) {
	t.Helper()
	eventually(t, relWait, "worker "+workerID+" registered", func() bool {
		return queryInt(t, pool, `select count(*) from pgflow.workers where worker_id = $1::uuid and stopped_at is null`, workerID) == 1
	})
}

// waitRunsDone waits until every run of flow is completed or failed.
func waitRunsDone(t *testing.T, pool *pgxpool.Pool, flow string, limit time.Duration) {
	t.Helper()
	eventually(t, limit, "every run of "+flow+" to finish", func() bool {
		return queryInt(t, pool, `select count(*) from pgflow.runs where flow_slug = $1 and status not in ('completed', 'failed')`, flow) == 0
	})
}

// requireInvariants reads the flow's invariants and fails the test with every broken one.
func requireInvariants(t *testing.T, pool *pgxpool.Pool, flow string, exactOnce bool) reliability.Invariants {
	t.Helper()
	inv, err := reliability.Read(context.Background(), pool, flow)
	require.NoError(t, err)
	if p := inv.Problems(exactOnce); len(p) > 0 {
		t.Fatalf("invariants broken:\n  %s\n%s", strings.Join(p, "\n  "), inv)
	}
	t.Logf("%s", inv)
	return inv
}

// relTask is one step_tasks row as the reliability tests look at it.
type relTask struct {
	RunID     string
	Step      string
	Index     int
	Status    string
	Attempts  int
	Requeued  int
	Worker    *string
	Output    reliability.Output
	HasOutput bool
	Error     *string
}

func relTasks(t *testing.T, pool *pgxpool.Pool, flow, step string) []relTask {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		select t.run_id::text, t.step_slug, t.task_index, t.status, t.attempts_count, t.requeued_count,
		       t.last_worker_id::text, t.output, t.error_message
		  from pgflow.step_tasks as t
		 where t.flow_slug = $1 and t.step_slug = $2
		 order by t.run_id, t.task_index`, flow, step)
	require.NoError(t, err)
	defer rows.Close()
	var out []relTask
	for rows.Next() {
		var r relTask
		var raw []byte
		require.NoError(t, rows.Scan(&r.RunID, &r.Step, &r.Index, &r.Status, &r.Attempts, &r.Requeued, &r.Worker, &raw, &r.Error))
		if raw != nil {
			r.HasOutput = true
			require.NoError(t, json.Unmarshal(raw, &r.Output), "output %s", raw)
		}
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// invocationsOf returns the recorded invocations of one task as "worker/attempt" strings, in order.
func invocationsOf(t *testing.T, pool *pgxpool.Pool, runID, step string, index int) []string {
	t.Helper()
	var list []string
	require.NoError(t, pool.QueryRow(context.Background(), `
		select coalesce(array_agg(i.worker_id::text || '/' || i.attempt order by i.id), '{}')
		  from reliability.invocations as i
		 where i.run_id = $1::uuid and i.step_slug = $2 and i.task_index = $3`, runID, step, index).Scan(&list))
	return list
}

// relLogs is a slog destination for in-process workers; the test prints it when it fails.
type relLogs struct {
	testutil.SyncBuffer
}

// Count returns how many lines contain s.
func (l *relLogs) Count(s string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func newRelLogger(t *testing.T, name string) (*slog.Logger, *relLogs) {
	t.Helper()
	l := &relLogs{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s logs:\n%s", name, l.String())
		}
	})
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})), l
}

// relWorkerConfig is a worker configuration with short intervals for in-process reliability workers.
func relWorkerConfig(logger *slog.Logger) pgflow.WorkerConfig {
	return pgflow.WorkerConfig{
		MaxPollWait:         time.Second,
		PollInterval:        20 * time.Millisecond,
		HeartbeatInterval:   300 * time.Millisecond,
		ShutdownTimeout:     5 * time.Second,
		MaintenanceInterval: -1,
		Logger:              logger,
	}
}

// inProcWorker runs a worker in this process until the test ends (or stop is called).
type inProcWorker struct {
	w      *pgflow.Worker
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

func runInProc(t *testing.T, pool *pgxpool.Pool, flow pgflow.AnyFlow, cfg pgflow.WorkerConfig) *inProcWorker {
	t.Helper()
	w, err := newFlowWorker(t, pool, flow, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	iw := &inProcWorker{w: w, cancel: cancel, done: make(chan error, 1)}
	go func() { iw.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		if err := iw.stop(); err != nil {
			t.Errorf("worker %s: %v", w.ID(), err)
		}
	})
	return iw
}

// stop cancels the worker and returns Run's result (waiting at most relWait).
func (iw *inProcWorker) stop() error {
	iw.once.Do(func() {
		iw.cancel()
		select {
		case iw.err = <-iw.done:
		case <-time.After(relWait):
			iw.err = fmt.Errorf("worker %s did not stop", iw.w.ID())
		}
	})
	return iw.err
}

// newClient returns a client of pool for the test (cfg may be nil), closed when the test ends.
func newClient(t testing.TB, pool *pgxpool.Pool, cfg *pgflow.ClientConfig) *pgflow.Client {
	t.Helper()
	c, err := pgflow.NewClient(pool, cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// newFlowWorker builds a worker serving flow (first) and cfg.Flows on a client of its own.
func newFlowWorker(t testing.TB, pool *pgxpool.Pool, flow pgflow.AnyFlow, cfg pgflow.WorkerConfig) (*pgflow.Worker, error) {
	t.Helper()
	c := newClient(t, pool, &pgflow.ClientConfig{Logger: cfg.Logger})
	cfg.Flows = append([]pgflow.WorkerFlow{{Flow: flow}}, cfg.Flows...)
	return pgflow.NewWorker(c, &cfg)
}
