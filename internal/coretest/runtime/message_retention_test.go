package runtime_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// deleteFlow creates the one-step flow "d" (queue "d") that deletes its messages at the claim, and its worker.
func deleteFlow(t *testing.T, db fx.DB) {
	t.Helper()
	fx.Exec(t, db, "select pgflow.create_flow('d', timeout => 30, message_retention => 'delete')")
	fx.Exec(t, db, "select pgflow.add_step('d', 'a')")
	fx.EnsureWorker(t, db, "d", fx.DefaultWorker)
}

// claimedDeleteTask creates flow "d" (deleteFlow), starts a run of it and claims its task with
// read_and_start_tasks; it returns the run and the id of the message the task was claimed by.
func claimedDeleteTask(t *testing.T, db fx.DB) (fx.Run, int64) {
	t.Helper()
	deleteFlow(t, db)
	run := fx.StartFlow(t, db, "d", `{}`)
	msg := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID
	require.Len(t, readAndStartTasks(t, db, "d", "d", fx.DefaultWorker, 10, 5), 1)
	require.False(t, fx.InQueue(t, db, "d", msg), "deleted at the claim")
	return run, msg
}

// rowsWritten runs sql in its own transaction and returns the rows it inserted, updated and deleted in the
// pgflow and pgmq tables.
func rowsWritten(t *testing.T, db *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	ctx := fx.Ctx(t)
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// The counters may still hold the session's earlier transactions (PostgreSQL 15 reports a backend's pending
	// statistics there until it flushes them), so the difference counts this statement only.
	count := func() int {
		var n int
		require.NoError(t, tx.QueryRow(ctx, `
			select coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::int
			  from pg_catalog.pg_stat_xact_user_tables
			 where schemaname in ('pgflow', 'pgmq')`).Scan(&n))
		return n
	}
	before := count()
	_, err = tx.Exec(ctx, sql, args...)
	require.NoError(t, err)
	n := count() - before
	require.NoError(t, tx.Commit(ctx))
	return n
}

func TestDeleteRetentionDeletesTheMessageAtTheClaim(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	deleteFlow(t, db)
	run := fx.StartFlow(t, db, "d", `{"n": 1}`)
	msg := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID

	recs := readAndStartTasks(t, db, "d", "d", fx.DefaultWorker, 10, 5)
	require.Len(t, recs, 1)
	require.True(t, recs[0].Claimed)
	require.Equal(t, msg, recs[0].MsgID)
	require.Equal(t, 1, *recs[0].Attempt)
	tk := fx.GetTask(t, db, run.RunID, "a", 0)
	require.Equal(t, "started", tk.Status)
	require.Equal(t, msg, *tk.MessageID, "the task keeps the id of the message it was claimed by")
	require.False(t, fx.InQueue(t, db, "d", msg), "deleted at the claim")
	require.False(t, fx.InArchive(t, db, "d", msg), "deleted, not archived")

	fx.CompleteTask(t, db, run.RunID, "a", 0, `{"ok": true}`)
	require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
	require.Empty(t, fx.QueueMessages(t, db, "d"))
	require.Empty(t, fx.ArchivedMessages(t, db, "d"))
}

func TestDeleteRetentionStartTasksDeletesTheClaimedMessages(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	deleteFlow(t, db)
	run := fx.StartFlow(t, db, "d", `{}`)
	msg := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID

	tasks := fx.ReadAndStart(t, db, "d", 5, 10) // pgmq.read_with_poll, then start_tasks: pgflow's worker path
	require.Len(t, tasks, 1)
	require.Equal(t, "started", fx.GetTask(t, db, run.RunID, "a", 0).Status)
	require.False(t, fx.InQueue(t, db, "d", msg))
	require.False(t, fx.InArchive(t, db, "d", msg))
}

func TestDeleteRetentionLeavesUnclaimedMessagesAsReadDoes(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	deleteFlow(t, db)
	stray := fx.Val[int64](t, db, `select pgmq.send('d', '{"stray": true}')`)
	run := fx.StartFlow(t, db, "d", `{}`)
	msg := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID

	recs := readAndStartTasks(t, db, "d", "d", fx.DefaultWorker, 10, 7)
	require.Len(t, recs, 2)
	require.False(t, fx.InQueue(t, db, "d", msg), "the claimed message is deleted")
	msgs := fx.QueueMessages(t, db, "d")
	require.Len(t, msgs, 1, "the message without a task stays, hidden for vt seconds as pgmq.read leaves it")
	require.Equal(t, stray, msgs[0].MsgID)
	require.Equal(t, 1, msgs[0].ReadCt)
	require.InDelta(t, 7, fx.VisibleIn(t, db, "d", stray), 3)
}

func TestDeleteRetentionRetrySendsTheMessageAgain(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	run, first := claimedDeleteTask(t, db)

	// A retry later: a new message, hidden until the retry time that the task records.
	fx.Exec(t, db, `select pgflow.fail_task($1::uuid, 'a', 0, 'boom', retry_delay => 30)`, run.RunID)
	tk := fx.GetTask(t, db, run.RunID, "a", 0)
	require.Equal(t, "queued", tk.Status)
	require.NotNil(t, tk.MessageID)
	second := *tk.MessageID
	require.NotEqual(t, first, second, "a new message")
	require.True(t, fx.InQueue(t, db, "d", second))
	require.InDelta(t, 30, fx.VisibleIn(t, db, "d", second), 3)
	require.True(t, fx.Val[bool](t, db, `
		select t.retry_at = q.vt
		  from pgflow.step_tasks as t join pgmq.q_d as q on q.msg_id = t.message_id
		 where t.run_id = $1::uuid`, run.RunID), "retry_at is the new message's visibility")
	require.Empty(t, readAndStartTasks(t, db, "d", "d", fx.DefaultWorker, 10, 5), "not before the retry time")

	// A retry now: claimable at once, as the second attempt.
	fx.Exec(t, db, `select pgflow.set_vt_batch('d', array[$1::bigint], array[0])`, second)
	recs := readAndStartTasks(t, db, "d", "d", fx.DefaultWorker, 10, 5)
	require.Len(t, recs, 1)
	require.True(t, recs[0].Claimed)
	require.Equal(t, 2, *recs[0].Attempt)
	fx.Exec(t, db, `select pgflow.fail_task($1::uuid, 'a', 0, 'again', retry_delay => 0)`, run.RunID)
	third := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID
	require.NotEqual(t, second, third)
	recs = readAndStartTasks(t, db, "d", "d", fx.DefaultWorker, 10, 5)
	require.Len(t, recs, 1)
	require.Equal(t, third, recs[0].MsgID)
	require.Equal(t, 3, *recs[0].Attempt)
	fx.CompleteTask(t, db, run.RunID, "a", 0, `{}`)
	require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
	require.Empty(t, fx.QueueMessages(t, db, "d"))
}

func TestDeleteRetentionReleaseSendsTheMessageAgain(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	run, first := claimedDeleteTask(t, db)

	require.True(t, fx.Val[bool](t, db, `
		select released from pgflow.release_tasks(array[$1::uuid], array['a'], array[0], array[1])`, run.RunID))
	tk := fx.GetTask(t, db, run.RunID, "a", 0)
	require.Equal(t, "queued", tk.Status)
	require.NotEqual(t, first, *tk.MessageID)
	recs := readAndStartTasks(t, db, "d", "d", fx.DefaultWorker, 10, 5)
	require.Len(t, recs, 1, "visible at once")
	require.Equal(t, *tk.MessageID, recs[0].MsgID)
	require.Equal(t, 1, *recs[0].Attempt, "a release spends no attempt")
}

func TestDeleteRetentionStalledTaskGetsItsMessageAgain(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	run, first := claimedDeleteTask(t, db)
	require.Equal(t, 0, fx.Val[int](t, db, `select pgflow.requeue_stalled_tasks()`), "not stalled yet")
	require.Empty(t, fx.QueueMessages(t, db, "d"))

	// Its worker died: past the timeout (30 s) + 30 s, the task is requeued with a new message.
	fx.Exec(t, db, `update pgflow.step_tasks set started_at = now() - interval '61 seconds',
		queued_at = least(queued_at, now() - interval '61 seconds') where run_id = $1::uuid`, run.RunID)
	require.Equal(t, 1, fx.Val[int](t, db, `select pgflow.requeue_stalled_tasks()`))
	tk := fx.GetTask(t, db, run.RunID, "a", 0)
	require.Equal(t, "queued", tk.Status)
	require.NotEqual(t, first, *tk.MessageID)
	recs := readAndStartTasks(t, db, "d", "d", fx.DefaultWorker, 10, 5)
	require.Len(t, recs, 1)
	require.True(t, recs[0].Claimed)
	require.Equal(t, 2, *recs[0].Attempt)
}

func TestMessagesAreNeverSentAgainForARunThatNoLongerRuns(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	run, msg := claimedDeleteTask(t, db)
	fx.Exec(t, db, "update pgflow.runs set status = 'failed', failed_at = now() where run_id = $1::uuid", run.RunID)

	require.Equal(t, 0, fx.Val[int](t, db,
		`select count(*)::int from pgflow._make_task_messages_visible('d', array[$1::bigint, 424242], array[0, 0])`, msg))
	require.Empty(t, fx.QueueMessages(t, db, "d"))
	require.Equal(t, msg, *fx.GetTask(t, db, run.RunID, "a", 0).MessageID)
}

// The retention decides only what a claim does: a flow can switch while tasks run, and no message is left behind.
func TestMessageRetentionCanChangeWhileTasksRun(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('d', timeout => 30)")
	fx.Exec(t, db, "select pgflow.add_step('d', 'a')")
	fx.EnsureWorker(t, db, "d", fx.DefaultWorker)
	archived := fx.StartFlow(t, db, "d", `{}`)
	archivedMsg := *fx.GetTask(t, db, archived.RunID, "a", 0).MessageID
	require.Len(t, readAndStartTasks(t, db, "d", "d", fx.DefaultWorker, 10, 5), 1)
	require.True(t, fx.InQueue(t, db, "d", archivedMsg), "claimed under 'archive': the message stays, hidden")

	fx.Exec(t, db, "update pgflow.flows set message_retention = 'delete' where flow_slug = 'd'")
	deleted := fx.StartFlow(t, db, "d", `{}`)
	deletedMsg := *fx.GetTask(t, db, deleted.RunID, "a", 0).MessageID
	require.Len(t, readAndStartTasks(t, db, "d", "d", fx.DefaultWorker, 10, 5), 1)
	require.False(t, fx.InQueue(t, db, "d", deletedMsg))

	// The task claimed under 'archive' still has its message archived at completion.
	fx.CompleteTask(t, db, archived.RunID, "a", 0, `{}`)
	require.False(t, fx.InQueue(t, db, "d", archivedMsg))
	require.True(t, fx.InArchive(t, db, "d", archivedMsg))

	// Back to 'archive': the task claimed under 'delete' retries with a new message, which the next claim keeps.
	fx.Exec(t, db, "update pgflow.flows set message_retention = 'archive' where flow_slug = 'd'")
	fx.Exec(t, db, `select pgflow.fail_task($1::uuid, 'a', 0, 'boom', retry_delay => 0)`, deleted.RunID)
	again := *fx.GetTask(t, db, deleted.RunID, "a", 0).MessageID
	require.NotEqual(t, deletedMsg, again)
	require.Len(t, readAndStartTasks(t, db, "d", "d", fx.DefaultWorker, 10, 5), 1)
	require.True(t, fx.InQueue(t, db, "d", again))
	fx.CompleteTask(t, db, deleted.RunID, "a", 0, `{}`)
	require.True(t, fx.InArchive(t, db, "d", again))
	require.Empty(t, fx.QueueMessages(t, db, "d"))
}

// Issue 16's target: at most five rows written per one-step task, with the claim and the completion as a worker
// makes them. 'archive' writes seven: the message's visibility update at the claim and its archive copy.
func TestRowsWrittenPerOneStepTaskByRetention(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		retention       string
		claim, complete int
	}{
		{"archive", 2, 5}, // task + message update; task, step, run, message delete + archive insert
		{"delete", 2, 3},  // task update + message delete; task, step, run
	} {
		t.Run(tc.retention, func(t *testing.T) {
			t.Parallel()
			db := newDB(t).Pool
			fx.Exec(t, db, "select pgflow.create_flow('d', message_retention => $1)", tc.retention)
			fx.Exec(t, db, "select pgflow.add_step('d', 'a')")
			fx.EnsureWorker(t, db, "d", fx.DefaultWorker)
			run := fx.StartFlow(t, db, "d", `{}`)

			claim := rowsWritten(t, db, `select from pgflow.read_and_start_tasks('d', 'd', $1::uuid, 10, 5)`, fx.DefaultWorker)
			require.Equal(t, "started", fx.GetTask(t, db, run.RunID, "a", 0).Status)
			complete := rowsWritten(t, db, `select from pgflow.complete_tasks(array[$1::uuid], array['a'], array[0],
				array['{}'::jsonb], array[1])`, run.RunID)
			require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
			require.Equal(t, tc.claim, claim, "rows written by the claim")
			require.Equal(t, tc.complete, complete, "rows written by the completion")
		})
	}
}

func TestMessageRetentionIsValidated(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	_, err := db.Exec(fx.Ctx(t), "select pgflow.create_flow('d', message_retention => 'drop')")
	requirePgError(t, err, "22023", `Flow "d": message_retention must be 'archive' or 'delete', got 'drop'`)
	require.Equal(t, 0, fx.Val[int](t, db, "select count(*)::int from pgflow.flows"))

	fx.Exec(t, db, "select pgflow.create_flow('d')")
	require.Equal(t, "archive", fx.Val[string](t, db, "select message_retention from pgflow.flows where flow_slug = 'd'"))
	_, err = db.Exec(fx.Ctx(t), "update pgflow.flows set message_retention = 'keep' where flow_slug = 'd'")
	requirePgError(t, err, "23514", `new row for relation "flows" violates check constraint "message_retention_is_valid"`)
}

func TestEnsureFlowCompiledSetsTheMessageRetentionInPlace(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	shape := `{"steps": [{"slug": "a", "stepType": "single", "dependencies": []}]}`
	ensure := func(retention any) string {
		return fx.Val[string](t, db,
			`select pgflow.ensure_flow_compiled('d', $1::jsonb, message_retention => $2::text) ->> 'status'`, shape, retention)
	}
	stored := func() string {
		return fx.Val[string](t, db, "select message_retention from pgflow.flows where flow_slug = 'd'")
	}
	require.Equal(t, "compiled", ensure("delete"))
	require.Equal(t, "delete", stored())
	shape = fx.Val[string](t, db, "select pgflow._get_flow_shape('d')::text") // the stored shape, as compared
	run := fx.StartFlow(t, db, "d", `{}`)

	require.Equal(t, "verified", ensure("archive"), "not a difference: nothing is recompiled")
	require.Equal(t, "archive", stored())
	require.Equal(t, "verified", ensure(nil))
	require.Equal(t, "archive", stored(), "NULL keeps the stored value")
	require.Equal(t, "started", fx.GetRun(t, db, run.RunID).Status, "the flow's runs are untouched")

	// A shape mismatch does not stop the retention from being applied.
	changed := `{"steps": [{"slug": "b", "stepType": "single", "dependencies": []}]}`
	require.Equal(t, "mismatch", fx.Val[string](t, db,
		`select pgflow.ensure_flow_compiled('d', $1::jsonb, message_retention => 'delete') ->> 'status'`, changed))
	require.Equal(t, "delete", stored())

	_, err := db.Exec(fx.Ctx(t), `select pgflow.ensure_flow_compiled('d', $1::jsonb, message_retention => 'Delete')`, shape)
	requirePgError(t, err, "22023", `Flow "d": message_retention must be 'archive' or 'delete', got 'Delete'`)
	require.Equal(t, "delete", stored())
}
