package runtime_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// cancelFixture: flow "c" with a root single step a, a root map m over the input and a step after depending on a.
// It starts a run over [1, 2, 3], completes m[0] and claims a[0] and m[1]; m[2] stays queued.
func cancelFixture(t *testing.T, db fx.DB) string {
	t.Helper()
	fx.Exec(t, db, "select pgflow.create_flow('c', max_attempts => 3, base_delay => 0)")
	fx.Exec(t, db, "select pgflow.add_step('c', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('c', 'm', step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('c', 'after', array['a'])")
	run := fx.StartFlow(t, db, "c", `[1, 2, 3]`)
	claimed := fx.ReadAndStart(t, db, "c", 30, 2) // a[0], m[0]
	require.Len(t, claimed, 2)
	fx.CompleteTask(t, db, run.RunID, "m", 0, `"m0"`)
	require.Len(t, fx.ReadAndStart(t, db, "c", 30, 1), 1) // m[1]
	require.Equal(t, "started", fx.GetTask(t, db, run.RunID, "a", 0).Status)
	require.Equal(t, "started", fx.GetTask(t, db, run.RunID, "m", 1).Status)
	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "m", 2).Status)
	return run.RunID
}

// Cancelling a started run: one transaction makes it cancelled, skips its unfinished steps, cancels its unfinished
// tasks, archives their messages, tells the queue's workers to cancel running handlers, emits run:cancelled last,
// and fences every late report of a started task.
func TestCancelRunStopsEverything(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	db := d.Pool
	fx.InstallRealtime(t, db)
	runID := cancelFixture(t, db)
	m0 := rowJSON(t, db, "select to_jsonb(t) from pgflow.step_tasks t where run_id = $1::uuid and step_slug = 'm' and task_index = 0", runID)
	collect := queueNotifications(t, d.URL, "c")

	var status, reason string
	var remaining int
	require.NoError(t, db.QueryRow(fx.Ctx(t), `select status, cancel_reason, remaining_steps
		from pgflow.cancel_run($1::uuid, 'wrong input') where cancelled_at is not null`, runID).Scan(&status, &reason, &remaining))
	require.Equal(t, "cancelled", status)
	require.Equal(t, "wrong input", reason)
	require.Equal(t, 0, remaining, "every step is completed or skipped")

	require.Equal(t, map[string]string{"a": "skipped", "m": "skipped", "after": "skipped"}, fx.StepStatuses(t, db, runID))
	for _, s := range []string{"a", "m", "after"} {
		st := fx.GetStep(t, db, runID, s)
		require.Equal(t, ptr("run_cancelled"), st.SkipReason, s)
		require.NotNil(t, st.SkippedAt, s)
		require.Nil(t, st.RemainingTasks, s)
	}
	require.Equal(t, "cancelled", fx.GetTask(t, db, runID, "a", 0).Status)
	require.Equal(t, "cancelled", fx.GetTask(t, db, runID, "m", 1).Status)
	require.Equal(t, "cancelled", fx.GetTask(t, db, runID, "m", 2).Status)
	require.Equal(t, m0, rowJSON(t, db, "select to_jsonb(t) from pgflow.step_tasks t where run_id = $1::uuid and step_slug = 'm' and task_index = 0", runID),
		"a completed task keeps its row")
	require.Empty(t, fx.QueueMessages(t, db, "c"), "every message archived")
	require.Len(t, fx.ArchivedMessages(t, db, "c"), 4)

	require.Equal(t, []string{`{"cancel_run":"` + runID + `"}`}, collect())

	evs := fx.RealtimeEvents(t, db, runID)
	last := evs[len(evs)-1]
	require.Equal(t, "run:cancelled", last.EventType())
	require.Equal(t, "wrong input", last.Payload["cancel_reason"])
	require.Equal(t, "cancelled", last.Payload["status"])
	require.Len(t, fx.FilterEvents(evs, "step:skipped", ""), 3)

	// Late reports of the started tasks change nothing, with or without their attempt.
	before := fullState(t, db, runID, "c")
	require.Equal(t, "cancelled", fx.Val[string](t, db, "select status from pgflow.complete_task($1::uuid, 'a', 0, '1', 1)", runID))
	require.Equal(t, "cancelled", fx.CompleteTask(t, db, runID, "a", 0, `1`).Status)
	require.Equal(t, "ignored", fx.Val[string](t, db,
		"select outcome from pgflow.complete_tasks(array[$1::uuid], array['m'], array[1], array['1'::jsonb], array[1])", runID))
	require.Equal(t, "ignored", fx.Val[string](t, db,
		"select outcome from pgflow.complete_tasks(array[$1::uuid], array['m'], array[1], array['1'::jsonb])", runID))
	require.Equal(t, "cancelled", fx.Val[string](t, db, "select status from pgflow.fail_task($1::uuid, 'm', 1, 'late', 1)", runID))
	require.Equal(t, "cancelled", fx.FailTask(t, db, runID, "m", 1, "late").Status)
	fx.Exec(t, db, "select pgflow.start_ready_steps($1::uuid)", runID)
	require.Equal(t, before, fullState(t, db, runID, "c"))
}

// A finished run cannot be cancelled (55000, naming its status) and nothing changes; an unknown run is P0002.
func TestCancelRunRefusesFinishedAndUnknownRuns(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")

	done := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 1), 1)
	fx.CompleteTask(t, db, done.RunID, "a", 0, `1`)
	failed := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 1), 1)
	fx.FailTask(t, db, failed.RunID, "a", 0, "boom")
	cancelled := fx.StartFlow(t, db, "f", `{}`)
	fx.Exec(t, db, "select pgflow.cancel_run($1::uuid)", cancelled.RunID)

	for id, status := range map[string]string{done.RunID: "completed", failed.RunID: "failed", cancelled.RunID: "cancelled"} {
		before := fullState(t, db, id, "f")
		_, err := db.Exec(fx.Ctx(t), "select pgflow.cancel_run($1::uuid, 'again')", id)
		requirePgError(t, err, "55000", "run "+id+" is already "+status)
		require.Equal(t, before, fullState(t, db, id, "f"), status)
	}

	_, err := db.Exec(fx.Ctx(t), "select pgflow.cancel_run('00000000-0000-0000-0000-0000000000aa')")
	requirePgError(t, err, "P0002", "run 00000000-0000-0000-0000-0000000000aa not found")
	_, err = db.Exec(fx.Ctx(t), "select pgflow.cancel_run(null)")
	requirePgError(t, err, "P0002", "run NULL not found")
}
