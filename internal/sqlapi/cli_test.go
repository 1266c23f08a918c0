package sqlapi_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/schema"
)

// diamondAndMap defines "diamond" (a -> b, a -> c, {c, b} -> d, with step options) and "fan" (a map over the run
// input), with flow options on "diamond".
func diamondAndMap(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`select pgflow.create_flow('diamond', max_attempts => 5, base_delay => 2, timeout => 30)`,
		`select pgflow.add_step('diamond', 'a')`,
		`select pgflow.add_step('diamond', 'b', array['a'])`,
		`select pgflow.add_step('diamond', 'c', array['a'])`,
		`select pgflow.add_step('diamond', 'd', array['c', 'b'])`,
		`select pgflow.create_flow('fan')`,
		`select pgflow.add_step('fan', 'each', step_type => 'map')`,
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err, q)
	}
}

func TestListFlows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)

	flows, err := sqlapi.ListFlows(ctx, db.Pool, "")
	require.NoError(t, err)
	require.Empty(t, flows)

	diamondAndMap(t, db.Pool)
	_, err = sqlapi.StartFlowWithStates(ctx, db.Pool, "diamond", json.RawMessage(`{}`), "")
	require.NoError(t, err)
	_, err = sqlapi.StartFlowWithStates(ctx, db.Pool, "diamond", json.RawMessage(`{}`), "")
	require.NoError(t, err)
	// An empty root map completes at once, so it is not an active run.
	done, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`[]`), "")
	require.NoError(t, err)
	require.Equal(t, "completed", done.Run.Status)

	flows, err = sqlapi.ListFlows(ctx, db.Pool, "")
	require.NoError(t, err)
	require.Len(t, flows, 2)

	d := flows[0]
	require.Equal(t, "diamond", d.FlowSlug)
	require.Equal(t, 5, d.MaxAttempts)
	require.Equal(t, 2, d.BaseDelay)
	require.Equal(t, 30, d.Timeout)
	require.False(t, d.CreatedAt.IsZero())
	require.EqualValues(t, 2, d.ActiveRuns)
	q := func(s string) *string { return &s }
	require.Equal(t, []sqlapi.FlowStep{
		{StepSlug: "a", StepType: "single", StepIndex: 0, Deps: []string{}, QueueName: q("diamond")},
		{StepSlug: "b", StepType: "single", StepIndex: 1, Deps: []string{"a"}, QueueName: q("diamond")},
		{StepSlug: "c", StepType: "single", StepIndex: 2, Deps: []string{"a"}, QueueName: q("diamond")},
		{StepSlug: "d", StepType: "single", StepIndex: 3, Deps: []string{"b", "c"}, QueueName: q("diamond")}, // step_index order
	}, d.Steps)

	f := flows[1]
	require.Equal(t, "fan", f.FlowSlug)
	require.Equal(t, 3, f.MaxAttempts) // create_flow defaults
	require.Equal(t, 5, f.BaseDelay)
	require.Equal(t, 60, f.Timeout)
	require.EqualValues(t, 0, f.ActiveRuns)
	require.Equal(t, []sqlapi.FlowStep{{StepSlug: "each", StepType: "map", StepIndex: 0, Deps: []string{}, QueueName: q("fan")}}, f.Steps)

	only, err := sqlapi.ListFlows(ctx, db.Pool, "fan")
	require.NoError(t, err)
	require.Equal(t, flows[1:], only)
	none, err := sqlapi.ListFlows(ctx, db.Pool, "nope")
	require.NoError(t, err)
	require.Empty(t, none)
}

func TestQueueMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	diamondAndMap(t, db.Pool)

	depth, err := sqlapi.QueueMetrics(ctx, db.Pool, "fan")
	require.NoError(t, err)
	require.Equal(t, sqlapi.QueueDepth{}, depth)

	_, err = sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`[1, 2, 3]`), "")
	require.NoError(t, err)
	depth, err = sqlapi.QueueMetrics(ctx, db.Pool, "fan")
	require.NoError(t, err)
	require.Equal(t, sqlapi.QueueDepth{Length: 3, Visible: 3}, depth)

	// A read hides a message without removing it.
	msgs, err := sqlapi.ReadWithPoll(ctx, db.Pool, "fan", 30, 1, 1, 10)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	depth, err = sqlapi.QueueMetrics(ctx, db.Pool, "fan")
	require.NoError(t, err)
	require.Equal(t, sqlapi.QueueDepth{Length: 3, Visible: 2}, depth)

	_, err = sqlapi.QueueMetrics(ctx, db.Pool, "no_such_queue")
	require.ErrorContains(t, err, `"no_such_queue"`)
}

func TestRunTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	diamondAndMap(t, db.Pool)

	run, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`["x", "y"]`), "")
	require.NoError(t, err)
	runID := run.Run.RunID

	tasks, err := sqlapi.RunTasks(ctx, db.Pool, runID)
	require.NoError(t, err)
	require.Len(t, tasks, 2)
	for i, task := range tasks {
		require.Equal(t, "each", task.StepSlug)
		require.Equal(t, i, task.TaskIndex)
		require.Equal(t, "queued", task.Status)
		require.Equal(t, 0, task.AttemptsCount)
		require.NotNil(t, task.MessageID)
		require.Equal(t, "fan", *task.QueueName)
		require.Nil(t, task.ErrorMessage)
		require.Nil(t, task.LastWorkerID)
		require.Nil(t, task.StartedAt)
	}

	// Claim and fail task 1 once (it is retried), complete task 0.
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerA, "fan", "test"))
	claimed, err := sqlapi.StartTasks(ctx, db.Pool, "fan", []int64{*tasks[0].MessageID, *tasks[1].MessageID}, workerA)
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	_, err = sqlapi.CompleteTask(ctx, db.Pool, runID, "each", 0, json.RawMessage(`"X"`))
	require.NoError(t, err)
	_, err = sqlapi.FailTask(ctx, db.Pool, runID, "each", 1, "boom")
	require.NoError(t, err)

	tasks, err = sqlapi.RunTasks(ctx, db.Pool, runID)
	require.NoError(t, err)
	require.Len(t, tasks, 2)
	require.Equal(t, "completed", tasks[0].Status)
	require.Equal(t, 1, tasks[0].AttemptsCount)
	require.NotNil(t, tasks[0].CompletedAt)
	require.Equal(t, workerA, *tasks[0].LastWorkerID)
	require.Equal(t, "queued", tasks[1].Status)
	require.Equal(t, 1, tasks[1].AttemptsCount)
	require.Equal(t, "boom", *tasks[1].ErrorMessage)

	none, err := sqlapi.RunTasks(ctx, db.Pool, "00000000-0000-4000-8000-000000000000")
	require.NoError(t, err)
	require.Empty(t, none)
}

// The reads also work on a database still at schema v0.16.0, which has no queue_name columns.
func TestCLIReadsOnSchemaV016(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewWithPGMQ(t)
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	_, err = schema.NewMigrator(conn).Up(ctx, "v0.16.0")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	diamondAndMap(t, db.Pool)

	flows, err := sqlapi.ListFlows(ctx, db.Pool, "fan")
	require.NoError(t, err)
	require.Equal(t, []sqlapi.FlowStep{{StepSlug: "each", StepType: "map", StepIndex: 0, Deps: []string{}}}, flows[0].Steps)
	run, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`[1]`), "")
	require.NoError(t, err)
	tasks, err := sqlapi.RunTasks(ctx, db.Pool, run.Run.RunID)
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Nil(t, tasks[0].QueueName)
	require.NotNil(t, tasks[0].MessageID)
	depth, err := sqlapi.QueueMetrics(ctx, db.Pool, "fan")
	require.NoError(t, err)
	require.Equal(t, sqlapi.QueueDepth{Length: 1, Visible: 1}, depth)
}

func TestListWorkersAndGetWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	diamondAndMap(t, db.Pool)

	ws, err := sqlapi.ListWorkers(ctx, db.Pool, 0)
	require.NoError(t, err)
	require.Empty(t, ws)

	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerA, "fan", "fn-a"))
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerB, "diamond", "fn-b"))
	require.NoError(t, sqlapi.MarkWorkerStopped(ctx, db.Pool, workerB))
	// A third worker last heard of two days ago, never stopped.
	const workerC = "33333333-3333-4333-8333-333333333333"
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerC, "fan", "fn-c"))
	_, err = db.Pool.Exec(ctx, `update pgflow.workers set last_heartbeat_at = now() - interval '2 days',
		started_at = now() - interval '3 days' where worker_id = $1`, workerC)
	require.NoError(t, err)

	// Worker A runs one task.
	run, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`[1]`), "")
	require.NoError(t, err)
	tasks, err := sqlapi.RunTasks(ctx, db.Pool, run.Run.RunID)
	require.NoError(t, err)
	_, err = sqlapi.StartTasks(ctx, db.Pool, "fan", []int64{*tasks[0].MessageID}, workerA)
	require.NoError(t, err)

	ws, err = sqlapi.ListWorkers(ctx, db.Pool, 0)
	require.NoError(t, err)
	require.Len(t, ws, 3)
	// Not stopped first (most recent heartbeat first), then stopped.
	require.Equal(t, workerA, ws[0].WorkerID)
	require.Equal(t, "fan", ws[0].QueueName)
	require.Equal(t, "fn-a", ws[0].FunctionName)
	require.Nil(t, ws[0].StoppedAt)
	require.Nil(t, ws[0].DeprecatedAt)
	require.EqualValues(t, 1, ws[0].RunningTasks)
	require.Less(t, ws[0].HeartbeatAge, time.Hour)
	require.Equal(t, workerC, ws[1].WorkerID)
	require.Greater(t, ws[1].HeartbeatAge, 47*time.Hour)
	require.EqualValues(t, 0, ws[1].RunningTasks)
	require.Equal(t, workerB, ws[2].WorkerID)
	require.NotNil(t, ws[2].StoppedAt)
	require.NotNil(t, ws[2].DeprecatedAt)

	recent, err := sqlapi.ListWorkers(ctx, db.Pool, 24*time.Hour)
	require.NoError(t, err)
	require.Len(t, recent, 2)
	require.Equal(t, workerA, recent[0].WorkerID)
	require.Equal(t, workerB, recent[1].WorkerID)

	w, err := sqlapi.GetWorker(ctx, db.Pool, workerC)
	require.NoError(t, err)
	require.NotNil(t, w)
	require.Equal(t, "fn-c", w.FunctionName)
	missing, err := sqlapi.GetWorker(ctx, db.Pool, "44444444-4444-4444-8444-444444444444")
	require.NoError(t, err)
	require.Nil(t, missing)
}
