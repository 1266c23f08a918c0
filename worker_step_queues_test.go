package pgflow

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// With QueuePerStep a slow step with a deep backlog does not delay another step's tasks: two workers (as on two
// machines) serve one step each, the slow one with a single slot whose handler blocks, and every task of the fast
// step completes while the slow step's backlog stays queued. Each worker claims only tasks of its own step.
func TestPerStepQueuesASlowStepDoesNotStarveAnother(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	cfg, _ := testConfig(t)
	client := newClient(t, db.Pool, &ClientConfig{Logger: cfg.Logger})

	gate := make(chan struct{})
	var slowStarted atomic.Int32
	flow := NewFlow[int]("starve", QueuePerStep())
	Step(flow, "slow", func(ctx context.Context, tk *Task[int]) (int, error) {
		slowStarted.Add(1)
		select {
		case <-gate:
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	Step(flow, "fast", func(ctx context.Context, tk *Task[int]) (int, error) { return tk.FlowInput(ctx) })

	slowCfg := cfg
	slowCfg.MaxConcurrent = 1
	slowCfg.Flows = []WorkerFlow{{Flow: flow, Steps: []string{"slow"}}}
	slowWorker, err := NewWorker(client, &slowCfg)
	require.NoError(t, err)
	require.NoError(t, slowWorker.Start(ctx))
	t.Cleanup(func() { _ = slowWorker.StopAndCancel(context.Background()) })

	const runs = 30
	ids := make([]string, runs)
	for i := range runs {
		r, err := StartRun(ctx, client, flow, i, nil)
		require.NoError(t, err)
		ids[i] = r.ID
	}
	waitFor(t, "the slow step's handler to block", func() bool { return slowStarted.Load() == 1 })

	fastCfg := cfg
	fastCfg.Flows = []WorkerFlow{{Flow: flow, Steps: []string{"fast"}, MaxConcurrent: 4, BatchSize: 5}}
	fastWorker, err := NewWorker(client, &fastCfg)
	require.NoError(t, err)
	require.NoError(t, fastWorker.Start(ctx))
	t.Cleanup(func() { _ = fastWorker.Stop(context.Background()) })

	waitFor(t, "every fast task to complete", func() bool {
		return count(t, db.Pool, `select 1 from pgflow.step_tasks where step_slug = 'fast' and status = 'completed'`) == runs
	})
	require.Equal(t, runs-1, count(t, db.Pool,
		`select 1 from pgflow.step_tasks where step_slug = 'slow' and status = 'queued'`), "the slow backlog is still queued")
	require.Equal(t, int32(1), slowStarted.Load())

	slowID, fastID := slowWorker.WorkerIDs()["starve__slow"], fastWorker.WorkerIDs()["starve__fast"]
	require.NotEmpty(t, slowID)
	require.NotEmpty(t, fastID)
	require.Zero(t, count(t, db.Pool, `select 1 from pgflow.step_tasks
		where (step_slug = 'fast' and last_worker_id is distinct from $1::uuid)
		   or (step_slug = 'slow' and last_worker_id is not null and last_worker_id <> $2::uuid)`, fastID, slowID),
		"each worker claimed only tasks of the step it serves")
	require.Equal(t, []string{"starve__fast", "starve__slow"}, strs(t, db.Pool,
		`select queue_name from pgflow.workers where stopped_at is null order by queue_name`), "one worker row per step queue")

	close(gate)
	for _, id := range ids {
		r, err := client.WaitRun(ctx, id)
		require.NoError(t, err)
		require.Equal(t, RunCompleted, r.Status)
	}
}

// One worker can serve every step of a flow with per-step queues (one poller and one worker row per step queue),
// and a flow's definition with the other queue mode is a shape mismatch in production.
func TestPerStepQueuesOneWorkerServesTheWholeFlow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	cfg, _ := testConfig(t)
	client := newClient(t, db.Pool, &ClientConfig{Logger: cfg.Logger})

	flow := NewFlow[int]("whole", QueuePerStep())
	list := Step(flow, "double", func(ctx context.Context, tk *Task[int]) ([]int, error) {
		n, err := tk.FlowInput(ctx)
		return []int{n, 2 * n, 3 * n}, err
	})
	Map(flow, "spread", list, func(ctx context.Context, tk *Task[int], item int) (int, error) { return item * 10, nil })
	cfg.Flows = []WorkerFlow{{Flow: flow}}
	w, err := NewWorker(client, &cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	r, err := StartRun(ctx, client, flow, 5, nil)
	require.NoError(t, err)
	done, err := client.WaitRun(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, RunCompleted, done.Status)
	require.Equal(t, []string{"whole__double", "whole__spread"}, strs(t, db.Pool,
		`select distinct queue_name from pgflow.step_tasks where run_id = $1 order by 1`, r.ID))
	require.Len(t, w.WorkerIDs(), 2)
	infos, err := client.ListFlows(ctx)
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.True(t, infos[0].QueuePerStep)
	require.Equal(t, "whole__double", infos[0].Steps[0].Queue)
	require.Equal(t, "whole__spread", infos[0].Steps[1].Queue)

	// The same slug defined with one queue is a different definition.
	plain := NewFlow[int]("whole")
	Step(plain, "double", func(ctx context.Context, tk *Task[int]) (int, error) { return 0, nil })
	Step(plain, "spread", func(ctx context.Context, tk *Task[int]) (int, error) { return 0, nil })
	_, err = launchPlainWorker(t, client, plain)
	var mismatch *ShapeMismatchError
	require.ErrorAs(t, err, &mismatch)
	require.Contains(t, mismatch.Differences, `Queue mode differs: 'flow' vs 'step'`)
}

func launchPlainWorker(t *testing.T, client *Client, flow AnyFlow) (*Worker, error) {
	t.Helper()
	cfg, _ := testConfig(t)
	cfg.Flows = []WorkerFlow{{Flow: flow}}
	w, err := NewWorker(client, &cfg)
	require.NoError(t, err)
	return w, w.Start(context.Background())
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `select count(*)::int from (`+sql+`) as c`, args...).Scan(&n))
	return n
}

func strs(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql, args...)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}
