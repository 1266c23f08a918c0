package upgrade_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// A populated v0.19.0 database upgrades to v0.20.0: a run that failed with a started sibling task and waiting
// steps is made to look finished (steps skipped run_failed, tasks cancelled, remaining_steps recounted), started
// and completed runs are untouched, and the failed run can then be resumed and completes.
func TestUpgradeToV020FinishesFailedRuns(t *testing.T) {
	t.Parallel()
	db := newAt(t, "v0.19.0")
	p := db.Pool

	fx.Exec(t, p, "select pgflow.create_flow('up', max_attempts => 1)")
	fx.Exec(t, p, "select pgflow.add_step('up', 'a')")
	fx.Exec(t, p, "select pgflow.add_step('up', 'b')")
	fx.Exec(t, p, "select pgflow.add_step('up', 'c', array['a', 'b'])")
	failed := fx.StartFlow(t, p, "up", `{}`)
	require.Len(t, fx.ReadAndStart(t, p, "up", 30, 2), 2)
	fx.FailTask(t, p, failed.RunID, "a", 0, "boom")
	require.Equal(t, "started", fx.GetTask(t, p, failed.RunID, "b", 0).Status, "v0.19.0 leaves the sibling started")
	live := fx.StartFlow(t, p, "up", `{}`)
	liveBefore := fx.Val[string](t, p, `select jsonb_agg(to_jsonb(s) order by step_slug)::text from pgflow.step_states s where run_id = $1::uuid`, live.RunID)

	report, err := db.upTo(t, "v0.20.0")
	require.NoError(t, err)
	require.Equal(t, "v0.20.0", report.Current)

	// Existing flows keep one queue (queue mode 'flow'), their routes unchanged; the worker's compilation verifies
	// them, and a step-mode definition of the same flow is a difference, not a silent switch.
	require.Equal(t, "flow", fx.Val[string](t, p, "select queue_mode from pgflow.flows where flow_slug = 'up'"))
	require.Equal(t, []string{"up"}, fx.Val[[]string](t, p, "select array_agg(distinct queue_name) from pgflow.steps where flow_slug = 'up'"))
	shape := fx.Val[string](t, p, "select pgflow._get_flow_shape('up')::text")
	require.Equal(t, "verified", fx.Val[string](t, p, "select pgflow.ensure_flow_compiled('up', $1::jsonb)->>'status'", shape))
	require.Equal(t, "mismatch", fx.Val[string](t, p, "select pgflow.ensure_flow_compiled('up', $1::jsonb, queue_mode => 'step')->>'status'", shape))

	require.Equal(t, "cancelled", fx.GetTask(t, p, failed.RunID, "b", 0).Status)
	for _, s := range []string{"b", "c"} {
		st := fx.GetStep(t, p, failed.RunID, s)
		require.Equal(t, "skipped", st.Status, s)
		require.Equal(t, "run_failed", *st.SkipReason, s)
	}
	require.Equal(t, "failed", fx.GetStep(t, p, failed.RunID, "a").Status)
	require.Equal(t, 1, fx.GetRun(t, p, failed.RunID).RemainingSteps)
	require.Equal(t, liveBefore, fx.Val[string](t, p, `select jsonb_agg(to_jsonb(s) order by step_slug)::text from pgflow.step_states s where run_id = $1::uuid`, live.RunID))
	require.Equal(t, 0, fx.Val[int](t, p, "select attempts_before_retry from pgflow.step_tasks where run_id = $1::uuid and step_slug = 'a'", failed.RunID))

	fx.Exec(t, p, "select pgflow.retry_run($1::uuid)", failed.RunID)
	require.Equal(t, "started", fx.GetRun(t, p, failed.RunID).Status)
	fx.Exec(t, p, "select pgflow.cancel_run($1::uuid)", live.RunID)
	for i := 0; i < 3; i++ {
		tasks := fx.ReadAndStart(t, p, "up", 30, 10)
		for _, tk := range tasks {
			fx.CompleteTask(t, p, tk.RunID, tk.StepSlug, tk.TaskIndex, `1`)
		}
	}
	require.Equal(t, "completed", fx.GetRun(t, p, failed.RunID).Status)
	require.Equal(t, "cancelled", fx.GetRun(t, p, live.RunID).Status)
}
