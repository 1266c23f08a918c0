package queueidentity_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// The same message id in two queues names two different tasks; claims, visibility and archiving of one never reach
// the other.
func TestSameMessageIDInTwoQueuesNeverCrosses(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('iso', timeout => 20)")
	fx.Exec(t, db, "select pgflow.add_step('iso', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('iso', 'b')")
	fx.RouteSteps(t, db, "iso", fx.FixtureQueue, "b")
	worker := fx.EnsureWorker(t, db, "iso", "")
	run := fx.StartFlow(t, db, "iso", `{}`)
	id := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID
	require.Equal(t, id, *fx.GetTask(t, db, run.RunID, "b", 0).MessageID, "both queues produced the same id")
	bBefore := messageState(t, db, fx.FixtureQueue, id)

	// Claim through the default queue: only a.
	require.Equal(t, []int64{id}, fx.ReadMessages(t, db, "iso", 5, 10))
	claimed := fx.StartTasksFrom(t, db, "iso", "iso", []int64{id}, worker)
	require.Len(t, claimed, 1)
	require.Equal(t, "a", claimed[0].StepSlug)
	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "b", 0).Status)
	require.Equal(t, bBefore, messageState(t, db, fx.FixtureQueue, id), "b's message keeps its visibility")
	require.Greater(t, fx.VisibleIn(t, db, "iso", id), 15.0, "a's message is hidden for timeout + 2 s")

	// The same id claimed again through the default queue is a's started task: nothing.
	require.Empty(t, fx.StartTasksFrom(t, db, "iso", "iso", []int64{id}, worker))
	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "b", 0).Status)

	// Through the fixture queue: only b.
	claimed = fx.StartTasksFrom(t, db, "iso", fx.FixtureQueue, []int64{id}, worker)
	require.Len(t, claimed, 1)
	require.Equal(t, "b", claimed[0].StepSlug)
	require.Equal(t, 1, fx.GetTask(t, db, run.RunID, "a", 0).AttemptsCount)

	// Completing a archives a's message only; failing b with a retry moves b's message only.
	fx.CompleteTask(t, db, run.RunID, "a", 0, `1`)
	require.True(t, fx.InArchive(t, db, "iso", id))
	require.True(t, fx.InQueue(t, db, fx.FixtureQueue, id))
	require.False(t, fx.InArchive(t, db, fx.FixtureQueue, id))
	require.Equal(t, "queued", fx.FailTask(t, db, run.RunID, "b", 0, "retry").Status)
	require.True(t, fx.InQueue(t, db, fx.FixtureQueue, id))
	require.Equal(t, "completed", fx.GetTask(t, db, run.RunID, "a", 0).Status)
}

// A message of another flow and a message no task has, read in the same batch as a valid one, are neither claimed
// nor changed (still queued, not archived, visibility and read count as the read left them), while the valid
// message is claimed.
func TestWrongFlowAndUnmatchedMessagesUntouched(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('wf')")
	fx.Exec(t, db, "select pgflow.add_step('wf', 'a')")
	fx.Exec(t, db, "select pgflow.create_flow('other')")
	fx.Exec(t, db, "select pgflow.add_step('other', 'x')")
	fx.RouteSteps(t, db, "other", "wf") // test fixture: another flow's task in the polled queue
	worker := fx.EnsureWorker(t, db, "wf", "")

	mine := fx.StartFlow(t, db, "wf", `{}`)
	theirs := fx.StartFlow(t, db, "other", `{}`)
	valid := *fx.GetTask(t, db, mine.RunID, "a", 0).MessageID
	foreign := *fx.GetTask(t, db, theirs.RunID, "x", 0).MessageID
	// A message that looks like one of wf's tasks: a body never authorises a claim.
	unmatched := fx.Val[int64](t, db, `select pgmq.send('wf', jsonb_build_object('flow_slug', 'wf', 'run_id', $1::text,
		'step_slug', 'a', 'task_index', 0))`, mine.RunID)

	batch := fx.ReadMessages(t, db, "wf", 30, 10)
	require.ElementsMatch(t, []int64{valid, foreign, unmatched}, batch)
	foreignBefore := messageState(t, db, "wf", foreign)
	unmatchedBefore := messageState(t, db, "wf", unmatched)

	claimed := fx.StartTasksFrom(t, db, "wf", "wf", batch, worker)
	require.Len(t, claimed, 1)
	require.Equal(t, valid, claimed[0].MsgID)
	require.Equal(t, mine.RunID, claimed[0].RunID)
	require.Equal(t, "started", fx.GetTask(t, db, mine.RunID, "a", 0).Status)
	require.Greater(t, fx.VisibleIn(t, db, "wf", valid), 55.0, "the valid message got timeout (60) + 2 s")

	other := fx.GetTask(t, db, theirs.RunID, "x", 0)
	require.Equal(t, "queued", other.Status)
	require.Zero(t, other.AttemptsCount)
	require.Nil(t, other.LastWorkerID)
	for id, before := range map[int64]msgState{foreign: foreignBefore, unmatched: unmatchedBefore} {
		require.True(t, fx.InQueue(t, db, "wf", id))
		require.False(t, fx.InArchive(t, db, "wf", id))
		require.Equal(t, before, messageState(t, db, "wf", id), "message %d keeps the visibility its read gave it", id)
	}

	// The other flow's own worker, polling the same queue, can still claim its task.
	claimed = fx.StartTasksFrom(t, db, "other", "wf", []int64{foreign, unmatched}, worker)
	require.Len(t, claimed, 1)
	require.Equal(t, "x", claimed[0].StepSlug)
	require.Equal(t, unmatchedBefore, messageState(t, db, "wf", unmatched))
}

// A v0.16.0 worker calls start_tasks with three arguments: it claims from the flow's default queue only (compared in
// lower case, so a mixed-case flow works), never from another queue with the same ids.
func TestThreeArgumentStartTasksUsesDefaultQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('ThreeArg')")
	fx.Exec(t, db, "select pgflow.add_step('ThreeArg', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('ThreeArg', 'b')")
	fx.RouteSteps(t, db, "ThreeArg", fx.FixtureQueue, "b")
	worker := fx.EnsureWorker(t, db, "ThreeArg", "")
	run := fx.StartFlow(t, db, "ThreeArg", `{}`)
	id := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID
	require.Equal(t, id, *fx.GetTask(t, db, run.RunID, "b", 0).MessageID)
	bBefore := messageState(t, db, fx.FixtureQueue, id)

	claimed := fx.StartTasks(t, db, "ThreeArg", []int64{id}, worker)
	require.Len(t, claimed, 1)
	require.Equal(t, "a", claimed[0].StepSlug)
	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "b", 0).Status)
	require.Equal(t, bBefore, messageState(t, db, fx.FixtureQueue, id))

	// An explicit NULL queue is the same as leaving it out; a mixed-case spelling of the queue is the same queue.
	require.Empty(t, fx.StartTasksFrom(t, db, "ThreeArg", "THREEARG", []int64{id}, worker))
	require.Zero(t, count(t, db, "select 1 from pgflow.start_tasks('ThreeArg', array[$1::bigint], $2::uuid, null)", id, worker))
	require.Equal(t, 1, fx.GetTask(t, db, run.RunID, "a", 0).AttemptsCount)
}

// A matching task that is already started is not claimed again, uses no attempt, and its message keeps the
// visibility of the first claim.
func TestStartedTaskNotClaimedAgain(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('again', timeout => 10)")
	fx.Exec(t, db, "select pgflow.add_step('again', 'a')")
	run := fx.StartFlow(t, db, "again", `{}`)
	ids := fx.ReadMessages(t, db, "again", 1, 10)
	require.Len(t, fx.StartTasksFrom(t, db, "again", "again", ids, fx.EnsureWorker(t, db, "again", "")), 1)
	first := fx.GetTask(t, db, run.RunID, "a", 0)
	vt := messageState(t, db, "again", ids[0])

	const otherWorker = "22222222-2222-2222-2222-222222222222"
	fx.EnsureWorker(t, db, "again", otherWorker)
	require.Empty(t, fx.StartTasksFrom(t, db, "again", "again", ids, otherWorker))
	require.Empty(t, fx.StartTasks(t, db, "again", ids, otherWorker))
	after := fx.GetTask(t, db, run.RunID, "a", 0)
	require.Equal(t, first, after, "the started task is unchanged")
	require.Equal(t, 1, after.AttemptsCount)
	require.Equal(t, vt, messageState(t, db, "again", ids[0]))
}

// Matching tasks that are terminal or otherwise ineligible are never executed or revived, and their messages are
// not touched by the claim.
func TestTerminalTaskNotRevived(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('term', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('term', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('term', 'b')")
	worker := fx.EnsureWorker(t, db, "term", "")

	// Completed task (its message was archived; a stale read still names it).
	done := fx.StartFlow(t, db, "term", `{}`)
	doneIDs := fx.ReadMessages(t, db, "term", 30, 10)
	require.Len(t, fx.StartTasksFrom(t, db, "term", "term", doneIDs, worker), 2)
	fx.CompleteTask(t, db, done.RunID, "a", 0, `1`)
	aID := *fx.GetTask(t, db, done.RunID, "a", 0).MessageID
	require.Empty(t, fx.StartTasksFrom(t, db, "term", "term", []int64{aID}, worker))
	require.Equal(t, "completed", fx.GetTask(t, db, done.RunID, "a", 0).Status)

	// Failed task of a failed run, and the queued sibling of that run.
	fx.FailTask(t, db, done.RunID, "b", 0, "fatal")
	require.Equal(t, "failed", fx.GetRun(t, db, done.RunID).Status)
	require.Empty(t, fx.StartTasksFrom(t, db, "term", "term", doneIDs, worker))
	require.Equal(t, "failed", fx.GetTask(t, db, done.RunID, "b", 0).Status)
	require.Equal(t, 1, fx.GetTask(t, db, done.RunID, "b", 0).AttemptsCount)

	// A terminal task whose message is still in the queue (state changed without cleanup): not revived, and the
	// claim leaves the message alone - cleanup stays with the lifecycle functions.
	stale := fx.StartFlow(t, db, "term", `{}`)
	staleID := *fx.GetTask(t, db, stale.RunID, "a", 0).MessageID
	fx.Exec(t, db, `update pgflow.step_tasks set status = 'failed', failed_at = now()
		where run_id = $1 and step_slug = 'a'`, stale.RunID)
	before := messageState(t, db, "term", staleID)
	require.Empty(t, fx.StartTasksFrom(t, db, "term", "term", []int64{staleID}, worker))
	require.Equal(t, "failed", fx.GetTask(t, db, stale.RunID, "a", 0).Status)
	require.Zero(t, fx.GetTask(t, db, stale.RunID, "a", 0).AttemptsCount)
	require.True(t, fx.InQueue(t, db, "term", staleID))
	require.Equal(t, before, messageState(t, db, "term", staleID))
}
