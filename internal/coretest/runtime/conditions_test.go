package runtime_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// Root conditions are checked against the run input, with if (@>) and ifNot (not @>) both required.
func TestRootConditions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, required, forbidden, input string
		want                             string // step status after start
	}{
		{"if met", `{"go": true}`, "", `{"go": true, "x": 1}`, "started"},
		{"if unmet", `{"go": true}`, "", `{"go": false}`, "skipped"},
		{"ifNot met", "", `{"stop": true}`, `{"stop": false}`, "started"},
		{"ifNot unmet", "", `{"stop": true}`, `{"stop": true}`, "skipped"},
		{"both met", `{"a": 1}`, `{"b": 1}`, `{"a": 1, "b": 2}`, "started"},
		{"if met ifNot unmet", `{"a": 1}`, `{"b": 1}`, `{"a": 1, "b": 1}`, "skipped"},
		{"nested containment", `{"user": {"plan": "pro"}}`, "", `{"user": {"plan": "pro", "id": 7}}`, "started"},
		{"array multiset", `{"tags": ["b"]}`, "", `{"tags": ["a", "b"]}`, "started"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t).Pool
			fx.Exec(t, db, "select pgflow.create_flow('f')")
			var req, forb any
			if c.required != "" {
				req = c.required
			}
			if c.forbidden != "" {
				forb = c.forbidden
			}
			fx.Exec(t, db, `select pgflow.add_step('f', 'guarded', required_input_pattern => $1::jsonb,
				forbidden_input_pattern => $2::jsonb)`, req, forb)
			fx.Exec(t, db, "select pgflow.add_step('f', 'other')")
			run := fx.StartFlow(t, db, "f", c.input)
			s := fx.GetStep(t, db, run.RunID, "guarded")
			require.Equal(t, c.want, s.Status)
			if c.want == "skipped" {
				require.Equal(t, ptr("condition_unmet"), s.SkipReason)
				require.NotNil(t, s.SkippedAt)
				require.Nil(t, s.RemainingTasks)
				require.Empty(t, fx.GetTasks(t, db, run.RunID, "guarded"), "a skipped step gets no task")
				require.Equal(t, 1, fx.GetRun(t, db, run.RunID).RemainingSteps)
			}
		})
	}
}

// A root map's condition is tested against the input array, so an object pattern is never met.
func TestRootMapConditionIsTestedAgainstTheArray(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', step_type => 'map', required_input_pattern => '{}')")
	run := fx.StartFlow(t, db, "f", `[1, 2]`)
	require.Equal(t, "skipped", fx.GetStep(t, db, run.RunID, "m").Status)
	require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
}

// Dependent conditions see {dep: output} of completed dependencies only; a skipped dependency is absent, so
// ifNot {dep: {}} is met when dep was skipped.
func TestDependentConditions(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, `select pgflow.add_step('f', 'maybe', required_input_pattern => '{"run_maybe": true}')`)
	fx.Exec(t, db, "select pgflow.add_step('f', 'always')")
	fx.Exec(t, db, `select pgflow.add_step('f', 'fallback', array['maybe', 'always'],
		forbidden_input_pattern => '{"maybe": {}}')`)
	fx.Exec(t, db, `select pgflow.add_step('f', 'premium', array['always'],
		required_input_pattern => '{"always": {"tier": "premium"}}')`)
	run := fx.StartFlow(t, db, "f", `{"run_maybe": false}`)
	require.Equal(t, "skipped", fx.GetStep(t, db, run.RunID, "maybe").Status)
	require.Equal(t, 1, fx.GetStep(t, db, run.RunID, "fallback").RemainingDeps, "a skipped dependency counts as done")

	fx.ReadAndStart(t, db, "f", 30, 10)
	fx.CompleteTask(t, db, run.RunID, "always", 0, `{"tier": "basic"}`)
	require.Equal(t, "started", fx.GetStep(t, db, run.RunID, "fallback").Status, "ifNot {maybe: {}} is met: maybe is absent")
	prem := fx.GetStep(t, db, run.RunID, "premium")
	require.Equal(t, "skipped", prem.Status)
	require.Equal(t, ptr("condition_unmet"), prem.SkipReason)

	tasks := fx.ReadAndStart(t, db, "f", 30, 10)
	require.Len(t, tasks, 1)
	require.Equal(t, `{"always": {"tier": "basic"}}`, tasks[0].Input)
}

// when_unmet 'fail': the step fails with 'Condition not met', the run fails, no task is ever created.
func TestConditionUnmetFailFailsTheRun(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.InstallRealtime(t, db)
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'free')")
	fx.Exec(t, db, `select pgflow.add_step('f', 'strict', required_input_pattern => '{"ok": true}', when_unmet => 'fail')`)
	fx.Exec(t, db, `select pgflow.add_step('f', 'strict2', required_input_pattern => '{"ok": true}', when_unmet => 'fail')`)
	run := fx.StartFlow(t, db, "f", `{"ok": false}`)
	require.Equal(t, "failed", run.Status)
	s := fx.GetStep(t, db, run.RunID, "strict")
	require.Equal(t, "failed", s.Status)
	require.Equal(t, ptr("Condition not met"), s.ErrorMessage)
	require.NotNil(t, s.FailedAt)
	require.Nil(t, s.StartedAt)
	require.Equal(t, "skipped", fx.GetStep(t, db, run.RunID, "strict2").Status, "only the first failing step fails")
	require.Equal(t, ptr("run_failed"), fx.GetStep(t, db, run.RunID, "strict2").SkipReason)
	require.Equal(t, "skipped", fx.GetStep(t, db, run.RunID, "free").Status)
	require.Empty(t, fx.GetTasks(t, db, run.RunID, ""))
	require.Empty(t, fx.QueueMessages(t, db, "f"))

	require.Equal(t, []string{"run:started", "step:strict:failed", "step:free:skipped", "step:strict2:skipped", "run:failed"},
		fx.EventNames(fx.RealtimeEvents(t, db, run.RunID)))
	rf := fx.FindEvent(t, db, run.RunID, "run:failed", "")
	require.Equal(t, "Condition not met", rf.Payload["error_message"])
}

// A dependent 'fail' condition fails the run after a completion and archives the run's active messages.
func TestDependentConditionFailArchivesActiveMessages(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'busy')")
	fx.Exec(t, db, `select pgflow.add_step('f', 'check', array['a'], required_input_pattern => '{"a": "yes"}',
		when_unmet => 'fail')`)
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 2)
	busy := fx.GetTask(t, db, run.RunID, "busy", 0)
	row := fx.CompleteTask(t, db, run.RunID, "a", 0, `"no"`)
	require.Equal(t, "completed", row.Status)
	require.True(t, fx.InArchive(t, db, "f", *row.MessageID))
	require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)
	require.Equal(t, "failed", fx.GetStep(t, db, run.RunID, "check").Status)
	require.True(t, fx.InArchive(t, db, "f", *busy.MessageID))
	require.Empty(t, fx.QueueMessages(t, db, "f"))
}

func TestConditionUnmetSkipCascade(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, `select pgflow.add_step('f', 'gate', required_input_pattern => '{"go": true}',
		when_unmet => 'skip-cascade')`)
	fx.Exec(t, db, "select pgflow.add_step('f', 'b', array['gate'])")
	fx.Exec(t, db, "select pgflow.add_step('f', 'c', array['b'])")
	fx.Exec(t, db, "select pgflow.add_step('f', 'side')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'joined', array['side', 'c'])")
	run := fx.StartFlow(t, db, "f", `{"go": false}`)
	require.Equal(t, ptr("condition_unmet"), fx.GetStep(t, db, run.RunID, "gate").SkipReason)
	for _, s := range []string{"b", "c", "joined"} {
		require.Equal(t, ptr("dependency_skipped"), fx.GetStep(t, db, run.RunID, s).SkipReason, s)
	}
	require.Equal(t, 1, fx.GetRun(t, db, run.RunID).RemainingSteps)
	fx.PollAndComplete(t, db, "f")
	require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
}

// Plain skips iterate to convergence: a skipped step makes its dependent ready, whose condition is evaluated too.
func TestConditionSkipsIterate(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, `select pgflow.add_step('f', 's1', required_input_pattern => '{"x": 1}')`)
	fx.Exec(t, db, `select pgflow.add_step('f', 's2', array['s1'], required_input_pattern => '{"s1": 1}')`)
	fx.Exec(t, db, `select pgflow.add_step('f', 's3', array['s2'], forbidden_input_pattern => '{}')`)
	run := fx.StartFlow(t, db, "f", `{}`)
	for _, s := range []string{"s1", "s2", "s3"} {
		require.Equal(t, "skipped", fx.GetStep(t, db, run.RunID, s).Status, s)
	}
	r := fx.GetRun(t, db, run.RunID)
	require.Equal(t, "completed", r.Status)
	require.Empty(t, r.Output)
}

// Fix of upstream pgflow: a step that becomes ready through a taskless cascade has its condition evaluated.
// Upstream started 'after' here although its condition is unmet.
func TestConditionsEvaluatedAfterTasklessCascade(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'items', step_type => 'map')")
	fx.Exec(t, db, `select pgflow.add_step('f', 'after', array['items'], required_input_pattern => '{"items": [1]}')`)
	fx.Exec(t, db, `select pgflow.add_step('f', 'map_after', array['items'], step_type => 'map',
		required_input_pattern => '{"items": [1]}')`)
	run := fx.StartFlow(t, db, "f", `[]`)
	after := fx.GetStep(t, db, run.RunID, "after")
	require.Equal(t, "skipped", after.Status, "the cascade made 'after' ready; its unmet condition skips it")
	require.Equal(t, ptr("condition_unmet"), after.SkipReason)
	require.Empty(t, fx.GetTasks(t, db, run.RunID, "after"))
	ma := fx.GetStep(t, db, run.RunID, "map_after")
	require.Equal(t, "skipped", ma.Status, "a taskless map with an unmet condition is skipped, not completed")
	r := fx.GetRun(t, db, run.RunID)
	require.Equal(t, "completed", r.Status)
	require.Equal(t, "", r.Output)
}

func TestConditionFailAfterTasklessCascadeFailsRun(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'items', step_type => 'map')")
	fx.Exec(t, db, `select pgflow.add_step('f', 'strict', array['items'], required_input_pattern => '{"items": [1]}',
		when_unmet => 'fail')`)
	run := fx.StartFlow(t, db, "f", `[]`)
	require.Equal(t, "failed", run.Status)
	require.Equal(t, "failed", fx.GetStep(t, db, run.RunID, "strict").Status)
	require.Empty(t, fx.GetTasks(t, db, run.RunID, ""))
}

// A skipped parent gives its dependent map 0 tasks.
func TestConditionSkipGivesDependentMapZeroTasks(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, `select pgflow.add_step('f', 'list', required_input_pattern => '{"list": true}')`)
	fx.Exec(t, db, "select pgflow.add_step('f', 'each', array['list'], step_type => 'map')")
	run := fx.StartFlow(t, db, "f", `{}`)
	each := fx.GetStep(t, db, run.RunID, "each")
	require.Equal(t, "completed", each.Status)
	require.Equal(t, ptr(0), each.InitialTasks)
	require.Equal(t, "[]", each.Output)
	require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
}

func TestCascadeResolveConditionsOnTerminalRuns(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	run := fx.StartFlow(t, db, "sequential", `{}`)
	require.True(t, fx.Val[bool](t, db, "select pgflow.cascade_resolve_conditions($1)", run.RunID))
	fx.Exec(t, db, "update pgflow.runs set status = 'failed', failed_at = now() where run_id = $1", run.RunID)
	require.False(t, fx.Val[bool](t, db, "select pgflow.cascade_resolve_conditions($1)", run.RunID))
}
