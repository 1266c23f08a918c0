package runtime_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// pg_notify: every event goes to the global channel 'pgflow' and to 'pgflow:run:<run_id>', as a small envelope
// (never the input or output, so a large document cannot break the 8000-byte limit), in causal order.
func TestEventsNotifyEnvelopes(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	db := d.Pool
	fx.SetupFlow(t, db, "sequential")
	const runID = "0b7e9a59-2a55-4c0e-9c77-6b0f2d1f0c11"
	perRun := "pgflow:run:" + runID
	l := fx.Listen(t, d.URL, "pgflow", perRun)

	big := `{"blob": "` + strings.Repeat("x", 20000) + `"}`
	fx.Exec(t, db, "select pgflow.start_flow('sequential', $1::jsonb, $2)", big, runID)
	for i := 0; i < 3; i++ {
		tasks := fx.ReadAndStart(t, db, "sequential", 30, 1)
		require.Len(t, tasks, 1)
		fx.CompleteTask(t, db, runID, tasks[0].StepSlug, 0, big)
	}

	want := []string{
		"run:started",
		"step:first:started", "step:first:completed",
		"step:second:started", "step:second:completed",
		"step:last:started", "step:last:completed",
		"run:completed",
	}
	envs := l.Collect(t, 2*len(want), 30*time.Second)
	byChannel := map[string][]fx.Envelope{}
	for _, e := range envs {
		byChannel[e.Channel] = append(byChannel[e.Channel], e)
	}
	require.Len(t, byChannel, 2)
	for ch, list := range byChannel {
		var names []string
		for _, e := range list {
			names = append(names, e.Event)
			require.Less(t, e.Size, 1000, "%s: envelope %s is small", ch, e.Event)
			require.Equal(t, runID, e.RunID)
			require.Equal(t, "sequential", e.FlowSlug, "every envelope names the flow")
			require.NotEmpty(t, e.Status)
			keys := append([]string(nil), e.Keys...)
			sort.Strings(keys)
			if strings.HasPrefix(e.Event, "step:") {
				require.Equal(t, []string{"event", "event_type", "flow_slug", "run_id", "status", "step_slug"}, keys)
				require.Equal(t, "step:"+e.StepSlug+":"+e.Status, e.Event)
				require.Equal(t, "step:"+e.Status, e.EventType)
			} else {
				require.Equal(t, []string{"event", "event_type", "flow_slug", "run_id", "status"}, keys)
				require.Equal(t, e.Event, e.EventType)
			}
		}
		require.Equal(t, want, names, "channel %s", ch)
	}
	l.None(t, 200*time.Millisecond)
}

// Events belong to the transaction that caused them: a rolled-back start publishes nothing.
func TestEventsAreTransactional(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	db := d.Pool
	fx.InstallRealtime(t, db)
	fx.SetupFlow(t, db, "sequential")
	l := fx.Listen(t, d.URL, "pgflow")

	ctx := fx.Ctx(t)
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	fx.Exec(t, tx, "select pgflow.start_flow('sequential', '{}'::jsonb)")
	require.Len(t, fx.RealtimeEvents(t, tx, ""), 2, "inside the transaction the events exist")
	require.NoError(t, tx.Rollback(ctx))
	l.None(t, 300*time.Millisecond)
	require.Empty(t, fx.RealtimeEvents(t, db, ""))
}

// realtime.send receives the spec's payloads with event 'run:...'/'step:<slug>:...', topic pgflow:run:<id> and
// private = false.
func TestRealtimePayloadsOfAHappyRun(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.InstallRealtime(t, db)
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'root')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'each', array['root'], step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'empty', step_type => 'map')")
	run := fx.StartFlow(t, db, "f", `[]`)
	fx.ReadAndStart(t, db, "f", 30, 1)
	fx.CompleteTask(t, db, run.RunID, "root", 0, `["a", "b"]`)
	for _, tk := range fx.ReadAndStart(t, db, "f", 30, 10) {
		fx.CompleteTask(t, db, run.RunID, "each", tk.TaskIndex, `{"v": `+fmt.Sprint(tk.TaskIndex)+`}`)
	}

	evs := fx.RealtimeEvents(t, db, run.RunID)
	require.Equal(t, []string{
		"run:started", "step:empty:completed", "step:root:started",
		"step:root:completed", "step:each:started",
		"step:each:completed", "run:completed",
	}, fx.EventNames(evs))
	for _, e := range evs {
		require.Equal(t, "pgflow:run:"+run.RunID, e.Topic)
		require.False(t, e.Private)
		require.Equal(t, run.RunID, e.Payload["run_id"])
	}
	get := func(name string) map[string]any {
		for _, e := range evs {
			if e.Event == name {
				return e.Payload
			}
		}
		t.Fatalf("no %s", name)
		return nil
	}
	keys := func(p map[string]any) []string {
		var ks []string
		for k := range p {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}

	p := get("run:started")
	require.Equal(t, []string{"event_type", "flow_slug", "input", "remaining_steps", "run_id", "started_at", "status"}, keys(p))
	require.Equal(t, "started", p["status"])
	require.EqualValues(t, 3, p["remaining_steps"])
	require.Equal(t, []any{}, p["input"])

	p = get("step:root:started")
	require.Subset(t, keys(p), []string{"event_type", "run_id", "step_slug", "status", "started_at", "remaining_tasks", "remaining_deps"})
	require.Equal(t, "step:started", p["event_type"])
	require.EqualValues(t, 1, p["remaining_tasks"])
	require.EqualValues(t, 0, p["remaining_deps"])

	p = get("step:each:started")
	require.EqualValues(t, 2, p["remaining_tasks"], "remaining_tasks = initial_tasks")

	p = get("step:empty:completed") // taskless variant
	require.Subset(t, keys(p), []string{"event_type", "run_id", "step_slug", "status", "started_at", "completed_at",
		"remaining_tasks", "remaining_deps", "output"})
	require.Equal(t, []any{}, p["output"])
	require.EqualValues(t, 0, p["remaining_tasks"])

	p = get("step:each:completed")
	require.Subset(t, keys(p), []string{"event_type", "run_id", "step_slug", "status", "output", "completed_at"})
	require.Equal(t, "completed", p["status"])
	require.Equal(t, []any{map[string]any{"v": float64(0)}, map[string]any{"v": float64(1)}}, p["output"],
		"the map's step:completed carries the aggregated stored output")

	p = get("run:completed")
	require.Subset(t, keys(p), []string{"event_type", "run_id", "flow_slug", "status", "output", "completed_at"})
	require.Equal(t, map[string]any{
		"empty": []any{},
		"each":  []any{map[string]any{"v": float64(0)}, map[string]any{"v": float64(1)}},
	}, p["output"])
	require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d`, p["completed_at"], "timestamps are ISO strings")
}

func TestRealtimePayloadsOfFailuresAndSkips(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.InstallRealtime(t, db)
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 2, base_delay => 0)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'soft', when_exhausted => 'skip')")
	fx.Exec(t, db, `select pgflow.add_step('f', 'cond', required_input_pattern => '{"never": true}')`)
	fx.Exec(t, db, "select pgflow.add_step('f', 'hard')")
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 2)

	before := len(fx.RealtimeEvents(t, db, run.RunID))
	fx.FailTask(t, db, run.RunID, "soft", 0, "retry me")
	require.Len(t, fx.RealtimeEvents(t, db, run.RunID), before, "a retry emits nothing")
	fx.ResetVisibility(t, db, "f")
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 1)
	require.Len(t, fx.RealtimeEvents(t, db, run.RunID), before, "claiming emits nothing")
	fx.FailTask(t, db, run.RunID, "soft", 0, "soft gave up")
	fx.FailTask(t, db, run.RunID, "hard", 0, "retry")
	fx.ResetVisibility(t, db, "f")
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 1)
	fx.FailTask(t, db, run.RunID, "hard", 0, "hard broke")
	afterFail := len(fx.RealtimeEvents(t, db, run.RunID))
	fx.CompleteTask(t, db, run.RunID, "hard", 0, `1`)
	fx.FailTask(t, db, run.RunID, "soft", 0, "late")
	require.Len(t, fx.RealtimeEvents(t, db, run.RunID), afterFail, "late callbacks emit nothing")

	evs := fx.RealtimeEvents(t, db, run.RunID)
	require.Equal(t, []string{
		"run:started", "step:cond:skipped", "step:soft:started", "step:hard:started",
		"step:soft:skipped", "step:hard:failed", "run:failed",
	}, fx.EventNames(evs))

	p := fx.FindEvent(t, db, run.RunID, "step:skipped", "cond").Payload
	require.Equal(t, "condition_unmet", p["skip_reason"])
	require.Equal(t, "f", p["flow_slug"])
	require.Equal(t, "skipped", p["status"])
	require.Contains(t, p, "skipped_at")

	p = fx.FindEvent(t, db, run.RunID, "step:skipped", "soft").Payload
	require.Equal(t, "handler_failed", p["skip_reason"])
	require.Equal(t, "soft gave up", p["error_message"])
	require.Contains(t, p, "skipped_at")

	p = fx.FindEvent(t, db, run.RunID, "step:failed", "hard").Payload
	require.Equal(t, "failed", p["status"])
	require.Equal(t, "hard broke", p["error_message"])
	require.Contains(t, p, "failed_at")

	p = fx.FindEvent(t, db, run.RunID, "run:failed", "").Payload
	require.Equal(t, "f", p["flow_slug"])
	require.Equal(t, "failed", p["status"])
	require.Equal(t, "hard broke", p["error_message"])
	require.Contains(t, p, "failed_at")
}

// No realtime.send: functions still work and still notify.
func TestEventsWithoutRealtime(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	fx.SetupFlow(t, d.Pool, "sequential")
	l := fx.Listen(t, d.URL, "pgflow")
	fx.StartFlow(t, d.Pool, "sequential", `{}`)
	envs := l.Collect(t, 2, 10*time.Second)
	require.Equal(t, "run:started", envs[0].Event)
	require.Equal(t, "step:first:started", envs[1].Event)
	require.False(t, fx.Val[bool](t, d.Pool, "select to_regclass('realtime.messages') is not null"))
}

// Skip cascades publish in topological order, also through LISTEN, and a listener of one run does not hear
// another run.
func TestEventsPerRunChannelIsolation(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	db := d.Pool
	fx.SetupFlow(t, db, "sequential")
	const a = "11111111-0000-0000-0000-00000000000a"
	const b = "11111111-0000-0000-0000-00000000000b"
	la := fx.Listen(t, d.URL, "pgflow:run:"+a)
	fx.Exec(t, db, "select pgflow.start_flow('sequential', '{}'::jsonb, $1)", b)
	fx.Exec(t, db, "select pgflow.start_flow('sequential', '{}'::jsonb, $1)", a)
	fx.Exec(t, db, "select pgflow._cascade_force_skip_steps($1, 'first', 'condition_unmet')", a)
	envs := la.Collect(t, 5, 10*time.Second)
	var names []string
	for _, e := range envs {
		require.Equal(t, a, e.RunID)
		names = append(names, e.Event)
	}
	require.Equal(t, []string{"run:started", "step:first:started", "step:first:skipped", "step:second:skipped",
		"step:last:skipped"}, names)
	la.None(t, 200*time.Millisecond)
}
