package pgflow

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// One worker serves three flows: each flow gets its own worker row (its queue's), all share the handler slots,
// and the whole process (the worker's queue wake-ups and the client's WaitRun) holds ONE listener connection.
// A flow's own MaxConcurrent limits its share of the slots.
func TestOneWorkerServesThreeFlowsWithOneListener(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg, _ := testConfig(t)
	client := newClient(t, db.Pool, &ClientConfig{Logger: cfg.Logger})

	double := NewFlow[int]("multi_double")
	Step(double, "x2", func(ctx context.Context, tk *Task[int]) (int, error) {
		n, err := tk.FlowInput(ctx)
		return n * 2, err
	})
	words := NewFlow[string]("multi_words")
	Step(words, "len", func(ctx context.Context, tk *Task[string]) (int, error) {
		s, err := tk.FlowInput(ctx)
		return len(s), err
	})
	var running, most atomic.Int32
	gate := make(chan struct{})
	limited := NewFlow[int]("multi_limited")
	Step(limited, "one_at_a_time", func(ctx context.Context, tk *Task[int]) (int, error) {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-gate
		running.Add(-1)
		return 1, nil
	})

	cfg.MaxConcurrent = 8
	cfg.WorkerID = "6ba7b810-9dad-41d1-80b4-00c04fd430c8"
	cfg.Flows = []WorkerFlow{{Flow: double}, {Flow: words}, {Flow: limited, MaxConcurrent: 1}}
	w, err := NewWorker(client, &cfg)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	ids := w.WorkerIDs()
	require.Len(t, ids, 3)
	require.Equal(t, cfg.WorkerID, ids["multi_double"], "the first flow's row has WorkerID")
	other, err := NewWorker(client, &cfg)
	require.NoError(t, err)
	require.Equal(t, ids, other.WorkerIDs(), "the other rows' ids derive from WorkerID: a restart keeps them")
	var rows []struct{ ID, Queue string }
	rs, err := db.Pool.Query(ctx, `select worker_id::text, queue_name from pgflow.workers where stopped_at is null order by queue_name`)
	require.NoError(t, err)
	for rs.Next() {
		var r struct{ ID, Queue string }
		require.NoError(t, rs.Scan(&r.ID, &r.Queue))
		rows = append(rows, r)
	}
	require.NoError(t, rs.Err())
	require.Equal(t, []struct{ ID, Queue string }{
		{ids["multi_double"], "multi_double"}, {ids["multi_limited"], "multi_limited"}, {ids["multi_words"], "multi_words"},
	}, rows, "one worker row per flow's queue")

	d, err := StartRun(ctx, client, double, 21, nil)
	require.NoError(t, err)
	s, err := StartRun(ctx, client, words, "hello", nil)
	require.NoError(t, err)
	var limitedRuns []string
	for i := range 3 {
		r, err := StartRun(ctx, client, limited, i, nil)
		require.NoError(t, err)
		limitedRuns = append(limitedRuns, r.ID)
	}
	for _, id := range []string{d.ID, s.ID} {
		run, err := client.WaitRun(ctx, id)
		require.NoError(t, err)
		require.Equal(t, RunCompleted, run.Status)
	}
	out, err := RunOutput[map[string]int](mustGetRun(t, client, d.ID))
	require.NoError(t, err)
	require.Equal(t, 42, out["x2"])

	var wg sync.WaitGroup
	for range limitedRuns {
		waitFor(t, "a limited task to start", func() bool { return running.Load() == 1 })
		gate <- struct{}{}
	}
	for _, id := range limitedRuns {
		wg.Go(func() {
			run, err := client.WaitRun(ctx, id)
			require.NoError(t, err)
			require.Equal(t, RunCompleted, run.Status)
		})
	}
	wg.Wait()
	require.EqualValues(t, 1, most.Load(), "the flow's MaxConcurrent 1 kept its tasks one at a time")

	var listeners int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pg_stat_activity
		where datname = current_database() and application_name = $1`, ListenerApplicationName).Scan(&listeners))
	require.Equal(t, 1, listeners, "the worker's three queues and the client's waits share one LISTEN connection")

	require.NoError(t, w.Stop(ctx))
	var live int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.workers where stopped_at is null`).Scan(&live))
	require.Zero(t, live, "every row of the worker is marked stopped")
}

func mustGetRun(t *testing.T, c *Client, id string) *Run {
	t.Helper()
	r, err := c.GetRun(context.Background(), id)
	require.NoError(t, err)
	return r
}
