package runtime_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

func TestCascadeForceSkipSteps(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.InstallRealtime(t, db)
	// a -> b -> d, a -> c -> d, plus an unrelated root e; b is a map over a's output.
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'e')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'c', array['a'])")
	fx.Exec(t, db, "select pgflow.add_step('f', 'b', array['a'], step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'd', array['b', 'c'])")
	run := fx.StartFlow(t, db, "f", `{}`)
	aMsg := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID
	eMsg := *fx.GetTask(t, db, run.RunID, "e", 0).MessageID

	n := fx.Val[int](t, db, "select pgflow._cascade_force_skip_steps($1, 'a', 'condition_unmet')", run.RunID)
	require.Equal(t, 4, n)
	require.Equal(t, ptr("condition_unmet"), fx.GetStep(t, db, run.RunID, "a").SkipReason)
	for _, s := range []string{"b", "c", "d"} {
		st := fx.GetStep(t, db, run.RunID, s)
		require.Equal(t, "skipped", st.Status, s)
		require.Equal(t, ptr("dependency_skipped"), st.SkipReason, s)
		require.Nil(t, st.RemainingTasks, s)
	}
	a := fx.GetStep(t, db, run.RunID, "a")
	require.Nil(t, a.RemainingTasks, "a started step that is skipped has remaining_tasks cleared")
	require.Equal(t, "started", fx.GetStep(t, db, run.RunID, "e").Status)
	require.Equal(t, 1, fx.GetRun(t, db, run.RunID).RemainingSteps)
	require.True(t, fx.InArchive(t, db, "f", aMsg), "messages of skipped steps are archived")
	require.True(t, fx.InQueue(t, db, "f", eMsg))
	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "a", 0).Status, "task rows keep their status")

	// Events in step_index (topological) order.
	skips := fx.FilterEvents(fx.RealtimeEvents(t, db, run.RunID), "step:skipped", "")
	var order []string
	for _, e := range skips {
		order = append(order, e.StepSlug())
		require.Equal(t, "f", e.Payload["flow_slug"])
		require.Equal(t, "skipped", e.Payload["status"])
		require.Contains(t, e.Payload, "skipped_at")
	}
	require.Equal(t, []string{"a", "c", "b", "d"}, order)
	require.Equal(t, "condition_unmet", skips[0].Payload["skip_reason"])
	require.Equal(t, "dependency_skipped", skips[1].Payload["skip_reason"])

	// A second call skips nothing and emits nothing.
	require.Equal(t, 0, fx.Val[int](t, db, "select pgflow._cascade_force_skip_steps($1, 'a', 'condition_unmet')", run.RunID))
	require.Len(t, fx.FilterEvents(fx.RealtimeEvents(t, db, run.RunID), "step:skipped", ""), 4)
	require.Equal(t, 1, fx.GetRun(t, db, run.RunID).RemainingSteps)

	_, err := db.Exec(fx.Ctx(t), "select pgflow._cascade_force_skip_steps('00000000-0000-0000-0000-000000000001', 'a', 'x')")
	requirePgError(t, err, "P0001", "Run not found: 00000000-0000-0000-0000-000000000001")
}

// Steps that are already terminal (here the completed trigger itself) are left alone; only created/started
// dependents are skipped.
func TestCascadeForceSkipLeavesTerminalStepsAlone(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	run := fx.StartFlow(t, db, "sequential", `{}`)
	fx.PollAndComplete(t, db, "sequential")
	n := fx.Val[int](t, db, "select pgflow._cascade_force_skip_steps($1, 'first', 'handler_failed')", run.RunID)
	require.Equal(t, 2, n, "the completed trigger stays completed; second and last are skipped")
	require.Equal(t, "completed", fx.GetStep(t, db, run.RunID, "first").Status)
	require.Equal(t, ptr("dependency_skipped"), fx.GetStep(t, db, run.RunID, "second").SkipReason)
}

func TestCascadeCompleteTasklessSteps(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'list')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm1', array['list'], step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm2', array['m1'], step_type => 'map')")
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Equal(t, 0, fx.Val[int](t, db, "select pgflow.cascade_complete_taskless_steps($1)", run.RunID),
		"nothing is taskless yet")
	// Simulate the parent completing with [] the way complete_task does, then cascade by hand.
	fx.Exec(t, db, `update pgflow.step_states set status = 'completed', completed_at = now(), remaining_tasks = 0,
		output = '[]' where run_id = $1 and step_slug = 'list'`, run.RunID)
	fx.Exec(t, db, `update pgflow.step_states set remaining_deps = 0, initial_tasks = 0 where run_id = $1 and step_slug = 'm1'`, run.RunID)
	fx.Exec(t, db, "update pgflow.runs set remaining_steps = 2 where run_id = $1", run.RunID)
	require.Equal(t, 2, fx.Val[int](t, db, "select pgflow.cascade_complete_taskless_steps($1)", run.RunID))
	require.Equal(t, "completed", fx.GetStep(t, db, run.RunID, "m2").Status)
	r := fx.GetRun(t, db, run.RunID)
	require.Equal(t, 0, r.RemainingSteps)
	require.Equal(t, "started", r.Status, "the cascade does not complete the run itself")
	fx.Exec(t, db, "select pgflow.maybe_complete_run($1)", run.RunID)
	require.Equal(t, `{"m2": []}`, fx.GetRun(t, db, run.RunID).Output)
}

func TestCascadeCompleteTasklessStepsOnFailedRunDoesNothing(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', array['a'], step_type => 'map')")
	run := fx.StartFlow(t, db, "f", `{}`)
	fx.Exec(t, db, "update pgflow.step_states set remaining_deps = 0, initial_tasks = 0 where run_id = $1 and step_slug = 'm'", run.RunID)
	fx.Exec(t, db, "update pgflow.runs set status = 'failed', failed_at = now() where run_id = $1", run.RunID)
	require.Equal(t, 0, fx.Val[int](t, db, "select pgflow.cascade_complete_taskless_steps($1)", run.RunID))
	require.Equal(t, "created", fx.GetStep(t, db, run.RunID, "m").Status)
}

// A chain of 49 taskless maps completes inside start_flow; 50 exceed the safety limit and roll everything back.
func TestTasklessCascadeSafetyLimit(t *testing.T) {
	t.Parallel()
	build := func(t *testing.T, n int) *fx.Run {
		db := newDB(t).Pool
		fx.Exec(t, db, "select pgflow.create_flow('chain')")
		fx.Exec(t, db, "select pgflow.add_step('chain', 'm0', step_type => 'map')")
		for i := 1; i < n; i++ {
			fx.Exec(t, db, fmt.Sprintf("select pgflow.add_step('chain', 'm%d', array['m%d'], step_type => 'map')", i, i-1))
		}
		r, err := fx.TryStartFlow(fx.Ctx(t), db, "chain", `[]`)
		if n <= 49 {
			require.NoError(t, err)
			require.Equal(t, "completed", r.Status)
			require.Equal(t, fmt.Sprintf(`{"m%d": []}`, n-1), r.Output)
			return &r
		}
		require.Error(t, err)
		require.True(t, strings.Contains(err.Error(), "Cascade loop exceeded safety limit of 50 iterations"), err.Error())
		require.Equal(t, 0, fx.Val[int](t, db, "select count(*)::int from pgflow.runs"), "no run survives")
		return nil
	}
	t.Run("49", func(t *testing.T) { t.Parallel(); build(t, 49) })
	t.Run("50", func(t *testing.T) { t.Parallel(); build(t, 50) })
}

// Fix of upstream pgflow: maybe_complete_run never completes a failed run.
func TestMaybeCompleteRunNeverCompletesFailedRun(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.InstallRealtime(t, db)
	fx.SetupFlow(t, db, "sequential")
	run := fx.StartFlow(t, db, "sequential", `{}`)
	fx.Exec(t, db, "update pgflow.runs set status = 'failed', failed_at = now(), remaining_steps = 0 where run_id = $1", run.RunID)
	fx.Exec(t, db, "select pgflow.maybe_complete_run($1)", run.RunID)
	r := fx.GetRun(t, db, run.RunID)
	require.Equal(t, "failed", r.Status)
	require.Nil(t, r.CompletedAt)
	require.Empty(t, fx.FilterEvents(fx.RealtimeEvents(t, db, run.RunID), "run:completed", ""))
}

func TestMaybeCompleteRunOnlyWhenNothingRemains(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.InstallRealtime(t, db)
	fx.SetupFlow(t, db, "sequential")
	run := fx.StartFlow(t, db, "sequential", `{}`)
	fx.Exec(t, db, "select pgflow.maybe_complete_run($1)", run.RunID)
	require.Equal(t, "started", fx.GetRun(t, db, run.RunID).Status)

	for i := 0; i < 3; i++ {
		fx.PollAndComplete(t, db, "sequential")
	}
	require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
	// Calling again changes nothing and emits no second run:completed.
	before := fx.GetRun(t, db, run.RunID)
	fx.Exec(t, db, "select pgflow.maybe_complete_run($1)", run.RunID)
	require.Equal(t, before, fx.GetRun(t, db, run.RunID))
	require.Len(t, fx.FilterEvents(fx.RealtimeEvents(t, db, run.RunID), "run:completed", ""), 1)
}
