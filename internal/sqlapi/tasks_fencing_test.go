package sqlapi_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// claimOnly reads and claims the task of flow "only" step and returns it.
func claimOnly(t *testing.T, slug string) (*pgtest.DB, sqlapi.ClaimedTask) {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	defineFlow(t, db.Pool, slug, `{}`)
	_, err := db.Pool.Exec(ctx, `update pgflow.flows set opt_timeout = 7, opt_max_attempts = 4 where flow_slug = $1`, slug)
	require.NoError(t, err)
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerA, slug, "pgflow-go"))
	msgs, err := sqlapi.Read(ctx, db.Pool, sqlapi.ReadParams{Queue: slug, VisibilitySeconds: 30, Qty: 10})
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	tasks, err := sqlapi.StartTasks(ctx, db.Pool, slug, slug, []int64{msgs[0].ID}, workerA)
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	return db, tasks[0]
}

// recoverAndReclaim does what stalled-task recovery and a second claim do: attempt 1 is no longer current.
func recoverAndReclaim(t *testing.T, db *pgtest.DB, slug string, tk sqlapi.ClaimedTask) sqlapi.ClaimedTask {
	t.Helper()
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `update pgflow.step_tasks set queued_at = now() - interval '2 hours', started_at = now() - interval '1 hour' where run_id = $1`, tk.RunID)
	require.NoError(t, err)
	ran, n, err := sqlapi.RequeueStalledTasks(ctx, db.Pool)
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, 1, n)
	tasks, err := sqlapi.StartTasks(ctx, db.Pool, slug, slug, []int64{tk.MsgID}, workerB)
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	return tasks[0]
}

func TestClaimReportsEffectiveTimeoutAndMaxAttempts(t *testing.T) {
	t.Parallel()
	_, tk := claimOnly(t, "claim_opts")
	require.Equal(t, 1, tk.Attempt)
	require.Equal(t, 7, tk.TimeoutSeconds)
	require.Equal(t, 4, tk.MaxAttempts)
}

func TestFencedCompleteFailAndRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, first := claimOnly(t, "fenced")
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerB, "fenced", "pgflow-go"))
	ref1 := sqlapi.TaskRef{RunID: first.RunID, StepSlug: "only", TaskIndex: 0, Attempt: 1}

	// Recovered while attempt 1 ran; not claimed again yet: attempt 1's failure is stale, nothing changes.
	_, err := db.Pool.Exec(ctx, `update pgflow.step_tasks set queued_at = now() - interval '2 hours', started_at = now() - interval '1 hour' where run_id = $1`, first.RunID)
	require.NoError(t, err)
	_, n, err := sqlapi.RequeueStalledTasks(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	failed, _, err := sqlapi.FailTaskAt(ctx, db.Pool, ref1, "late", false, nil)
	require.NoError(t, err)
	require.Equal(t, sqlapi.OutcomeStale, failed.Outcome)
	require.Equal(t, "queued", failed.Status)

	second, err := sqlapi.StartTasks(ctx, db.Pool, "fenced", "fenced", []int64{first.MsgID}, workerB)
	require.NoError(t, err)
	require.Len(t, second, 1)
	require.Equal(t, 2, second[0].Attempt)
	ref2 := ref1
	ref2.Attempt = 2

	// Attempt 1 reports again: stale for a completion, a failure and a release; attempt 2 still runs.
	done, err := sqlapi.CompleteTasks(ctx, db.Pool, []sqlapi.TaskResult{{RunID: first.RunID, StepSlug: "only", Output: json.RawMessage(`1`), Attempt: 1}})
	require.NoError(t, err)
	require.Equal(t, sqlapi.OutcomeStale, done[0].Outcome)
	failed, _, err = sqlapi.FailTaskAt(ctx, db.Pool, ref1, "late", true, nil)
	require.NoError(t, err)
	require.Equal(t, sqlapi.FailedTask{Status: "started", Outcome: sqlapi.OutcomeStale, CurrentAttempt: 2}, failed)
	released, err := sqlapi.ReleaseTasks(ctx, db.Pool, []sqlapi.TaskRef{ref1})
	require.NoError(t, err)
	require.Equal(t, []bool{false}, released)

	// Attempt 2 is released: queued again without spending the attempt, then claimed again as attempt 2.
	released, err = sqlapi.ReleaseTasks(ctx, db.Pool, []sqlapi.TaskRef{ref2})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, released)
	third, err := sqlapi.StartTasks(ctx, db.Pool, "fenced", "fenced", []int64{first.MsgID}, workerA)
	require.NoError(t, err)
	require.Len(t, third, 1)
	require.Equal(t, 2, third[0].Attempt)

	// Attempt 2 fails with attempts left: recorded, queued for a retry.
	failed, _, err = sqlapi.FailTaskAt(ctx, db.Pool, ref2, "boom", false, nil)
	require.NoError(t, err)
	require.Equal(t, sqlapi.FailedTask{Status: "queued", Outcome: sqlapi.OutcomeRecorded, CurrentAttempt: 2}, failed)
	_, err = db.Pool.Exec(ctx, `select pgmq.set_vt('fenced', $1, 0)`, first.MsgID)
	require.NoError(t, err)
	fourth, err := sqlapi.StartTasks(ctx, db.Pool, "fenced", "fenced", []int64{first.MsgID}, workerA)
	require.NoError(t, err)
	require.Len(t, fourth, 1)
	ref3 := ref1
	ref3.Attempt = 3

	// A permanent failure of attempt 3 fails the task although a fourth attempt is allowed.
	failed, _, err = sqlapi.FailTaskAt(ctx, db.Pool, ref3, "bad input", true, nil)
	require.NoError(t, err)
	require.Equal(t, sqlapi.FailedTask{Status: "failed", Outcome: sqlapi.OutcomeRecorded, CurrentAttempt: 3}, failed)

	// Unknown tasks.
	failed, _, err = sqlapi.FailTaskAt(ctx, db.Pool, sqlapi.TaskRef{RunID: "33333333-3333-4333-8333-333333333333", StepSlug: "only", Attempt: 1}, "x", false, nil)
	require.NoError(t, err)
	require.Equal(t, sqlapi.OutcomeUnknown, failed.Outcome)
	done, err = sqlapi.CompleteTasks(ctx, db.Pool, []sqlapi.TaskResult{{RunID: "33333333-3333-4333-8333-333333333333", StepSlug: "only", Output: json.RawMessage(`1`), Attempt: 1}})
	require.NoError(t, err)
	require.Equal(t, sqlapi.OutcomeUnknown, done[0].Outcome)
}

func TestFencedCompletionOfCurrentAttemptIsRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, first := claimOnly(t, "fenced_ok")
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerB, "fenced_ok", "pgflow-go"))
	second := recoverAndReclaim(t, db, "fenced_ok", first)
	done, err := sqlapi.CompleteTasks(ctx, db.Pool, []sqlapi.TaskResult{
		{RunID: first.RunID, StepSlug: "only", Output: json.RawMessage(`"first"`), Attempt: first.Attempt},
	})
	require.NoError(t, err)
	require.Equal(t, []sqlapi.CompletedTask{{Status: "started", Outcome: sqlapi.OutcomeStale}}, done)
	done, err = sqlapi.CompleteTasks(ctx, db.Pool, []sqlapi.TaskResult{
		{RunID: first.RunID, StepSlug: "only", Output: json.RawMessage(`"second"`), Attempt: second.Attempt},
	})
	require.NoError(t, err)
	require.Equal(t, []sqlapi.CompletedTask{{Status: "completed", Outcome: sqlapi.OutcomeRecorded}}, done)
	var out json.RawMessage
	require.NoError(t, db.Pool.QueryRow(ctx, `select output from pgflow.step_tasks where run_id = $1`, first.RunID).Scan(&out))
	require.JSONEq(t, `"second"`, string(out))
}
