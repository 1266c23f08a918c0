package runtime_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

func TestCompleteTaskCompletesStepAndStartsDependents(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "two_roots")
	run := fx.StartFlow(t, db, "two_roots", `{}`)
	tasks := fx.ReadAndStart(t, db, "two_roots", 30, 10)
	require.Len(t, tasks, 2)
	msgA := fx.GetTask(t, db, run.RunID, "root_a", 0).MessageID

	row := fx.CompleteTask(t, db, run.RunID, "root_a", 0, `{"a": 1}`)
	require.Equal(t, "completed", row.Status)
	require.NotNil(t, row.CompletedAt)
	require.Equal(t, `{"a": 1}`, row.Output)
	require.True(t, fx.InArchive(t, db, "two_roots", *msgA), "a completed task's message is archived")
	require.False(t, fx.InQueue(t, db, "two_roots", *msgA))

	a := fx.GetStep(t, db, run.RunID, "root_a")
	require.Equal(t, "completed", a.Status)
	require.Equal(t, ptr(0), a.RemainingTasks)
	require.Equal(t, `{"a": 1}`, a.Output, "the step output is written with the transition")
	last := fx.GetStep(t, db, run.RunID, "last")
	require.Equal(t, 1, last.RemainingDeps)
	require.Equal(t, "created", last.Status)
	require.Equal(t, 2, fx.GetRun(t, db, run.RunID).RemainingSteps)

	fx.CompleteTask(t, db, run.RunID, "root_b", 0, `{"b": 2}`)
	last = fx.GetStep(t, db, run.RunID, "last")
	require.Equal(t, 0, last.RemainingDeps)
	require.Equal(t, "started", last.Status)
	require.Equal(t, 1, fx.GetRun(t, db, run.RunID).RemainingSteps)

	lt := fx.ReadAndStart(t, db, "two_roots", 30, 10)
	require.Len(t, lt, 1)
	require.Equal(t, fx.JSON(t, db, `{"root_a": {"a": 1}, "root_b": {"b": 2}}`), lt[0].Input)
	fx.CompleteTask(t, db, run.RunID, "last", 0, `"done"`)

	r := fx.GetRun(t, db, run.RunID)
	require.Equal(t, "completed", r.Status)
	require.Equal(t, `{"last": "done"}`, r.Output, "run output holds only the leaf steps")
	require.Empty(t, fx.QueueMessages(t, db, "two_roots"))
}

// Outputs 0, false, "" and JSON null are stored exactly as given, on the task, the step and the run.
func TestCompleteTaskStoresFalsyOutputsAsGiven(t *testing.T) {
	t.Parallel()
	for _, out := range []string{`0`, `false`, `""`, `null`, `[]`, `{}`} {
		t.Run(out, func(t *testing.T) {
			t.Parallel()
			db := newDB(t).Pool
			fx.Exec(t, db, "select pgflow.create_flow('f')")
			fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
			fx.Exec(t, db, "select pgflow.add_step('f', 'b', array['a'])")
			run := fx.StartFlow(t, db, "f", `{}`)
			fx.ReadAndStart(t, db, "f", 30, 1)
			require.Equal(t, out, fx.CompleteTask(t, db, run.RunID, "a", 0, out).Output)
			require.Equal(t, out, fx.GetStep(t, db, run.RunID, "a").Output)
			tk := fx.ReadAndStart(t, db, "f", 30, 1)
			require.Len(t, tk, 1)
			require.Equal(t, fx.JSON(t, db, `{"a": `+out+`}`), tk[0].Input)
			fx.CompleteTask(t, db, run.RunID, "b", 0, out)
			r := fx.GetRun(t, db, run.RunID)
			require.Equal(t, "completed", r.Status)
			require.Equal(t, fx.JSON(t, db, `{"b": `+out+`}`), r.Output)
		})
	}
}

// A late callback after the run failed changes nothing.
func TestCompleteTaskAfterRunFailed(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'b')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'c', array['a', 'b'])")
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 2)
	fx.FailTask(t, db, run.RunID, "a", 0, "boom")
	require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)

	row := fx.CompleteTask(t, db, run.RunID, "b", 0, `{"late": true}`)
	require.Equal(t, "cancelled", row.Status, "a callback for a failed run changes nothing")
	require.Empty(t, row.Output)
	b := fx.GetStep(t, db, run.RunID, "b")
	require.Equal(t, "skipped", b.Status)
	require.Equal(t, ptr("run_failed"), b.SkipReason)
	require.Empty(t, b.Output)
	require.Equal(t, 1, fx.GetRun(t, db, run.RunID).RemainingSteps)
	require.Equal(t, "skipped", fx.GetStep(t, db, run.RunID, "c").Status)
	require.Empty(t, fx.GetTasks(t, db, run.RunID, "c"))
}

// A late or replayed callback for a step that is no longer running only archives the task's message.
func TestCompleteTaskLateCallbackForFinishedStep(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', step_type => 'map', when_exhausted => 'skip')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'other')")
	run := fx.StartFlow(t, db, "f", `[1, 2]`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 3)
	fx.FailTask(t, db, run.RunID, "m", 0, "boom")
	require.Equal(t, "skipped", fx.GetStep(t, db, run.RunID, "m").Status)

	sibling := fx.GetTask(t, db, run.RunID, "m", 1)
	row := fx.CompleteTask(t, db, run.RunID, "m", 1, `"late"`)
	require.Equal(t, "started", row.Status)
	require.Empty(t, row.Output)
	require.False(t, fx.InQueue(t, db, "f", *sibling.MessageID))
	require.Equal(t, 1, fx.GetRun(t, db, run.RunID).RemainingSteps, "no double decrement")

	// Replaying a completion of a completed step does not complete anything twice.
	fx.CompleteTask(t, db, run.RunID, "other", 0, `1`)
	require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
	again := fx.CompleteTask(t, db, run.RunID, "other", 0, `2`)
	require.Equal(t, "1", again.Output)
	require.Equal(t, "1", fx.GetStep(t, db, run.RunID, "other").Output)
}

// Fix of upstream pgflow: completing a task that is not 'started' changes nothing.
func TestCompleteTaskOnQueuedTaskChangesNothing(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', step_type => 'map')")
	run := fx.StartFlow(t, db, "f", `[1, 2]`)
	// Claim only task 0.
	t0 := fx.GetTask(t, db, run.RunID, "m", 0)
	t1 := fx.GetTask(t, db, run.RunID, "m", 1)
	fx.EnsureWorker(t, db, "f", fx.DefaultWorker)
	require.Len(t, fx.StartTasks(t, db, "f", []int64{*t0.MessageID}, fx.DefaultWorker), 1)

	row := fx.CompleteTask(t, db, run.RunID, "m", 1, `"x"`)
	require.Equal(t, "queued", row.Status)
	require.Empty(t, row.Output)
	require.True(t, fx.InQueue(t, db, "f", *t1.MessageID), "the queued task's message stays in the queue")
	require.Equal(t, ptr(2), fx.GetStep(t, db, run.RunID, "m").RemainingTasks)

	// Completing twice: the second call is a no-op.
	fx.CompleteTask(t, db, run.RunID, "m", 0, `"a"`)
	fx.CompleteTask(t, db, run.RunID, "m", 0, `"b"`)
	require.Equal(t, `"a"`, fx.GetTask(t, db, run.RunID, "m", 0).Output)
	require.Equal(t, ptr(1), fx.GetStep(t, db, run.RunID, "m").RemainingTasks)
}

func TestCompleteTaskUnknownTaskReturnsNothing(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	run := fx.StartFlow(t, db, "sequential", `{}`)
	for _, q := range []struct {
		run, step string
		idx       int
	}{
		{run.RunID, "first", 5},
		{run.RunID, "nope", 0},
		{"00000000-0000-0000-0000-000000000000", "first", 0},
	} {
		rows, err := fx.TryCompleteTask(fx.Ctx(t), db, q.run, q.step, q.idx, `1`)
		require.NoError(t, err)
		n := 0
		for rows.Next() {
			n++
		}
		require.NoError(t, rows.Err())
		require.Equal(t, 0, n, "%+v", q)
	}
}
