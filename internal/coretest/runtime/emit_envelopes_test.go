package runtime_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// The hot paths (start_flows, _start_ready_steps_batch, complete_tasks) build no JSON payload for an event unless
// realtime.send is there to take it. What they notify must not depend on it: the same envelopes, on the same
// channels, in the same order, each byte for byte what _emit_event would send for its fields; and with realtime
// installed every event also reaches realtime.send.
func TestHotPathsNotifyTheSameWithAndWithoutRealtime(t *testing.T) {
	t.Parallel()
	runs := []string{"0190a000-0000-7000-8000-000000000001", "0190a000-0000-7000-8000-000000000002"}
	channels := []string{"pgflow", "pgflow:run:" + runs[0], "pgflow:run:" + runs[1]}
	drive := func(db *pgtest.DB) []notification {
		fx.Exec(t, db.Pool, "select pgflow.create_flow('ev')")
		fx.Exec(t, db.Pool, "select pgflow.add_step('ev', 'a')")
		fx.Exec(t, db.Pool, "select pgflow.add_step('ev', 'b', array['a'])")
		fx.Exec(t, db.Pool, "select pgflow.add_step('ev', 'c', array['a'])")
		return collectNotifications(t, db.URL, channels, func() {
			fx.Exec(t, db.Pool, `select count(*) from pgflow.start_flows('ev', array['{"n": 1}', '{"n": 2}']::jsonb[], $1::uuid[])`, runs)
			for range 2 { // a, then b and c
				tasks := fx.ReadAndStart(t, db.Pool, "ev", 30, 10)
				var cs []completion
				for _, tk := range tasks {
					cs = append(cs, completion{runID: tk.RunID, step: tk.StepSlug, index: tk.TaskIndex, output: `{"ok": true}`})
				}
				require.Equal(t, []string{"completed", "completed", "completed", "completed"}[:len(cs)], completeTasks(t, db.Pool, cs))
			}
		})
	}

	plain := newDB(t)
	withRealtime := newDB(t)
	fx.InstallRealtime(t, withRealtime.Pool)
	got := drive(plain)
	require.Equal(t, got, drive(withRealtime), "realtime.send being there changes no notification")

	// Two runs × (run:started, a started/completed, b and c started/completed, run:completed) = 16 events, each on
	// the global and on its run's channel.
	require.Len(t, got, 32)
	var events []string
	for i, n := range got {
		var env map[string]string
		require.NoError(t, json.Unmarshal([]byte(n.Payload), &env), n.Payload)
		if i%2 == 0 {
			require.Equal(t, "pgflow", n.Channel)
			events = append(events, env["run_id"][len(env["run_id"])-1:]+" "+env["event"])
		} else {
			require.Equal(t, got[i-1].Payload, n.Payload)
			require.Equal(t, "pgflow:run:"+env["run_id"], n.Channel)
		}
		require.Equal(t, "ev", env["flow_slug"])
		want := fx.Val[string](t, plain.Pool, `select jsonb_strip_nulls(jsonb_build_object(
			'event_type', e ->> 'event_type', 'event', e ->> 'event', 'run_id', (e ->> 'run_id')::uuid,
			'step_slug', e ->> 'step_slug', 'status', e ->> 'status', 'flow_slug', e ->> 'flow_slug'))::text
			from (select $1::jsonb as e) as x`, n.Payload)
		require.Equal(t, want, n.Payload, "the envelope _emit_event makes of the same fields")
	}
	require.Equal(t, []string{
		"1 run:started", "2 run:started", "1 step:a:started", "2 step:a:started",
		"1 step:a:completed", "2 step:a:completed", "1 step:b:started", "1 step:c:started", "2 step:b:started", "2 step:c:started",
		"1 step:b:completed", "1 step:c:completed", "2 step:b:completed", "2 step:c:completed",
		"1 run:completed", "2 run:completed",
	}, events)

	sent := fx.RealtimeEvents(t, withRealtime.Pool, "")
	require.Len(t, sent, 16, "every event also went to realtime.send, with its full payload")
	require.Equal(t, map[string]any{"n": float64(1)}, fx.FilterEvents(fx.RealtimeEvents(t, withRealtime.Pool, runs[0]), "run:started", "")[0].Payload["input"])
	require.Equal(t, map[string]any{"ok": true}, fx.FilterEvents(fx.RealtimeEvents(t, withRealtime.Pool, runs[1]), "step:completed", "c")[0].Payload["output"])

	// start_flows builds a root step's step:started payload from the step's definition (it inserted the state
	// 'started' itself), complete_tasks a dependent's from the update that started it: both are the stored state.
	for _, step := range []string{"a", "b", "c"} {
		started := fx.FilterEvents(fx.RealtimeEvents(t, withRealtime.Pool, runs[0]), "step:started", step)
		require.Len(t, started, 1, step)
		require.Equal(t, map[string]any{
			"event_type": "step:started", "run_id": runs[0], "flow_slug": "ev", "step_slug": step, "status": "started",
			"remaining_tasks": float64(1), "remaining_deps": float64(0),
			"started_at": fx.Val[string](t, withRealtime.Pool,
				`select to_jsonb(started_at) #>> '{}' from pgflow.step_states where run_id = $1 and step_slug = $2`, runs[0], step),
		}, started[0].Payload, step)
	}
}
