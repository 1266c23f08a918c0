package runtime_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
	"github.com/pgflow-go/pgflow/schema"
)

func installPrune(t *testing.T, db fx.DB) {
	t.Helper()
	sql, err := schema.OptionalSQL("prune_data_older_than")
	require.NoError(t, err)
	fx.Exec(t, db, sql)
}

// age moves every timestamp of a run (and its steps and tasks) `days` into the past.
func age(t *testing.T, db fx.DB, runID string, days int) {
	t.Helper()
	const shift = "make_interval(days => $2)"
	fx.Exec(t, db, `update pgflow.step_tasks set queued_at = queued_at - `+shift+`, started_at = started_at - `+shift+`,
		completed_at = completed_at - `+shift+`, failed_at = failed_at - `+shift+` where run_id = $1`, runID, days)
	fx.Exec(t, db, `update pgflow.step_states set created_at = created_at - `+shift+`, started_at = started_at - `+shift+`,
		completed_at = completed_at - `+shift+`, failed_at = failed_at - `+shift+`, skipped_at = skipped_at - `+shift+`
		where run_id = $1`, runID, days)
	fx.Exec(t, db, `update pgflow.runs set started_at = started_at - `+shift+`, completed_at = completed_at - `+shift+`,
		failed_at = failed_at - `+shift+` where run_id = $1`, runID, days)
}

func TestPruneIsNotInstalledByMigrations(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	require.False(t, fx.Val[bool](t, db, "select to_regprocedure('pgflow.prune_data_older_than(interval)') is not null"))
	installPrune(t, db)
	require.True(t, fx.Val[bool](t, db, "select to_regprocedure('pgflow.prune_data_older_than(interval)') is not null"))
	installPrune(t, db) // re-installing replaces it
}

func TestPruneDataOlderThan(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	installPrune(t, db)
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'b')")

	// Old completed run.
	oldDone := fx.StartFlow(t, db, "f", `{"run": "old done"}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 2)
	fx.CompleteTask(t, db, oldDone.RunID, "a", 0, `1`)
	fx.CompleteTask(t, db, oldDone.RunID, "b", 0, `2`)
	require.Equal(t, "completed", fx.GetRun(t, db, oldDone.RunID).Status)
	age(t, db, oldDone.RunID, 30)

	// Old run forced to 'failed' (as pgflow's set_failed_flow_timestamps does) while its messages are still queued.
	oldFailed := fx.StartFlow(t, db, "f", `{"run": "old failed"}`)
	aMsg := *fx.GetTask(t, db, oldFailed.RunID, "a", 0).MessageID
	bMsg := *fx.GetTask(t, db, oldFailed.RunID, "b", 0).MessageID
	fx.Exec(t, db, "update pgflow.runs set status = 'failed', failed_at = now() where run_id = $1", oldFailed.RunID)
	age(t, db, oldFailed.RunID, 30)

	// Old but still running: kept however old.
	oldRunning := fx.StartFlow(t, db, "f", `{"run": "old running"}`)
	age(t, db, oldRunning.RunID, 30)

	// Recent completed run: kept.
	recent := fx.StartFlow(t, db, "f", `{"run": "recent"}`)
	recentIDs := fx.Val[[]int64](t, db, "select array_agg(message_id) from pgflow.step_tasks where run_id = $1", recent.RunID)
	for _, tk := range fx.StartTasks(t, db, "f", recentIDs, fx.DefaultWorker) {
		fx.CompleteTask(t, db, tk.RunID, tk.StepSlug, tk.TaskIndex, `0`)
	}
	require.Equal(t, "completed", fx.GetRun(t, db, recent.RunID).Status)

	// Archive: age two archived messages of the old completed run.
	archived := fx.MessageIDs(fx.ArchivedMessages(t, db, "f"))
	require.NotEmpty(t, archived)
	oldArchived := []int64{
		*fx.GetTask(t, db, oldDone.RunID, "a", 0).MessageID,
		*fx.GetTask(t, db, oldDone.RunID, "b", 0).MessageID,
	}
	fx.Exec(t, db, "update pgmq.a_f set archived_at = archived_at - interval '30 days' where msg_id = any($1)", oldArchived)

	// Workers: one stale, one alive; the stale one last ran a task of the running run.
	const stale = "99999999-0000-0000-0000-000000000001"
	fx.EnsureWorker(t, db, "f", stale)
	fx.Exec(t, db, "update pgflow.workers set last_heartbeat_at = now() - interval '30 days' where worker_id = $1", stale)
	runningMsg := *fx.GetTask(t, db, oldRunning.RunID, "a", 0).MessageID
	require.Len(t, fx.StartTasks(t, db, "f", []int64{runningMsg}, stale), 1)

	fx.Exec(t, db, "select pgflow.prune_data_older_than(interval '7 days')")

	runs := fx.Val[[]string](t, db, "select coalesce(array_agg(run_id::text order by run_id), '{}') from pgflow.runs")
	require.ElementsMatch(t, []string{oldRunning.RunID, recent.RunID}, runs)
	for _, gone := range []string{oldDone.RunID, oldFailed.RunID} {
		require.Equal(t, 0, fx.Val[int](t, db, "select count(*)::int from pgflow.step_states where run_id = $1", gone))
		require.Equal(t, 0, fx.Val[int](t, db, "select count(*)::int from pgflow.step_tasks where run_id = $1", gone))
	}
	for _, id := range []int64{aMsg, bMsg} {
		require.False(t, fx.InQueue(t, db, "f", id), "queue messages of pruned runs are deleted")
		require.False(t, fx.InArchive(t, db, "f", id), "deleted, not archived")
	}
	for _, id := range oldArchived {
		require.False(t, fx.InArchive(t, db, "f", id), "old archive rows are deleted")
	}
	for _, id := range archived {
		if id != oldArchived[0] && id != oldArchived[1] {
			require.True(t, fx.InArchive(t, db, "f", id), "recent archive row %d is kept", id)
		}
	}
	require.Equal(t, 2, fx.Val[int](t, db, "select count(*)::int from pgflow.step_states where run_id = $1", oldRunning.RunID))
	require.True(t, fx.InQueue(t, db, "f", runningMsg))
	require.Equal(t, []string{fx.DefaultWorker}, fx.Val[[]string](t, db, "select array_agg(worker_id::text) from pgflow.workers"))
	require.Nil(t, fx.GetTask(t, db, oldRunning.RunID, "a", 0).LastWorkerID, "a pruned worker's tasks keep running")
	require.Equal(t, 1, fx.Val[int](t, db, "select count(*)::int from pgflow.flows"))
	require.Equal(t, 2, fx.Val[int](t, db, "select count(*)::int from pgflow.steps"))
}

func TestPruneRejectsBadIntervals(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	installPrune(t, db)
	_, err := db.Exec(fx.Ctx(t), "select pgflow.prune_data_older_than(null)")
	requirePgError(t, err, "P0001", "prune_data_older_than: retention_interval must be zero or positive, got NULL")
	_, err = db.Exec(fx.Ctx(t), "select pgflow.prune_data_older_than(interval '-1 day')")
	requirePgError(t, err, "P0001", "prune_data_older_than: retention_interval must be zero or positive, got -1 days")
}

// A route whose queue was dropped by hand (PGMQ no longer lists it) is skipped for archive pruning instead of
// failing; the routes whose queues exist are still pruned.
func TestPruneSkipsMissingArchiveTables(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	installPrune(t, db)
	fx.Exec(t, db, "select pgflow.create_flow('gone')")
	fx.Exec(t, db, "select pgflow.add_step('gone', 'a')")
	fx.Exec(t, db, "select pgmq.drop_queue('gone')")
	fx.Exec(t, db, "select pgflow.create_flow('kept')")
	fx.Exec(t, db, "select pgflow.add_step('kept', 'a')")
	old := fx.Val[int64](t, db, "select pgmq.send('kept', '{}')")
	fx.Exec(t, db, "select pgmq.archive('kept', $1::bigint)", old)
	fx.Exec(t, db, "update pgmq.a_kept set archived_at = archived_at - interval '1 day'")

	fx.Exec(t, db, "select pgflow.prune_data_older_than(interval '1 hour')")
	require.False(t, fx.InArchive(t, db, "kept", old))
}

// With per-step queues the queue messages of pruned runs are deleted from each step's queue and every step
// queue's old archive rows go, too.
func TestPruneDataOlderThanPerStepQueues(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	installPrune(t, db)
	fx.Exec(t, db, "select pgflow.create_flow('ps', queue_mode => 'step')")
	fx.Exec(t, db, "select pgflow.add_step('ps', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('ps', 'b')")

	fx.EnsureWorker(t, db, "ps__a", fx.DefaultWorker)
	done := fx.StartFlow(t, db, "ps", `{}`)
	aDone := *fx.GetTask(t, db, done.RunID, "a", 0).MessageID
	bDone := *fx.GetTask(t, db, done.RunID, "b", 0).MessageID
	require.Len(t, fx.StartTasksFrom(t, db, "ps", "ps__a", []int64{aDone}, fx.DefaultWorker), 1)
	require.Len(t, fx.StartTasksFrom(t, db, "ps", "ps__b", []int64{bDone}, fx.DefaultWorker), 1)
	fx.CompleteTask(t, db, done.RunID, "a", 0, `1`)
	fx.CompleteTask(t, db, done.RunID, "b", 0, `2`)
	age(t, db, done.RunID, 30)
	fx.Exec(t, db, "update pgmq.a_ps__a set archived_at = archived_at - interval '30 days'")
	fx.Exec(t, db, "update pgmq.a_ps__b set archived_at = archived_at - interval '30 days'")

	failed := fx.StartFlow(t, db, "ps", `{}`)
	aFailed := *fx.GetTask(t, db, failed.RunID, "a", 0).MessageID
	bFailed := *fx.GetTask(t, db, failed.RunID, "b", 0).MessageID
	fx.Exec(t, db, "update pgflow.runs set status = 'failed', failed_at = now() where run_id = $1", failed.RunID)
	age(t, db, failed.RunID, 30)

	fx.Exec(t, db, "select pgflow.prune_data_older_than(interval '7 days')")
	require.Zero(t, fx.Val[int](t, db, "select count(*)::int from pgflow.runs"))
	require.False(t, fx.InArchive(t, db, "ps__a", aDone))
	require.False(t, fx.InArchive(t, db, "ps__b", bDone))
	require.False(t, fx.InQueue(t, db, "ps__a", aFailed))
	require.False(t, fx.InQueue(t, db, "ps__b", bFailed))
}
