package runtime_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// Retries go back to 'queued' and the same message becomes visible after floor(base_delay * 2^attempts_count)
// seconds, measured against the database clock.
func TestFailTaskRetriesWithExponentialBackoff(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 4, base_delay => 3)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	run := fx.StartFlow(t, db, "f", `{}`)
	msg := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID

	wants := []float64{6, 12, 24} // 3 * 2^1, 3 * 2^2, 3 * 2^3
	for i, want := range wants {
		if i > 0 {
			require.Equal(t, 1, fx.ResetVisibility(t, db, "f"))
		}
		tasks := fx.ReadAndStart(t, db, "f", 1, 1)
		require.Len(t, tasks, 1, "attempt %d", i+1)
		require.Equal(t, msg, tasks[0].MsgID, "a retry re-delivers the same message")
		row := fx.FailTask(t, db, run.RunID, "a", 0, "oops")
		require.Equal(t, "queued", row.Status)
		require.Equal(t, i+1, row.AttemptsCount)
		require.Equal(t, ptr("oops"), row.ErrorMessage)
		require.Nil(t, row.StartedAt)
		require.Nil(t, row.FailedAt)
		require.InDelta(t, want, fx.VisibleIn(t, db, "f", msg), 1.5, "attempt %d: delay", i+1)
		st := fx.GetStep(t, db, run.RunID, "a")
		require.Equal(t, "started", st.Status)
		require.Nil(t, st.ErrorMessage)
		require.Nil(t, st.FailedAt)
		require.Equal(t, "started", fx.GetRun(t, db, run.RunID).Status)
	}

	// Step-level options override the flow's.
	fx.Exec(t, db, "select pgflow.add_step('f', 'b', max_attempts => 2, base_delay => 10)")
	run2 := fx.StartFlow(t, db, "f", `{}`)
	bmsg := *fx.GetTask(t, db, run2.RunID, "b", 0).MessageID
	fx.EnsureWorker(t, db, "f", fx.DefaultWorker)
	require.Len(t, fx.StartTasks(t, db, "f", []int64{bmsg}, fx.DefaultWorker), 1)
	row := fx.FailTask(t, db, run2.RunID, "b", 0, "x")
	require.Equal(t, "queued", row.Status)
	require.InDelta(t, 20, fx.VisibleIn(t, db, "f", bmsg), 1.5)
	fx.Exec(t, db, "select pgflow.set_vt_batch('f', array[$1::bigint], array[0])", bmsg)
	require.Len(t, fx.StartTasks(t, db, "f", []int64{bmsg}, fx.DefaultWorker), 1)
	require.Equal(t, "failed", fx.FailTask(t, db, run2.RunID, "b", 0, "x").Status, "step max_attempts 2 is used")
}

func TestFailTaskExhaustedFailsStepAndRun(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 2, base_delay => 0)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'after', array['a'])")
	run := fx.StartFlow(t, db, "f", `[1, 2]`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 3)
	require.Equal(t, "queued", fx.FailTask(t, db, run.RunID, "a", 0, "first").Status)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 1)
	row := fx.FailTask(t, db, run.RunID, "a", 0, "second")
	require.Equal(t, "failed", row.Status)
	require.Equal(t, 2, row.AttemptsCount)
	require.NotNil(t, row.FailedAt)
	require.Equal(t, ptr("second"), row.ErrorMessage)

	a := fx.GetStep(t, db, run.RunID, "a")
	require.Equal(t, "failed", a.Status)
	require.Equal(t, ptr("second"), a.ErrorMessage)
	require.NotNil(t, a.FailedAt)
	r := fx.GetRun(t, db, run.RunID)
	require.Equal(t, "failed", r.Status)
	require.NotNil(t, r.FailedAt)
	require.Equal(t, 1, r.RemainingSteps, "the failed step is the one step neither completed nor skipped")

	// The run looks finished (v0.20.0): every message archived, unfinished tasks cancelled, unfinished steps
	// skipped with run_failed.
	require.Empty(t, fx.QueueMessages(t, db, "f"))
	require.Len(t, fx.ArchivedMessages(t, db, "f"), 3)
	for _, tk := range fx.GetTasks(t, db, run.RunID, "m") {
		require.Equal(t, "cancelled", tk.Status)
	}
	for _, s := range []string{"m", "after"} {
		st := fx.GetStep(t, db, run.RunID, s)
		require.Equal(t, "skipped", st.Status, s)
		require.Equal(t, ptr("run_failed"), st.SkipReason, s)
	}
}

func TestFailTaskMaxAttemptsZeroAndOneMeanOneAttempt(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1} {
		db := newDB(t).Pool
		fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => $1)", n)
		fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
		run := fx.StartFlow(t, db, "f", `{}`)
		fx.ReadAndStart(t, db, "f", 30, 1)
		require.Equal(t, "failed", fx.FailTask(t, db, run.RunID, "a", 0, "x").Status, "max_attempts %d", n)
		require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)
	}
}

// A failure after the run already failed changes nothing (v0.20.0): the run's failure cancelled the running task,
// archived its message and skipped its step (no retry, no event).
func TestFailTaskAfterRunFailed(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 3)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'b')")
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 2)
	fx.FailTask(t, db, run.RunID, "a", 0, "boom")
	require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)

	before := fullState(t, db, run.RunID, "f")
	row := fx.FailTask(t, db, run.RunID, "b", 0, "late")
	require.Equal(t, "cancelled", row.Status, "b had attempts left, but a failed run never retries")
	require.Nil(t, row.ErrorMessage)
	require.True(t, fx.InArchive(t, db, "f", *row.MessageID))
	require.Equal(t, ptr("run_failed"), fx.GetStep(t, db, run.RunID, "b").SkipReason)
	require.Equal(t, before, fullState(t, db, run.RunID, "f"))
}

// Fix of upstream pgflow: failing a task that is not 'started' changes nothing, in particular it does not push
// its message's visibility by the retry delay.
func TestFailTaskOnQueuedTaskChangesNothing(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', base_delay => 100)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	run := fx.StartFlow(t, db, "f", `{}`)
	before := fx.GetTask(t, db, run.RunID, "a", 0)

	row := fx.FailTask(t, db, run.RunID, "a", 0, "never started")
	require.Equal(t, "queued", row.Status)
	require.Nil(t, row.ErrorMessage)
	require.Equal(t, 0, row.AttemptsCount)
	require.LessOrEqual(t, fx.VisibleIn(t, db, "f", *before.MessageID), 0.0, "the message stays visible")

	// Failing twice: the second call finds the task queued (retrying) and changes nothing either.
	fx.ReadAndStart(t, db, "f", 30, 1)
	fx.FailTask(t, db, run.RunID, "a", 0, "once")
	delay := fx.VisibleIn(t, db, "f", *before.MessageID)
	require.InDelta(t, 200, delay, 2)
	again := fx.FailTask(t, db, run.RunID, "a", 0, "twice")
	require.Equal(t, ptr("once"), again.ErrorMessage)
	require.Equal(t, 1, again.AttemptsCount)
	require.InDelta(t, delay, fx.VisibleIn(t, db, "f", *before.MessageID), 1)
}

func TestFailTaskWhenExhaustedSkip(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'flaky', when_exhausted => 'skip')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'uses_both', array['a', 'flaky'])")
	fx.Exec(t, db, "select pgflow.add_step('f', 'each', array['flaky'], step_type => 'map')")
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 2)
	fx.CompleteTask(t, db, run.RunID, "a", 0, `"A"`)

	row := fx.FailTask(t, db, run.RunID, "flaky", 0, "gave up")
	require.Equal(t, "failed", row.Status)
	fl := fx.GetStep(t, db, run.RunID, "flaky")
	require.Equal(t, "skipped", fl.Status)
	require.Equal(t, ptr("handler_failed"), fl.SkipReason)
	require.Equal(t, ptr("gave up"), fl.ErrorMessage)
	require.NotNil(t, fl.SkippedAt)
	require.Nil(t, fl.FailedAt)
	require.Nil(t, fl.RemainingTasks)

	r := fx.GetRun(t, db, run.RunID)
	require.Equal(t, "started", r.Status)
	// each: a map whose only parent was skipped gets 0 tasks and completes taskless with [].
	each := fx.GetStep(t, db, run.RunID, "each")
	require.Equal(t, "completed", each.Status)
	require.Equal(t, "[]", each.Output)
	require.Equal(t, ptr(0), each.InitialTasks)
	// uses_both starts without the skipped dependency's key.
	ub := fx.GetStep(t, db, run.RunID, "uses_both")
	require.Equal(t, "started", ub.Status)
	tasks := fx.ReadAndStart(t, db, "f", 30, 10)
	require.Len(t, tasks, 1)
	require.Equal(t, `{"a": "A"}`, tasks[0].Input)
	fx.CompleteTask(t, db, run.RunID, "uses_both", 0, `"ok"`)
	r = fx.GetRun(t, db, run.RunID)
	require.Equal(t, "completed", r.Status)
	require.Equal(t, fx.JSON(t, db, `{"each": [], "uses_both": "ok"}`), r.Output)
}

func TestFailTaskWhenExhaustedSkipOnlyStepCompletesRun(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'only', when_exhausted => 'skip')")
	run := fx.StartFlow(t, db, "f", `{}`)
	fx.PollAndFail(t, db, "f")
	r := fx.GetRun(t, db, run.RunID)
	require.Equal(t, "completed", r.Status)
	require.Empty(t, r.Output)
}

func TestFailTaskWhenExhaustedSkipCascade(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a', when_exhausted => 'skip-cascade')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'b', array['a'])")
	fx.Exec(t, db, "select pgflow.add_step('f', 'c', array['b'])")
	fx.Exec(t, db, "select pgflow.add_step('f', 'independent')")
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 2)
	fx.FailTask(t, db, run.RunID, "a", 0, "nope")

	require.Equal(t, ptr("handler_failed"), fx.GetStep(t, db, run.RunID, "a").SkipReason)
	require.Equal(t, ptr("dependency_skipped"), fx.GetStep(t, db, run.RunID, "b").SkipReason)
	require.Equal(t, ptr("dependency_skipped"), fx.GetStep(t, db, run.RunID, "c").SkipReason)
	r := fx.GetRun(t, db, run.RunID)
	require.Equal(t, "started", r.Status)
	require.Equal(t, 1, r.RemainingSteps)
	fx.CompleteTask(t, db, run.RunID, "independent", 0, `1`)
	r = fx.GetRun(t, db, run.RunID)
	require.Equal(t, "completed", r.Status)
	require.Equal(t, `{"independent": 1}`, r.Output, "skipped leaves are absent from the run output")
}

// A replayed failure of a task whose step was already skipped is ignored: no double decrement, nothing started.
func TestFailTaskReplayAfterSkipIsIdempotent(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.InstallRealtime(t, db)
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', step_type => 'map', when_exhausted => 'skip')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'tail')")
	run := fx.StartFlow(t, db, "f", `[1, 2, 3]`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 4)
	fx.FailTask(t, db, run.RunID, "m", 0, "x")
	before := fx.GetRun(t, db, run.RunID)
	events := len(fx.RealtimeEvents(t, db, run.RunID))

	fx.FailTask(t, db, run.RunID, "m", 0, "x")
	row := fx.FailTask(t, db, run.RunID, "m", 1, "sibling")
	require.Equal(t, "started", row.Status, "a sibling failing after the skip changes nothing")
	require.Nil(t, row.ErrorMessage)
	require.Equal(t, before.RemainingSteps, fx.GetRun(t, db, run.RunID).RemainingSteps)
	require.Len(t, fx.RealtimeEvents(t, db, run.RunID), events, "no event on replay")
	for _, tk := range fx.GetTasks(t, db, run.RunID, "m")[1:] {
		require.False(t, fx.InQueue(t, db, "f", *tk.MessageID), "sibling messages were archived by the skip")
	}
}

func TestFailTaskUnknownTaskReturnsNothing(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	run := fx.StartFlow(t, db, "sequential", `{}`)
	n := fx.Val[int](t, db, "select count(*)::int from pgflow.fail_task($1, 'first', 3, 'x')", run.RunID)
	require.Equal(t, 0, n)
	n = fx.Val[int](t, db, "select count(*)::int from pgflow.fail_task(gen_random_uuid(), 'first', 0, 'x')")
	require.Equal(t, 0, n)
}
