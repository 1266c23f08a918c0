package sqlapi_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

func TestListRunTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	diamondAndMap(t, db.Pool)

	run, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`["x", "y"]`), "")
	require.NoError(t, err)
	runID := run.Run.RunID

	tasks, err := sqlapi.ListRunTasks(ctx, db.Pool, sqlapi.ListRunTasksParams{RunID: runID})
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
	claimed, err := sqlapi.StartTasks(ctx, db.Pool, "fan", "fan", []int64{*tasks[0].MessageID, *tasks[1].MessageID}, workerA)
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	_, err = sqlapi.CompleteTasks(ctx, db.Pool, []sqlapi.TaskResult{{RunID: runID, StepSlug: "each", TaskIndex: 0, Output: json.RawMessage(`"X"`), Attempt: 1}})
	require.NoError(t, err)
	_, _, err = sqlapi.FailTaskAt(ctx, db.Pool, sqlapi.TaskRef{RunID: runID, StepSlug: "each", TaskIndex: 1, Attempt: 1}, "boom", false, nil)
	require.NoError(t, err)

	tasks, err = sqlapi.ListRunTasks(ctx, db.Pool, sqlapi.ListRunTasksParams{RunID: runID})
	require.NoError(t, err)
	require.Len(t, tasks, 2)
	require.Equal(t, "completed", tasks[0].Status)
	require.Equal(t, 1, tasks[0].AttemptsCount)
	require.NotNil(t, tasks[0].CompletedAt)
	require.Equal(t, workerA, *tasks[0].LastWorkerID)
	require.Equal(t, "queued", tasks[1].Status)
	require.Equal(t, 1, tasks[1].AttemptsCount)
	require.Equal(t, "boom", *tasks[1].ErrorMessage)

	none, err := sqlapi.ListRunTasks(ctx, db.Pool, sqlapi.ListRunTasksParams{RunID: "00000000-0000-4000-8000-000000000000"})
	require.NoError(t, err)
	require.Empty(t, none)
}
