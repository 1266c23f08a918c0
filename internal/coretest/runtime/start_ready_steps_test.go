package runtime_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

func TestStartReadyStepsMapFanOut(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', step_type => 'map')")
	run := fx.StartFlow(t, db, "f", `["a", "b", "c"]`)

	msgs := fx.QueueMessages(t, db, "f")
	require.Len(t, msgs, 3)
	tasks := fx.GetTasks(t, db, run.RunID, "m")
	require.Len(t, tasks, 3)
	for i, tk := range tasks {
		require.Equal(t, i, tk.TaskIndex)
		require.Equal(t, "queued", tk.Status)
		require.Equal(t, 0, tk.AttemptsCount)
		require.NotNil(t, tk.MessageID)
		var body struct {
			StepSlug  string `json:"step_slug"`
			TaskIndex int    `json:"task_index"`
		}
		for _, m := range msgs {
			if m.MsgID == *tk.MessageID {
				require.NoError(t, json.Unmarshal([]byte(m.Message), &body))
			}
		}
		require.Equal(t, "m", body.StepSlug)
		require.Equal(t, i, body.TaskIndex, "task %d must own the message for index %d", i, i)
	}
	// Undelayed messages are visible at once.
	for _, m := range msgs {
		require.False(t, m.VT.After(m.Now), "message %d not visible yet", m.MsgID)
	}
}

func TestStartReadyStepsStartDelay(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'first')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'later', array['first'], start_delay => 120)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'fan', array['first'], step_type => 'map', start_delay => 30)")
	run := fx.StartFlow(t, db, "f", `{}`)
	first := fx.GetTasks(t, db, run.RunID, "first")[0]
	require.LessOrEqual(t, fx.VisibleIn(t, db, "f", *first.MessageID), 0.0, "a step without start_delay is visible at once")

	tk := fx.ReadAndStart(t, db, "f", 5, 1)
	require.Len(t, tk, 1)
	fx.CompleteTask(t, db, run.RunID, "first", 0, `[1, 2]`)

	later := fx.GetTasks(t, db, run.RunID, "later")
	require.Len(t, later, 1)
	require.InDelta(t, 120, fx.VisibleIn(t, db, "f", *later[0].MessageID), 5)
	fan := fx.GetTasks(t, db, run.RunID, "fan")
	require.Len(t, fan, 2)
	for _, x := range fan {
		require.InDelta(t, 30, fx.VisibleIn(t, db, "f", *x.MessageID), 5, "every map task gets the start delay")
	}
}

func TestStartReadyStepsIsANoOpWhenNothingIsReady(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	run := fx.StartFlow(t, db, "sequential", `{}`)
	fx.Exec(t, db, "select pgflow.start_ready_steps($1)", run.RunID)
	fx.Exec(t, db, "select pgflow.start_ready_steps($1)", run.RunID)
	require.Len(t, fx.GetTasks(t, db, run.RunID, ""), 1, "a started step is never started again")
	require.Len(t, fx.QueueMessages(t, db, "sequential"), 1)
	require.Equal(t, "created", fx.GetStep(t, db, run.RunID, "second").Status)
}

func TestStartReadyStepsIgnoresTerminalRuns(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	run := fx.StartFlow(t, db, "sequential", `{}`)
	// Make "second" look ready, then fail the run: nothing may start.
	fx.Exec(t, db, "update pgflow.step_states set remaining_deps = 0 where run_id = $1 and step_slug = 'second'", run.RunID)
	fx.Exec(t, db, "update pgflow.runs set status = 'failed', failed_at = now() where run_id = $1", run.RunID)
	fx.Exec(t, db, "select pgflow.start_ready_steps($1)", run.RunID)
	require.Equal(t, "created", fx.GetStep(t, db, run.RunID, "second").Status)
	require.Len(t, fx.GetTasks(t, db, run.RunID, ""), 1)
}
