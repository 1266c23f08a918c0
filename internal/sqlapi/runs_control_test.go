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

// CancelRun and RetryRun call the SQL functions and classify their refusals; GetRunHealth says what a run waits on.
func TestRunControlCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	diamondAndMap(t, db.Pool)

	missing := "00000000-0000-4000-8000-000000000000"
	_, err := sqlapi.CancelRun(ctx, db.Pool, missing, "")
	require.True(t, sqlapi.IsRunMissing(err), "%v", err)
	_, err = sqlapi.RetryRun(ctx, db.Pool, missing, false)
	require.True(t, sqlapi.IsRunMissing(err), "%v", err)
	h, err := sqlapi.GetRunHealth(ctx, db.Pool, missing, time.Minute)
	require.NoError(t, err)
	require.Nil(t, h)

	run, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`["a", "b"]`), "")
	require.NoError(t, err)
	id := run.Run.RunID

	// No worker serves "fan" yet.
	h, err = sqlapi.GetRunHealth(ctx, db.Pool, id, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "started", h.Status)
	require.Equal(t, []sqlapi.RunQueueLoad{{Queue: "fan", Queued: 2}}, h.Queues)
	require.Empty(t, h.Stalled)

	// A live worker claims both tasks; one of them started long ago (stalled).
	execAll(t, db.Pool, `select pgflow.register_worker('`+readerWorker+`', 'fan', 'f')`)
	claimAll(t, db.Pool, "fan")
	execAll(t, db.Pool, `update pgflow.step_tasks set queued_at = now() - interval '2 hours', started_at = now() - interval '1 hour'
		where run_id = '`+id+`' and task_index = 1`)
	h, err = sqlapi.GetRunHealth(ctx, db.Pool, id, time.Minute)
	require.NoError(t, err)
	require.Len(t, h.Queues, 1)
	require.Equal(t, 2, h.Queues[0].Started)
	require.Equal(t, 1, h.Queues[0].AliveWorkers)
	require.NotNil(t, h.Queues[0].LastSeen)
	require.Len(t, h.Stalled, 1)
	require.Equal(t, "each", h.Stalled[0].StepSlug)
	require.Equal(t, 1, h.Stalled[0].TaskIndex)
	require.Equal(t, readerWorker, *h.Stalled[0].WorkerID)

	// A stopped worker is not alive.
	execAll(t, db.Pool, `select pgflow.mark_worker_stopped('`+readerWorker+`')`)
	h, err = sqlapi.GetRunHealth(ctx, db.Pool, id, time.Minute)
	require.NoError(t, err)
	require.Zero(t, h.Queues[0].AliveWorkers)

	_, err = sqlapi.RetryRun(ctx, db.Pool, id, false)
	require.True(t, sqlapi.IsRunFinished(err), "a started run cannot be retried: %v", err)

	c, err := sqlapi.CancelRun(ctx, db.Pool, id, "stop")
	require.NoError(t, err)
	require.Equal(t, sqlapi.ControlledRun{RunID: id, Status: "cancelled"}, c)
	_, err = sqlapi.CancelRun(ctx, db.Pool, id, "")
	require.True(t, sqlapi.IsRunFinished(err), "%v", err)
	require.Contains(t, sqlapi.ErrorMessage(err), "already cancelled")
	h, err = sqlapi.GetRunHealth(ctx, db.Pool, id, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "cancelled", h.Status)
	require.Empty(t, h.Queues, "a cancelled run waits on nothing")

	got, err := sqlapi.GetRunWithStates(ctx, db.Pool, id)
	require.NoError(t, err)
	require.NotNil(t, got.Run.CancelledAt)
	require.Equal(t, "stop", *got.Run.CancelReason)
	runs, _, err := sqlapi.ListRuns(ctx, db.Pool, sqlapi.ListRunsParams{Status: "cancelled"})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.NotNil(t, runs[0].CancelledAt)

	fresh, err := sqlapi.RetryRun(ctx, db.Pool, id, true)
	require.NoError(t, err)
	require.NotEqual(t, id, fresh.RunID)
	got, err = sqlapi.GetRunWithStates(ctx, db.Pool, fresh.RunID)
	require.NoError(t, err)
	require.Equal(t, id, *got.Run.RetryOf)

	resumed, err := sqlapi.RetryRun(ctx, db.Pool, id, false)
	require.NoError(t, err)
	require.Equal(t, sqlapi.ControlledRun{RunID: id, Status: "started"}, resumed)
}
