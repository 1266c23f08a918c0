package sqlapi_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

const readerWorker = "99999999-0000-4000-8000-000000000009"

// execAll runs statements in order.
func execAll(t *testing.T, pool *pgxpool.Pool, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		_, err := pool.Exec(context.Background(), q)
		require.NoError(t, err, q)
	}
}

// claimAll reads every visible message of queue and claims the tasks behind them.
func claimAll(t *testing.T, pool *pgxpool.Pool, queue string) [][3]any {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
select t.run_id::text, t.step_slug, t.task_index
from pgflow.start_tasks($1, array(select m.msg_id from pgmq.read($1, 60, 1000) as m), $2::uuid) as t`, queue, readerWorker)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([3]any, error) {
		var id, step string
		var idx int
		err := r.Scan(&id, &step, &idx)
		return [3]any{id, step, idx}, err
	})
	require.NoError(t, err)
	return out
}

func TestGetQueueMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	diamondAndMap(t, db.Pool)

	depth, err := sqlapi.GetQueueMetrics(ctx, db.Pool, "fan")
	require.NoError(t, err)
	requireDepth(t, 0, 0, depth)

	_, err = sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`[1, 2, 3]`), "")
	require.NoError(t, err)
	depth, err = sqlapi.GetQueueMetrics(ctx, db.Pool, "fan")
	require.NoError(t, err)
	requireDepth(t, 3, 3, depth)

	// A read hides a message without removing it.
	msgs, err := sqlapi.ReadWithPoll(ctx, db.Pool, sqlapi.ReadParams{Queue: "fan", VisibilitySeconds: 30, Qty: 1, MaxPollSeconds: 1, PollIntervalMs: 10})
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	depth, err = sqlapi.GetQueueMetrics(ctx, db.Pool, "fan")
	require.NoError(t, err)
	requireDepth(t, 3, 2, depth)

	_, err = sqlapi.GetQueueMetrics(ctx, db.Pool, "no_such_queue")
	require.ErrorContains(t, err, `"no_such_queue"`)
}

// requireDepth checks a queue's length and visible messages.
func requireDepth(t *testing.T, length, visible int64, q sqlapi.QueueMetrics) {
	t.Helper()
	require.Equal(t, length, q.Length, "length of queue %q", q.Name)
	require.Equal(t, visible, q.Visible, "visible messages of queue %q", q.Name)
}

func TestListFlowsAndQueueMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	diamondAndMap(t, db.Pool)
	execAll(t, db.Pool, `select pgflow.register_worker('`+readerWorker+`', 'diamond', 'f')`)
	_, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "diamond", json.RawMessage(`{}`), "")
	require.NoError(t, err)
	_, err = sqlapi.StartFlowWithStates(ctx, db.Pool, "diamond", json.RawMessage(`{}`), "")
	require.NoError(t, err)
	_, err = sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`[]`), "") // completes at once
	require.NoError(t, err)
	execAll(t, db.Pool, `update pgflow.steps set opt_max_attempts = 1 where flow_slug = 'diamond'`)
	claimed := claimAll(t, db.Pool, "diamond")
	require.Len(t, claimed, 2)
	_, err = db.Pool.Exec(ctx, `select pgflow.fail_task($1::uuid, 'a', 0, 'x')`, claimed[0][0])
	require.NoError(t, err)

	flows, err := sqlapi.ListFlows(ctx, db.Pool, sqlapi.ListFlowsParams{})
	require.NoError(t, err)
	require.Len(t, flows, 2)
	d := flows[0]
	require.Equal(t, "diamond", d.FlowSlug)
	require.Equal(t, sqlapi.RunCounts{Started: 1, Failed: 1}, d.Runs)
	require.Len(t, d.Steps, 4)
	require.Equal(t, []string{"b", "c"}, d.Steps[3].Deps)
	require.NotNil(t, d.Steps[0].QueueName)
	require.Equal(t, "diamond", *d.Steps[0].QueueName)
	require.Equal(t, 5, d.MaxAttempts)
	require.Equal(t, sqlapi.RunCounts{Completed: 1}, flows[1].Runs)

	queues, err := sqlapi.ListQueueMetrics(ctx, db.Pool)
	require.NoError(t, err)
	require.Contains(t, queues, "diamond")
	q := queues["diamond"]
	require.NoError(t, q.Err)
	require.EqualValues(t, 1, q.Length)  // the started run's claimed task; the failed one's was archived
	require.EqualValues(t, 0, q.Visible) // claimed: invisible
	require.EqualValues(t, 2, q.Total)
	require.NotNil(t, q.OldestAgeSec)
	require.EqualValues(t, 0, queues["fan"].Length)
	require.Nil(t, queues["fan"].OldestAgeSec)

	// A listed queue whose tables are gone gets an error entry; the others are still read. The broken queue is a
	// PGMQ metadata row without tables, written directly: pgmq.meta has the same columns in the bundled layer and
	// in the real extension, which refuses to drop a queue table that belongs to it.
	execAll(t, db.Pool, `insert into pgmq.meta (queue_name, is_partitioned, is_unlogged) values ('ghost', false, false)`)
	queues, err = sqlapi.ListQueueMetrics(ctx, db.Pool)
	require.NoError(t, err)
	require.Error(t, queues["ghost"].Err)
	require.ErrorContains(t, queues["ghost"].Err, `"ghost"`)
	require.NoError(t, queues["diamond"].Err)
	require.NoError(t, queues["fan"].Err)
}
