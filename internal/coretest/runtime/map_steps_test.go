package runtime_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// Map outputs are aggregated in task order, whatever the completion order; JSON nulls are kept.
func TestMapAggregatesOutputsInTaskOrder(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'sum', array['m'])")
	run := fx.StartFlow(t, db, "f", `[1, 2, 3, 4]`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 4)
	for _, i := range []int{2, 0, 3} {
		fx.CompleteTask(t, db, run.RunID, "m", i, fmt.Sprintf(`{"i": %d}`, i))
		require.Equal(t, "started", fx.GetStep(t, db, run.RunID, "m").Status)
		require.Empty(t, fx.GetStep(t, db, run.RunID, "m").Output, "no output before the last task")
	}
	fx.CompleteTask(t, db, run.RunID, "m", 1, `null`)
	m := fx.GetStep(t, db, run.RunID, "m")
	require.Equal(t, "completed", m.Status)
	require.Equal(t, fx.JSON(t, db, `[{"i": 0}, null, {"i": 2}, {"i": 3}]`), m.Output)

	tasks := fx.ReadAndStart(t, db, "f", 30, 10)
	require.Len(t, tasks, 1)
	require.Equal(t, fx.JSON(t, db, `{"m": [{"i": 0}, null, {"i": 2}, {"i": 3}]}`), tasks[0].Input)
}

func TestMapWithOneElementOutputsAnArray(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', step_type => 'map')")
	run := fx.StartFlow(t, db, "f", `["only"]`)
	fx.ReadAndStart(t, db, "f", 30, 1)
	fx.CompleteTask(t, db, run.RunID, "m", 0, `"x"`)
	require.Equal(t, `["x"]`, fx.GetStep(t, db, run.RunID, "m").Output)
	r := fx.GetRun(t, db, run.RunID)
	require.Equal(t, "completed", r.Status)
	require.Equal(t, `{"m": ["x"]}`, r.Output, "a map leaf contributes its array")
}

// A dependent map learns its task count from its parent: a single parent's array length, or a map parent's
// task count.
func TestDependentMapsFanOut(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'list')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'double', array['list'], step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'again', array['double'], step_type => 'map')")
	run := fx.StartFlow(t, db, "f", `{}`)
	fx.ReadAndStart(t, db, "f", 30, 1)
	fx.CompleteTask(t, db, run.RunID, "list", 0, `[1, 2, 3]`)

	d := fx.GetStep(t, db, run.RunID, "double")
	require.Equal(t, ptr(3), d.InitialTasks)
	require.Equal(t, "started", d.Status)
	require.Nil(t, fx.GetStep(t, db, run.RunID, "again").InitialTasks)
	tasks := fx.ReadAndStart(t, db, "f", 30, 10)
	require.Len(t, tasks, 3)
	for _, tk := range tasks {
		require.Equal(t, fmt.Sprint(tk.TaskIndex+1), tk.Input)
		fx.CompleteTask(t, db, run.RunID, "double", tk.TaskIndex, fmt.Sprint(2*(tk.TaskIndex+1)))
	}
	require.Equal(t, "[2, 4, 6]", fx.GetStep(t, db, run.RunID, "double").Output)
	require.Equal(t, ptr(3), fx.GetStep(t, db, run.RunID, "again").InitialTasks)
	tasks = fx.ReadAndStart(t, db, "f", 30, 10)
	require.Len(t, tasks, 3)
	for _, tk := range tasks {
		require.Equal(t, fmt.Sprint(2*(tk.TaskIndex+1)), tk.Input)
		fx.CompleteTask(t, db, run.RunID, "again", tk.TaskIndex, tk.Input)
	}
	r := fx.GetRun(t, db, run.RunID)
	require.Equal(t, "completed", r.Status)
	require.Equal(t, `{"again": [2, 4, 6]}`, r.Output)
}

// Empty arrays: a root map over [] completes without tasks, messages or step:started; map dependents complete
// in the following waves; single dependents start with {<map>: []}.
func TestEmptyArraysCompleteWithoutTasks(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.InstallRealtime(t, db)
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'root', step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'child', array['root'], step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'grandchild', array['child'], step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'summary', array['grandchild'])")
	run := fx.StartFlow(t, db, "f", `[]`)

	for _, slug := range []string{"root", "child", "grandchild"} {
		s := fx.GetStep(t, db, run.RunID, slug)
		require.Equal(t, "completed", s.Status, slug)
		require.Equal(t, "[]", s.Output, slug)
		require.Equal(t, ptr(0), s.InitialTasks, slug)
		require.Equal(t, ptr(0), s.RemainingTasks, slug)
		require.NotNil(t, s.StartedAt, slug)
		require.Equal(t, s.StartedAt, s.CompletedAt, slug)
		require.Empty(t, fx.GetTasks(t, db, run.RunID, slug), slug)
	}
	require.Equal(t, "started", fx.GetStep(t, db, run.RunID, "summary").Status)
	require.Equal(t, 1, fx.GetRun(t, db, run.RunID).RemainingSteps)
	require.Len(t, fx.QueueMessages(t, db, "f"), 1, "only the single step got a message")

	names := fx.EventNames(fx.RealtimeEvents(t, db, run.RunID))
	require.Equal(t, []string{
		"run:started", "step:root:completed", "step:child:completed", "step:grandchild:completed",
		"step:summary:started",
	}, names, "taskless maps emit step:completed in wave order and never step:started")

	tasks := fx.ReadAndStart(t, db, "f", 30, 1)
	require.Len(t, tasks, 1)
	require.Equal(t, `{"grandchild": []}`, tasks[0].Input)
}

// A single step producing [] for a dependent map: the map gets 0 tasks and completes taskless.
func TestDependentMapOverEmptyOutput(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'list')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'each', array['list'], step_type => 'map')")
	run2 := fx.StartFlow(t, db, "f", `{}`)
	fx.ReadAndStart(t, db, "f", 30, 1)
	fx.CompleteTask(t, db, run2.RunID, "list", 0, `[]`)
	each := fx.GetStep(t, db, run2.RunID, "each")
	require.Equal(t, "completed", each.Status)
	require.Equal(t, "[]", each.Output)
	r := fx.GetRun(t, db, run2.RunID)
	require.Equal(t, "completed", r.Status)
	require.Equal(t, `{"each": []}`, r.Output)
}

// A single step that feeds a map and produces anything but an array fails the run, whatever when_exhausted says.
func TestTypeViolations(t *testing.T) {
	t.Parallel()
	cases := []struct {
		output, typ string
	}{
		{`{"a": 1}`, "object"},
		{`"text"`, "string"},
		{`42`, "number"},
		{`true`, "boolean"},
		{`null`, "null"},
		{``, "null"}, // SQL NULL
	}
	for _, c := range cases {
		t.Run(c.typ+"/"+c.output, func(t *testing.T) {
			t.Parallel()
			db := newDB(t).Pool
			fx.InstallRealtime(t, db)
			fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 5)")
			fx.Exec(t, db, "select pgflow.add_step('f', 'producer', when_exhausted => 'skip')")
			fx.Exec(t, db, "select pgflow.add_step('f', 'other')")
			fx.Exec(t, db, "select pgflow.add_step('f', 'consumer', array['producer'], step_type => 'map')")
			run := fx.StartFlow(t, db, "f", `{}`)
			require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 2)

			row := fx.CompleteTask(t, db, run.RunID, "producer", 0, c.output)
			require.Equal(t, "failed", row.Status)
			require.Equal(t, ptr("[TYPE_VIOLATION] Produced "+c.typ+" instead of array"), row.ErrorMessage)
			if c.output != "" {
				require.Equal(t, fx.JSON(t, db, c.output), row.Output, "the offending output is kept on the task")
			}
			p := fx.GetStep(t, db, run.RunID, "producer")
			require.Equal(t, "failed", p.Status)
			require.Equal(t, ptr("[TYPE_VIOLATION] Map step consumer expects array input but dependency producer produced "+c.typ),
				p.ErrorMessage)
			require.Empty(t, p.Output)
			r := fx.GetRun(t, db, run.RunID)
			require.Equal(t, "failed", r.Status)
			require.Equal(t, 1, r.RemainingSteps, "the failed producer; the others are skipped (run_failed)")
			require.Equal(t, ptr("run_failed"), fx.GetStep(t, db, run.RunID, "consumer").SkipReason)
			require.Nil(t, fx.GetStep(t, db, run.RunID, "consumer").InitialTasks)
			require.Empty(t, fx.QueueMessages(t, db, "f"), "every message of the run is archived")

			names := fx.EventNames(fx.RealtimeEvents(t, db, run.RunID))
			require.Equal(t, "run:failed", names[len(names)-1], "run:failed comes last (v0.20.0)")
			require.Contains(t, names, "step:producer:failed")
			require.Contains(t, names, "step:consumer:skipped")
			stepMsg := "[TYPE_VIOLATION] Map step consumer expects array input but dependency producer produced " + c.typ
			rf := fx.FindEvent(t, db, run.RunID, "run:failed", "").Payload
			require.Equal(t, "f", rf["flow_slug"])
			require.Equal(t, "failed", rf["status"])
			require.Equal(t, stepMsg, rf["error_message"], "pgflow-go adds the step's message to run:failed")
			require.Contains(t, rf, "failed_at")
			sf := fx.FindEvent(t, db, run.RunID, "step:failed", "producer").Payload
			require.Equal(t, stepMsg, sf["error_message"])
			require.Contains(t, sf, "failed_at")
		})
	}
}

// Fix of upstream pgflow: the type check runs only for a started task; a bad output for a queued task changes
// nothing.
func TestTypeViolationIgnoredForTaskNotStarted(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'producer')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'consumer', array['producer'], step_type => 'map')")
	run := fx.StartFlow(t, db, "f", `{}`)
	row := fx.CompleteTask(t, db, run.RunID, "producer", 0, `{"not": "array"}`)
	require.Equal(t, "queued", row.Status)
	require.Equal(t, "started", fx.GetRun(t, db, run.RunID).Status)
	require.Equal(t, "started", fx.GetStep(t, db, run.RunID, "producer").Status)
	require.Len(t, fx.QueueMessages(t, db, "f"), 1)
}

func TestMapTaskExhaustedFailsRunWithoutAggregation(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', step_type => 'map')")
	run := fx.StartFlow(t, db, "f", `[1, 2, 3]`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 3)
	fx.CompleteTask(t, db, run.RunID, "m", 0, `1`)
	fx.FailTask(t, db, run.RunID, "m", 1, "bad element")
	m := fx.GetStep(t, db, run.RunID, "m")
	require.Equal(t, "failed", m.Status)
	require.Empty(t, m.Output)
	require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)
	require.Equal(t, "cancelled", fx.GetTask(t, db, run.RunID, "m", 2).Status, "unfinished siblings are cancelled (v0.20.0)")
	require.Equal(t, "completed", fx.GetTask(t, db, run.RunID, "m", 0).Status, "finished siblings keep their status")
	require.Empty(t, fx.QueueMessages(t, db, "f"), "sibling messages are archived")
	// The sibling's late completion is ignored.
	require.Equal(t, "cancelled", fx.CompleteTask(t, db, run.RunID, "m", 2, `3`).Status)
}

// A dependent map that is already skipped needs no array: its parent's non-array output is not a type violation.
func TestNoTypeViolationForSkippedMapChild(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'producer')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'consumer', array['producer'], step_type => 'map')")
	run := fx.StartFlow(t, db, "f", `{}`)
	fx.Val[int](t, db, "select pgflow._cascade_force_skip_steps($1, 'consumer', 'condition_unmet')", run.RunID)
	fx.ReadAndStart(t, db, "f", 30, 1)
	row := fx.CompleteTask(t, db, run.RunID, "producer", 0, `{"not": "array"}`)
	require.Equal(t, "completed", row.Status)
	r := fx.GetRun(t, db, run.RunID)
	require.Equal(t, "completed", r.Status)
	require.Equal(t, "", r.Output, "the only leaf was skipped")
}
