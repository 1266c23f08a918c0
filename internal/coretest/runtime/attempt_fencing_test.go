package runtime_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// recoverAndReclaim makes the started task look stalled, recovers it with the real pgflow.requeue_stalled_tasks and
// claims it again, so the caller holds a stale attempt (the first) while the current one (returned) runs.
func recoverAndReclaim(t *testing.T, db fx.DB, flow, runID, step string) fx.Task {
	t.Helper()
	fx.Exec(t, db, `update pgflow.step_tasks set started_at = now() - interval '1 day',
		queued_at = least(queued_at, now() - interval '1 day')
		where run_id = $1 and step_slug = $2 and status = 'started'`, runID, step)
	require.Equal(t, 1, fx.Val[int](t, db, `select pgflow.requeue_stalled_tasks()`))
	tasks := fx.ReadAndStart(t, db, flow, 30, 10)
	require.Len(t, tasks, 1)
	return tasks[0]
}

func completeAttempt(t *testing.T, db fx.DB, runID, step string, attempt int, output string) fx.StepTask {
	t.Helper()
	rows, err := db.Query(fx.Ctx(t), `select run_id::text, step_slug, task_index, message_id, status, attempts_count,
		error_message, coalesce(output::text, ''), started_at, completed_at, failed_at, last_worker_id::text,
		requeued_count, last_requeued_at, permanently_stalled_at, queue_name
		from pgflow.complete_task($1, $2, 0, $3::jsonb, attempt => $4)`, runID, step, output, attempt)
	require.NoError(t, err)
	defer rows.Close()
	require.True(t, rows.Next(), "complete_task returns the row")
	var x fx.StepTask
	require.NoError(t, rows.Scan(&x.RunID, &x.StepSlug, &x.TaskIndex, &x.MessageID, &x.Status, &x.AttemptsCount,
		&x.ErrorMessage, &x.Output, &x.StartedAt, &x.CompletedAt, &x.FailedAt, &x.LastWorkerID, &x.RequeuedCount,
		&x.LastRequeuedAt, &x.PermanentlyStalledAt, &x.QueueName))
	return x
}

func failAttempt(t *testing.T, db fx.DB, runID, step string, attempt int, message string) (status string, attempts int) {
	t.Helper()
	require.NoError(t, db.QueryRow(fx.Ctx(t), `select status, attempts_count
		from pgflow.fail_task($1, $2, 0, $3, attempt => $4)`, runID, step, message, attempt).Scan(&status, &attempts))
	return status, attempts
}

// A stale success (attempt 1 reporting after the task was recovered and claimed again) is not stored and not fed
// to dependents; the current attempt's result is.
func TestStaleSuccessDoesNotOverrideCurrentAttempt(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 3, base_delay => 0)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'b', array['a'])")
	run := fx.StartFlow(t, db, "f", `{}`)
	first := fx.ReadAndStart(t, db, "f", 30, 10)
	require.Len(t, first, 1)
	second := recoverAndReclaim(t, db, "f", run.RunID, "a")
	require.Equal(t, first[0].MsgID, second.MsgID)
	require.Equal(t, 2, fx.GetTask(t, db, run.RunID, "a", 0).AttemptsCount)

	stale := completeAttempt(t, db, run.RunID, "a", 1, `"stale"`)
	require.Equal(t, "started", stale.Status, "the stale report changes nothing")
	require.Equal(t, 2, stale.AttemptsCount, "and the row says which attempt is current")
	require.Equal(t, "", fx.GetTask(t, db, run.RunID, "a", 0).Output)
	require.True(t, fx.InQueue(t, db, "f", first[0].MsgID), "the message is not archived by a stale report")
	require.Equal(t, "created", fx.GetStep(t, db, run.RunID, "b").Status)

	// The batch call says so in its result.
	var outcome, status string
	require.NoError(t, db.QueryRow(fx.Ctx(t), `select outcome, task_status from pgflow.complete_tasks(
		array[$1::uuid], array['a'], array[0], array['"stale again"'::jsonb], array[1])`, run.RunID).Scan(&outcome, &status))
	require.Equal(t, "stale", outcome)
	require.Equal(t, "started", status)

	current := completeAttempt(t, db, run.RunID, "a", 2, `"current"`)
	require.Equal(t, "completed", current.Status)
	require.Equal(t, `"current"`, current.Output)
	dep := fx.ReadAndStart(t, db, "f", 30, 10)
	require.Len(t, dep, 1)
	require.JSONEq(t, `{"a": "current"}`, dep[0].Input, "dependents see the current attempt's output")

	// Once recorded, even the current attempt's second report changes nothing.
	again := completeAttempt(t, db, run.RunID, "a", 2, `"replayed"`)
	require.Equal(t, `"current"`, again.Output)
}

// A stale error with no attempts left does not fail the run while the current attempt runs; the current attempt
// then succeeds.
func TestStaleErrorWithoutAttemptsLeftDoesNotFailRun(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 2, base_delay => 0)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 1)
	recoverAndReclaim(t, db, "f", run.RunID, "a")

	status, attempts := failAttempt(t, db, run.RunID, "a", 1, "stale boom")
	require.Equal(t, "started", status)
	require.Equal(t, 2, attempts)
	require.Equal(t, "started", fx.GetRun(t, db, run.RunID).Status)
	require.Nil(t, fx.GetTask(t, db, run.RunID, "a", 0).ErrorMessage)

	require.Equal(t, "completed", completeAttempt(t, db, run.RunID, "a", 2, `1`).Status)
	require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
}

// A stale error with attempts left does not requeue the task while the current attempt runs: no third,
// overlapping execution.
func TestStaleErrorWithAttemptsLeftDoesNotRequeue(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 5, base_delay => 0, timeout => 60)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 1)
	current := recoverAndReclaim(t, db, "f", run.RunID, "a")
	visibleBefore := fx.VisibleIn(t, db, "f", current.MsgID)
	require.Greater(t, visibleBefore, 30.0, "the claim hides the message for the step timeout")

	status, attempts := failAttempt(t, db, run.RunID, "a", 1, "stale boom")
	require.Equal(t, "started", status)
	require.Equal(t, 2, attempts)
	require.Greater(t, fx.VisibleIn(t, db, "f", current.MsgID), 30.0, "the message stays hidden")
	require.Empty(t, fx.ReadAndStart(t, db, "f", 30, 10), "nothing to claim while the current attempt runs")

	// The unfenced (pgflow) call keeps its old meaning.
	require.Equal(t, "queued", fx.FailTask(t, db, run.RunID, "a", 0, "unfenced").Status)
}

func TestCompleteTasksReportsDuplicatesAndUnknownTasks(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	run := fx.StartFlow(t, db, "f", `{}`)
	tasks := fx.ReadAndStart(t, db, "f", 30, 10)
	require.Len(t, tasks, 1)
	rows, err := db.Query(fx.Ctx(t), `select task_position, coalesce(task_status, ''), outcome from pgflow.complete_tasks(
		array[$1::uuid, $1::uuid, $1::uuid], array['a', 'a', 'nope'], array[0, 0, 0], array['1'::jsonb, '2', '3'],
		array[1, 1, 1])`, run.RunID)
	require.NoError(t, err)
	type res struct {
		pos             int
		status, outcome string
	}
	var got []res
	for rows.Next() {
		var r res
		require.NoError(t, rows.Scan(&r.pos, &r.status, &r.outcome))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []res{{1, "completed", "recorded"}, {2, "completed", "duplicate"}, {3, "", "unknown"}}, got)
	require.Equal(t, "1", fx.GetTask(t, db, run.RunID, "a", 0).Output, "the first mention wins")
}

func TestFailTaskRefusesNullErrorMessage(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 1)
	_, err := db.Exec(fx.Ctx(t), `select pgflow.fail_task($1, 'a', 0, null)`, run.RunID)
	requirePgError(t, err, "22004", "fail_task: error_message must not be NULL (run "+run.RunID+", step a, task 0)")
	task := fx.GetTask(t, db, run.RunID, "a", 0)
	require.Equal(t, "started", task.Status, "nothing changed")
	require.Nil(t, task.ErrorMessage)
}

// permanent => true fails the task at once, attempts left or not; when_exhausted then applies.
func TestFailTaskPermanentDoesNotRetry(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 5, base_delay => 0)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'b', when_exhausted => 'skip')")
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 2)
	var status string
	require.NoError(t, db.QueryRow(fx.Ctx(t), `select status from pgflow.fail_task($1, 'b', 0, 'bad request',
		attempt => 1, permanent => true)`, run.RunID).Scan(&status))
	require.Equal(t, "failed", status)
	require.Equal(t, "skipped", fx.GetStep(t, db, run.RunID, "b").Status, "when_exhausted 'skip' applies")
	require.Equal(t, "started", fx.GetRun(t, db, run.RunID).Status)
	require.NoError(t, db.QueryRow(fx.Ctx(t), `select status from pgflow.fail_task($1, 'a', 0, 'bad input',
		permanent => true)`, run.RunID).Scan(&status))
	require.Equal(t, "failed", status)
	require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)
	require.Equal(t, 1, fx.GetTask(t, db, run.RunID, "a", 0).AttemptsCount)
}

// release_tasks hands a claimed task back without spending its attempt; only the holder of the current attempt
// can, and only once.
func TestReleaseTasksReturnsTaskWithoutSpendingAttempt(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 1, timeout => 60)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	run := fx.StartFlow(t, db, "f", `{}`)
	claimed := fx.ReadAndStart(t, db, "f", 30, 10)
	require.Len(t, claimed, 1)
	require.Greater(t, fx.VisibleIn(t, db, "f", claimed[0].MsgID), 30.0)

	released := func(attempt int) []bool {
		rows, err := db.Query(fx.Ctx(t), `select released from pgflow.release_tasks(array[$1::uuid, $1::uuid],
			array['a', 'a'], array[0, 0], array[$2::int, $2::int]) order by task_position`, run.RunID, attempt)
		require.NoError(t, err)
		var out []bool
		for rows.Next() {
			var b bool
			require.NoError(t, rows.Scan(&b))
			out = append(out, b)
		}
		require.NoError(t, rows.Err())
		return out
	}
	require.Equal(t, []bool{false, false}, released(2), "not the current attempt")
	require.Equal(t, "started", fx.GetTask(t, db, run.RunID, "a", 0).Status)
	require.Equal(t, []bool{true, false}, released(1), "released once, the duplicate is not")
	task := fx.GetTask(t, db, run.RunID, "a", 0)
	require.Equal(t, "queued", task.Status)
	require.Equal(t, 0, task.AttemptsCount, "the interrupted attempt is not spent")
	require.Nil(t, task.StartedAt)
	require.LessOrEqual(t, fx.VisibleIn(t, db, "f", claimed[0].MsgID), 0.0, "visible at once")
	require.Equal(t, []bool{false, false}, released(1), "a queued task is not released again")

	// With max_attempts 1 the task can still run and complete.
	again := fx.ReadAndStart(t, db, "f", 30, 10)
	require.Len(t, again, 1)
	require.Equal(t, "completed", completeAttempt(t, db, run.RunID, "a", 1, `true`).Status)
	require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)

	_, err := db.Exec(fx.Ctx(t), `select pgflow.release_tasks(array[$1::uuid], array['a'], array[0], array[]::int[])`, run.RunID)
	requirePgError(t, err, "22023", "release_tasks: the arrays differ in length: 1 run_ids, 1 step_slugs, 1 task_indexes, 0 attempts")
}
