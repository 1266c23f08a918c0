package queueidentity_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// Task creation sends through steps.queue_name and stores that same value on the task; later route changes do not
// reach tasks that already exist.
func TestSnapshotAtTaskCreation(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('SnapFlow')")
	fx.Exec(t, db, "select pgflow.add_step('SnapFlow', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('SnapFlow', 'b')")
	fx.Exec(t, db, "select pgflow.add_step('SnapFlow', 'c', array['a'])")
	require.Equal(t, []string{"snapflow", "snapflow", "snapflow"},
		fx.Val[[]string](t, db, "select array_agg(queue_name order by step_index) from pgflow.steps where flow_slug = 'SnapFlow'"),
		"add_step records the flow's canonical default route")

	fx.RouteSteps(t, db, "SnapFlow", fx.FixtureQueue, "b")
	run := fx.StartFlow(t, db, "SnapFlow", `{}`)

	a := fx.GetTask(t, db, run.RunID, "a", 0)
	b := fx.GetTask(t, db, run.RunID, "b", 0)
	require.Equal(t, "snapflow", a.QueueName)
	require.Equal(t, fx.FixtureQueue, b.QueueName)
	require.Equal(t, *a.MessageID, *b.MessageID, "both queues are fresh, so both tasks got message id 1")
	require.Equal(t, []int64{*a.MessageID}, fx.MessageIDs(fx.QueueMessages(t, db, "snapflow")))
	fixtureMsgs := fx.QueueMessages(t, db, fx.FixtureQueue)
	require.Len(t, fixtureMsgs, 1)
	require.Contains(t, fixtureMsgs[0].Message, `"step_slug": "b"`, "b's message went to its step's queue")

	// Changing routes afterwards does not touch existing snapshots; a task created later snapshots the route of
	// that moment.
	fx.RouteSteps(t, db, "SnapFlow", "later_q", "b", "c")
	require.Equal(t, fx.FixtureQueue, fx.GetTask(t, db, run.RunID, "b", 0).QueueName)

	claimed := fx.StartTasksFrom(t, db, "SnapFlow", "snapflow", []int64{*a.MessageID}, fx.EnsureWorker(t, db, "snapflow", ""))
	require.Len(t, claimed, 1)
	fx.CompleteTask(t, db, run.RunID, "a", 0, `1`)
	c := fx.GetTask(t, db, run.RunID, "c", 0)
	require.Equal(t, "later_q", c.QueueName)
	require.Equal(t, []int64{*c.MessageID}, fx.MessageIDs(fx.QueueMessages(t, db, "later_q")))
	require.Equal(t, fx.FixtureQueue, fx.GetTask(t, db, run.RunID, "b", 0).QueueName)
	require.Equal(t, "snapflow", fx.GetTask(t, db, run.RunID, "a", 0).QueueName)
}

// Runtime code never changes a task's queue snapshot: claim, retry, completion, failure, skip and requeue all keep
// it, even after the step's route was changed.
func TestSnapshotUnchangedAcrossLifecycle(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	routedFlow(t, db, "life",
		"select pgflow.create_flow('life', max_attempts => 2, base_delay => 0, timeout => 5)",
		"select pgflow.add_step('life', 'r')",
		"select pgflow.add_step('life', 's', step_type => 'map', max_attempts => 1, when_exhausted => 'skip')",
		"select pgflow.add_step('life', 'q')")
	run := fx.StartFlow(t, db, "life", `[1, 2]`)
	requireSnapshots(t, db, run.RunID, fx.FixtureQueue)
	fx.RouteSteps(t, db, "life", "moved_q") // a route change must not reach existing tasks

	// claim
	require.Len(t, fx.ReadAndStartFrom(t, db, "life", fx.FixtureQueue, 30, 10), 4)
	requireSnapshots(t, db, run.RunID, fx.FixtureQueue)
	// retry
	require.Equal(t, "queued", fx.FailTask(t, db, run.RunID, "r", 0, "once").Status)
	requireSnapshots(t, db, run.RunID, fx.FixtureQueue)
	// claim again, complete
	require.Len(t, fx.StartTasksFrom(t, db, "life", fx.FixtureQueue,
		[]int64{*fx.GetTask(t, db, run.RunID, "r", 0).MessageID}, fx.DefaultWorker), 1)
	require.Equal(t, "completed", fx.CompleteTask(t, db, run.RunID, "r", 0, `"ok"`).Status)
	requireSnapshots(t, db, run.RunID, fx.FixtureQueue)
	// failure + skip
	require.Equal(t, "failed", fx.FailTask(t, db, run.RunID, "s", 0, "boom").Status)
	require.Equal(t, "skipped", fx.GetStep(t, db, run.RunID, "s").Status)
	requireSnapshots(t, db, run.RunID, fx.FixtureQueue)
	// requeue
	fx.Exec(t, db, `update pgflow.step_tasks set started_at = now() - interval '1 minute',
		queued_at = now() - interval '1 minute' where run_id = $1 and step_slug = 'q'`, run.RunID)
	require.Equal(t, 1, fx.Val[int](t, db, "select pgflow.requeue_stalled_tasks()"))
	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "q", 0).Status)
	requireSnapshots(t, db, run.RunID, fx.FixtureQueue)

	// run failure
	fx.Exec(t, db, "update pgflow.steps set opt_max_attempts = 1 where flow_slug = 'life' and step_slug = 'q'")
	require.Len(t, fx.StartTasksFrom(t, db, "life", fx.FixtureQueue,
		[]int64{*fx.GetTask(t, db, run.RunID, "q", 0).MessageID}, fx.DefaultWorker), 1)
	fx.FailTask(t, db, run.RunID, "q", 0, "fatal")
	require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)
	requireSnapshots(t, db, run.RunID, fx.FixtureQueue)
	require.Zero(t, count(t, db, "select 1 from pgflow.step_tasks where queue_name = 'moved_q'"))
}

// message_id stays nullable: many tasks of one queue may have none, and they run through the lifecycle without
// any PGMQ call failing.
func TestNullMessageIDsAllowed(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('nulls')")
	fx.Exec(t, db, "select pgflow.add_step('nulls', 'm', step_type => 'map')")
	require.False(t, fx.Val[bool](t, db, `select attnotnull from pg_attribute
		where attrelid = 'pgflow.step_tasks'::regclass and attname = 'message_id'`))

	run := fx.StartFlow(t, db, "nulls", `[1, 2, 3]`)
	require.Len(t, fx.ReadAndStartFrom(t, db, "nulls", "nulls", 30, 10), 3)
	fx.Exec(t, db, "update pgflow.step_tasks set message_id = null where run_id = $1", run.RunID)
	require.Equal(t, 3, count(t, db, "select 1 from pgflow.step_tasks where queue_name = 'nulls' and message_id is null"),
		"(queue_name, NULL) is not a duplicate pair")

	// A second run's tasks also without messages, in the same queue.
	run2 := fx.StartFlow(t, db, "nulls", `[4]`)
	fx.Exec(t, db, "update pgflow.step_tasks set message_id = null where run_id = $1", run2.RunID)
	require.Equal(t, 4, count(t, db, "select 1 from pgflow.step_tasks where message_id is null"))

	for i := range 3 {
		fx.CompleteTask(t, db, run.RunID, "m", i, `1`)
	}
	require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
	fx.Exec(t, db, "select pgflow._archive_task_message($1, 'm', 0)", run2.RunID)
	fx.Exec(t, db, "select pgflow._cascade_force_skip_steps($1, 'm', 'manual')", run2.RunID)
	require.Equal(t, "skipped", fx.GetStep(t, db, run2.RunID, "m").Status)
}

// (queue_name, message_id) is a task's message identity: a second task with the same pair is rejected by the
// database, while the same message id in another queue is a different identity.
func TestDuplicateQueueMessagePairRejected(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('dup')")
	fx.Exec(t, db, "select pgflow.add_step('dup', 'm', step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('dup', 'routed')")
	fx.RouteSteps(t, db, "dup", fx.FixtureQueue, "routed")
	run := fx.StartFlow(t, db, "dup", `[1, 2]`)
	first := fx.GetTask(t, db, run.RunID, "m", 0)

	err := execErr(db, "update pgflow.step_tasks set message_id = $2 where run_id = $1 and step_slug = 'm' and task_index = 1",
		run.RunID, *first.MessageID)
	pgErr := requirePgError(t, err, "23505", `duplicate key value violates unique constraint "step_tasks_queue_name_message_id_key"`)
	require.Equal(t, "Key (queue_name, message_id)=(dup, 1) already exists.", pgErr.Detail)

	// A direct insert of a task with an existing pair is rejected the same way.
	fx.Exec(t, db, "insert into pgflow.runs (run_id, flow_slug, input) values ('00000000-0000-0000-0000-0000000000aa', 'dup', '{}')")
	fx.Exec(t, db, `insert into pgflow.step_states (flow_slug, run_id, step_slug) values ('dup', '00000000-0000-0000-0000-0000000000aa', 'm')`)
	err = execErr(db, `insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name)
		values ('dup', '00000000-0000-0000-0000-0000000000aa', 'm', 0, $1, 'dup')`, *first.MessageID)
	requirePgError(t, err, "23505", `duplicate key value violates unique constraint "step_tasks_queue_name_message_id_key"`)

	// The same id in the fixture queue belongs to another task.
	routed := fx.GetTask(t, db, run.RunID, "routed", 0)
	require.Equal(t, *first.MessageID, *routed.MessageID)
	require.Equal(t, 2, count(t, db, "select 1 from pgflow.step_tasks where message_id = $1", *first.MessageID))

	// Queue names must be canonical.
	err = execErr(db, "update pgflow.step_tasks set queue_name = 'Dup' where run_id = $1 and step_slug = 'm' and task_index = 0", run.RunID)
	requirePgError(t, err, "23514", `new row for relation "step_tasks" violates check constraint "step_tasks_queue_name_is_valid"`)
	err = execErr(db, "update pgflow.steps set queue_name = 'Dup' where flow_slug = 'dup'")
	requirePgError(t, err, "23514", `new row for relation "steps" violates check constraint "steps_queue_name_is_valid"`)
}

// Message ids above JavaScript's Number.MAX_SAFE_INTEGER (2^53 - 1) are stored, claimed and archived exactly.
func TestMessageIDsBeyondJSSafeIntegerClaimedExactly(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('big')")
	fx.Exec(t, db, "select pgflow.add_step('big', 'm', step_type => 'map')")
	fx.Exec(t, db, "alter table pgmq.q_big alter column msg_id restart with 9007199254740993")
	run := fx.StartFlow(t, db, "big", `["a", "b", "c"]`)

	want := []int64{9007199254740993, 9007199254740994, 9007199254740995}
	require.NotEqual(t, want[0], int64(float64(want[0])), "the first id is not representable as a float64")
	ids := fx.ReadMessages(t, db, "big", 30, 10)
	require.Equal(t, want, ids)

	claimed := fx.StartTasksFrom(t, db, "big", "big", ids, fx.EnsureWorker(t, db, "big", ""))
	require.Len(t, claimed, 3)
	for i, tk := range claimed {
		require.Equal(t, want[i], tk.MsgID)
		require.Equal(t, i, tk.TaskIndex)
		require.Equal(t, want[i], *fx.GetTask(t, db, run.RunID, "m", i).MessageID)
	}
	require.Equal(t, []string{"9007199254740993", "9007199254740994", "9007199254740995"},
		fx.Val[[]string](t, db, `select array_agg(message_id::text order by task_index) from pgflow.step_tasks where run_id = $1`, run.RunID))

	for i := range claimed {
		fx.CompleteTask(t, db, run.RunID, "m", i, `1`)
	}
	require.Equal(t, want, fx.MessageIDs(fx.ArchivedMessages(t, db, "big")), "the exact messages were archived")
	require.Empty(t, fx.QueueMessages(t, db, "big"))
}

// Exactly one start_tasks exists; its fourth argument is optional, so a v0.16.0 worker's call still resolves.
func TestStartTasksSignature(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	require.Equal(t,
		[]string{"start_tasks(flow_slug text, msg_ids bigint[], worker_id uuid, queue_name text DEFAULT NULL::text) SETOF pgflow.step_task_record"},
		fx.Val[[]string](t, db, `select array_agg(p.proname || '(' || pg_get_function_arguments(p.oid) || ') ' ||
			pg_get_function_result(p.oid)) from pg_proc p where p.pronamespace = 'pgflow'::regnamespace and p.proname = 'start_tasks'`))
}
