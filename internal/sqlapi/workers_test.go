package sqlapi_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

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
	tasks, err := sqlapi.ListRunTasks(ctx, db.Pool, sqlapi.ListRunTasksParams{RunID: run.Run.RunID})
	require.NoError(t, err)
	_, err = sqlapi.StartTasks(ctx, db.Pool, "fan", "fan", []int64{*tasks[0].MessageID}, workerA)
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

	running, err := sqlapi.GetWorker(ctx, db.Pool, workerA)
	require.NoError(t, err)
	require.EqualValues(t, 1, running.RunningTasks, "one worker's count, as in the list")

	w, err := sqlapi.GetWorker(ctx, db.Pool, workerC)
	require.NoError(t, err)
	require.NotNil(t, w)
	require.Equal(t, "fn-c", w.FunctionName)
	missing, err := sqlapi.GetWorker(ctx, db.Pool, "44444444-4444-4444-8444-444444444444")
	require.NoError(t, err)
	require.Nil(t, missing)
}
