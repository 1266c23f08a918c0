package pgflow

import (
	"context"
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

// Results of handlers that finish together are recorded together (pgflow.complete_tasks). One output the
// database rejects makes that call fail as a whole; every other result of the batch is then recorded on its own,
// and only the bad task fails (here it is retried, and its second output is fine): nothing is lost.
func TestWorkerBatchedCompletionsSurviveOneRejectedOutput(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	calls := &callCounter{marker: "pgflow.complete_tasks"}
	pool := tracedPool(t, db.URL, calls)

	const items = 40
	var started sync.WaitGroup
	started.Add(items)
	release := make(chan struct{})
	var once sync.Once
	f := NewFlow[[]int]("batched")
	MapInput(f, "each", func(ctx context.Context, tk *Task[[]int], n int) (string, error) {
		if tk.Attempt == 1 {
			started.Done()
			once.Do(func() { go func() { started.Wait(); close(release) }() })
			<-release // every first attempt finishes at the same moment
		}
		if n == 17 && tk.Attempt == 1 {
			return "bad\x00output", nil // jsonb cannot store \u0000
		}
		return "ok", nil
	}, MaxAttempts(2), BaseDelay(time.Second))
	cfg, _ := testConfig(t)
	cfg.MaxConcurrent, cfg.BatchSize = items, items
	startWorker(t, pool, f, cfg)

	input := make([]int, items)
	for i := range input {
		input[i] = i
	}
	runID := startRun(t, db.Pool, "batched", input)
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	for i := range items {
		tk := taskRow(t, db.Pool, runID, "each", i)
		require.Equal(t, "completed", tk.Status, "task %d", i)
		want := 1
		if i == 17 {
			want = 2
		}
		require.Equal(t, want, tk.Attempts, "task %d: attempts", i)
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
				where datname = current_database() and application_name = 'pgflow-worker-listener'`).Scan(&n))
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
				 where datname = current_database() and application_name = 'pgflow-worker-listener') as k`).Scan(&killed))
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
