package pgflow

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// callCounter counts the statements a pool sends that contain a marker.
type callCounter struct {
	marker string
	n      atomic.Int64
}

func (c *callCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, c.marker) {
		c.n.Add(1)
	}
	return ctx
}

func (c *callCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// The worker sends its result calls in batches (their notifications are deferred to after the commit).
func (c *callCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *callCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if strings.Contains(d.SQL, c.marker) {
		c.n.Add(1)
	}
}

func (c *callCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func tracedPool(t *testing.T, url string, tracer pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// Results of handlers that finish together are recorded together (pgflow.complete_tasks). An output the database
// refuses for good makes that call fail as a whole; every other result of the batch is then recorded on its own,
// and only the refused task fails, at once and without retry, with the database's reason. Two refusals: a NUL
// character, which jsonb cannot store (22P05), and, where the test role may lower max_stack_depth, an output
// nested deeper than the server's stack allows (54001, program limit exceeded, the class of jsonb's 255 MB limit).
// Before, the refused task was retried with backoff (22P05), and a class 54 error made the worker retry the whole
// batch until the hard stop, holding the other results hostage.
func TestWorkerBatchedCompletionsSurviveRefusedOutputs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	calls := &callCounter{marker: "pgflow.complete_tasks"}
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = calls
	var superuser bool
	require.NoError(t, db.Pool.QueryRow(ctx, `select rolsuper from pg_roles where rolname = current_user`).Scan(&superuser))
	if superuser {
		cfg.ConnConfig.RuntimeParams["max_stack_depth"] = "100kB"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	const runs = 30
	const nulRun, deepRun = 7, 19
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	var started sync.WaitGroup
	started.Add(runs)
	release := make(chan struct{})
	var once sync.Once
	f := NewFlow[int]("batched")
	Step(f, "work", func(ctx context.Context, tk *Task[int]) (json.RawMessage, error) {
		n, err := tk.FlowInput(ctx)
		if err != nil {
			return nil, err
		}
		if tk.Attempt == 1 {
			started.Done()
			once.Do(func() { go func() { started.Wait(); close(release) }() })
			<-release // every first attempt finishes at the same moment
		}
		switch {
		case n == nulRun:
			return json.RawMessage(`"bad\u0000output"`), nil // jsonb cannot store \u0000
		case n == deepRun && superuser:
			return json.RawMessage(deep), nil
		}
		return json.RawMessage(`"ok"`), nil
	}, MaxAttempts(3), BaseDelay(time.Second))
	wcfg, _ := testConfig(t)
	wcfg.MaxConcurrent, wcfg.BatchSize = runs, runs
	startWorker(t, pool, f, wcfg)

	ids := make([]string, runs)
	for i := range ids {
		ids[i] = startRun(t, db.Pool, "batched", i)
	}
	for i, id := range ids {
		res := waitRun(t, db.Pool, id)
		tk := taskRow(t, db.Pool, id, "work", 0)
		require.Equal(t, 1, tk.Attempts, "run %d: attempts", i)
		switch {
		case i == nulRun:
			require.Equal(t, "failed", res.Status, "run %d", i)
			require.Equal(t, "failed", tk.Status)
			require.Contains(t, *tk.Error, `flow "batched", step "work": the database refused the handler's output: unsupported Unicode escape sequence`)
			require.Contains(t, *tk.Error, "SQLSTATE 22P05")
		case i == deepRun && superuser:
			require.Equal(t, "failed", res.Status, "run %d", i)
			require.Contains(t, *tk.Error, "stack depth limit exceeded")
			require.Contains(t, *tk.Error, "SQLSTATE 54001")
		default:
			require.Equal(t, "completed", res.Status, "run %d", i)
			require.JSONEq(t, `{"work": "ok"}`, string(res.Output))
		}
	}
	require.Positive(t, calls.n.Load(), "results that arrived together were sent in one pgflow.complete_tasks call")
}

// By default a worker keeps one extra session (its listener) and works its runs; when that session is killed it
// keeps working (reading every MaxPollWait) and listens again. With PollOnly it has no listener.
func TestWorkerListensForQueueNotificationsByDefault(t *testing.T) {
	t.Parallel()
	for _, pollOnly := range []bool{false, true} {
		db := pgtest.New(t)
		f := NewFlow[int]("wake")
		Step(f, "s", func(ctx context.Context, tk *Task[int]) (int, error) { return 42, nil })
		cfg, _ := testConfig(t)
		cfg.PollOnly = pollOnly
		rw := startWorker(t, db.Pool, f, cfg)
		listeners := func() int {
			var n int
			require.NoError(t, db.Pool.QueryRow(context.Background(), `select count(*) from pg_stat_activity
				where datname = current_database() and application_name = 'pgflow-go listener'`).Scan(&n))
			return n
		}
		if pollOnly {
			runID := startRun(t, db.Pool, "wake", 21)
			require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)
			require.Zero(t, listeners())
		} else {
			waitFor(t, "the worker's listener session", func() bool { return listeners() == 1 })
			runID := startRun(t, db.Pool, "wake", 21)
			require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)

			var killed int
			require.NoError(t, db.Pool.QueryRow(context.Background(), `select count(*) from (
				select pg_terminate_backend(pid) from pg_stat_activity
				 where datname = current_database() and application_name = 'pgflow-go listener') as k`).Scan(&killed))
			require.Equal(t, 1, killed)
			runID = startRun(t, db.Pool, "wake", 22)
			require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status, "a worker whose listener died still works")
			waitFor(t, "the listener to reconnect", func() bool { return listeners() == 1 })
			runID = startRun(t, db.Pool, "wake", 23)
			require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)
		}
		require.NoError(t, rw.stop(t))
	}
}
