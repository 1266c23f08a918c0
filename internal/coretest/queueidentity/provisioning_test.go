package queueidentity_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
	"github.com/pgflow-go/pgflow/schema"
)

// create_flow creates the canonical default queue, also for a flow without steps; add_step records that route.
func TestDefaultAndEmptyFlowGetQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('EmptyFlow')")
	require.Equal(t, []string{"emptyflow"}, listed(t, db, "emptyflow"), "the queue name is the lower-case slug")
	require.Equal(t, "EmptyFlow", fx.Val[string](t, db, "select flow_slug from pgflow.flows"), "the slug keeps its spelling")
	require.Zero(t, count(t, db, "select 1 from pgflow.steps"))

	fx.Exec(t, db, "select pgflow.create_flow('camelCaseFlow')")
	fx.Exec(t, db, "select pgflow.add_step('camelCaseFlow', 'firstStep')")
	fx.Exec(t, db, "select pgflow.add_step('camelCaseFlow', 'secondStep', array['firstStep'])")
	require.Equal(t, []string{"camelcaseflow"}, listed(t, db, "camelcaseflow"))
	require.Equal(t, []string{"camelcaseflow", "camelcaseflow"},
		fx.Val[[]string](t, db, "select array_agg(queue_name order by step_index) from pgflow.steps where flow_slug = 'camelCaseFlow'"))
	require.Equal(t, []string{"firstStep", "secondStep"},
		fx.Val[[]string](t, db, "select array_agg(step_slug order by step_index) from pgflow.steps where flow_slug = 'camelCaseFlow'"),
		"step spelling is preserved")

	// The empty flow's run completes at once; the flow with steps sends to its route.
	require.Equal(t, "completed", fx.StartFlow(t, db, "EmptyFlow", `{}`).Status)
	run := fx.StartFlow(t, db, "camelCaseFlow", `{}`)
	require.Equal(t, "camelcaseflow", fx.GetTask(t, db, run.RunID, "firstStep", 0).QueueName)
	require.Len(t, fx.QueueMessages(t, db, "camelcaseflow"), 1)
}

// Task dispatch performs no queue DDL: a flow whose queue was dropped by hand cannot start a run, and no queue is
// created behind the operator's back.
func TestDispatchCreatesNoQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('noddl')")
	fx.Exec(t, db, "select pgflow.add_step('noddl', 'a')")
	fx.Exec(t, db, "select pgmq.drop_queue('noddl')")
	_, err := fx.TryStartFlow(fx.Ctx(t), db, "noddl", `{}`)
	requirePgError(t, err, "42P01", `relation "pgmq.q_noddl" does not exist`)
	require.Empty(t, listed(t, db, "noddl"))
	require.Zero(t, count(t, db, "select 1 from pgflow.runs"))
}

// A queue PGMQ already lists under the same normalized name blocks a new flow; nothing is written.
func TestExternalQueueWithSameNormalizedNameBlocksNewFlow(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgmq.create('Orders')")
	fx.Exec(t, db, `select pgmq.send('Orders', '{"app": "message"}')`)

	err := execErr(db, "select pgflow.create_flow('orders')")
	pgErr := requirePgError(t, err, "23505",
		`Cannot create flow "orders": PGMQ already lists queue "Orders", which has the same normalized name "orders" as the flow's queue`)
	require.Contains(t, pgErr.Hint, "pgflow manages its queues exclusively")
	require.Zero(t, count(t, db, "select 1 from pgflow.flows"))
	require.Equal(t, []string{"Orders"}, listed(t, db, "orders"), "no second metadata entry")
	require.Len(t, fx.QueueMessages(t, db, "orders"), 1, "the external queue keeps its message")

	// Through ensure_flow_compiled (what a worker does at startup) the same.
	err = execErr(db, `select pgflow.ensure_flow_compiled('ORDERS', '{"steps": [{"slug": "a"}]}')`)
	requirePgError(t, err, "23505",
		`Cannot create flow "ORDERS": PGMQ already lists queue "Orders", which has the same normalized name "orders" as the flow's queue`)
	require.Zero(t, count(t, db, "select 1 from pgflow.flows"))
	require.Zero(t, count(t, db, "select 1 from pgflow.steps"))
}

// An existing flow reuses its own queue, under whatever spelling PGMQ lists it, and gets it back when it is gone.
func TestExistingFlowReusesItsQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('reuse')")
	fx.Exec(t, db, `select pgmq.send('reuse', '{"k": 1}')`)
	fx.Exec(t, db, "select pgflow.create_flow('reuse')")
	require.Equal(t, []string{"reuse"}, listed(t, db, "reuse"))
	require.Len(t, fx.QueueMessages(t, db, "reuse"), 1, "the queue was kept with its message")

	// A flow whose queue PGMQ lists in mixed case (as v0.16.0 created it) is not given a second entry.
	fx.Exec(t, db, "select pgmq.create('MixedReuse')")
	fx.Exec(t, db, "insert into pgflow.flows (flow_slug) values ('MixedReuse')")
	fx.Exec(t, db, "select pgflow.create_flow('MixedReuse')")
	require.Equal(t, []string{"MixedReuse"}, listed(t, db, "mixedreuse"))

	// A queue dropped by hand is re-created, canonically.
	fx.Exec(t, db, "select pgmq.drop_queue('reuse')")
	fx.Exec(t, db, "select pgflow.create_flow('reuse')")
	require.Equal(t, []string{"reuse"}, listed(t, db, "reuse"))
}

// Two flows may not address the same normalized default queue, however they are written: the constraint lives in
// the database.
func TestFlowsDifferingOnlyInCaseRejectedEvenByDirectInsert(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "insert into pgflow.flows (flow_slug) values ('orders')")
	for _, slug := range []string{"Orders", "ORDERS", "oRdErS"} {
		err := execErr(db, "insert into pgflow.flows (flow_slug) values ($1)", slug)
		pgErr := requirePgError(t, err, "23505", `duplicate key value violates unique constraint "flows_default_queue_key"`)
		require.Equal(t, "Key (pgflow._default_queue_name(flow_slug))=(orders) already exists.", pgErr.Detail)
	}
	err := execErr(db, "update pgflow.flows set flow_slug = 'Orders2' where flow_slug = 'orders'")
	require.NoError(t, err, "renaming to a different normalized name is not a collision")
	fx.Exec(t, db, "insert into pgflow.flows (flow_slug) values ('orders')")
	require.Equal(t, 2, count(t, db, "select 1 from pgflow.flows"))
}

// Concurrent definitions of slugs differing only in case are serialised on the normalized slug: the second waits
// for the first and is then refused.
func TestConcurrentCaseVariantsSerialised(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "select pgflow.create_flow('LockFlow')")
	require.NoError(t, err)

	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	pid := conn.Conn().PgConn().PID()
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, "select pgflow.create_flow('LOCKFLOW')")
		done <- err
	}()
	waitUntilBlocked(t, db, pid, func() bool { return len(done) > 0 })
	require.NoError(t, tx.Commit(ctx))
	requirePgError(t, <-done, "23505",
		`Cannot create flow "LOCKFLOW": PGMQ already lists queue "lockflow", which has the same normalized name "lockflow" as the flow's queue`)
	require.Equal(t, []string{"LockFlow"}, fx.Val[[]string](t, db, "select array_agg(flow_slug) from pgflow.flows"))
}

// A flow created by v0.16.0 with a mixed-case slug has a queue PGMQ lists in mixed case. After the upgrade it keeps
// working (runs in flight and new ones), and delete_flow_and_data removes exactly that metadata entry and its tables.
func TestMixedCaseQueueFromV016KeepsWorkingAndIsDeleted(t *testing.T) {
	t.Parallel()
	tdb, upgrade := newV016DB(t)
	db := tdb.Pool
	fx.Exec(t, db, "select pgflow.create_flow('MyFlow')")
	fx.Exec(t, db, "select pgflow.add_step('MyFlow', 'first')")
	fx.Exec(t, db, "select pgflow.add_step('MyFlow', 'second', array['first'])")
	require.Equal(t, []string{"MyFlow"}, listed(t, db, "myflow"), "v0.16.0 named the queue exactly like the flow")
	inFlight := fx.StartFlow(t, db, "MyFlow", `{"n": 1}`)

	upgrade()
	require.Equal(t, []string{"MyFlow"}, listed(t, db, "myflow"), "the upgrade neither renames nor re-creates the queue")
	require.Equal(t, "myflow", fx.GetTask(t, db, inFlight.RunID, "first", 0).QueueName)

	// A worker polls the queue by the flow's name and claims with the four-argument call.
	worker := fx.EnsureWorker(t, db, "MyFlow", "")
	for _, step := range []string{"first", "second"} {
		ids := fx.ReadMessages(t, db, "MyFlow", 30, 10)
		claimed := fx.StartTasksFrom(t, db, "MyFlow", "MyFlow", ids, worker)
		require.Len(t, claimed, 1)
		require.Equal(t, step, claimed[0].StepSlug)
		fx.CompleteTask(t, db, inFlight.RunID, step, 0, `1`)
	}
	require.Equal(t, "completed", fx.GetRun(t, db, inFlight.RunID).Status)

	// create_flow again does not add a lower-case entry; a new run works with a v0.16.0-style claim too.
	fx.Exec(t, db, "select pgflow.create_flow('MyFlow')")
	require.Equal(t, []string{"MyFlow"}, listed(t, db, "myflow"))
	fresh := fx.StartFlow(t, db, "MyFlow", `{"n": 2}`)
	require.Len(t, fx.StartTasks(t, db, "MyFlow", fx.ReadMessages(t, db, "MyFlow", 30, 10), worker), 1)
	require.Equal(t, "started", fx.GetTask(t, db, fresh.RunID, "first", 0).Status)

	fx.Exec(t, db, "select pgflow.create_flow('other_flow')")
	fx.Exec(t, db, "select pgflow.delete_flow_and_data('MyFlow')")
	require.Empty(t, listed(t, db, "myflow"), "the mixed-case metadata entry is gone")
	require.False(t, tableExists(t, db, "q_myflow"))
	require.False(t, tableExists(t, db, "a_myflow"))
	for _, table := range []string{"flows", "steps", "deps", "runs", "step_states", "step_tasks"} {
		require.Zero(t, count(t, db, "select 1 from pgflow."+table+" where flow_slug = 'MyFlow'"), table)
	}
	require.Equal(t, []string{"other_flow"}, listed(t, db, "other_flow"), "other flows keep their queues")
}

// delete_flow_and_data drops the flow's persisted routes, or its default queue when it has no steps, and nothing
// that is not one of its queues.
func TestDeleteFlowDropsPersistedRoutes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('del')")
	fx.Exec(t, db, "select pgflow.add_step('del', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('del', 'b')")
	fx.RouteSteps(t, db, "del", fx.FixtureQueue, "b")
	fx.StartFlow(t, db, "del", `{}`)
	fx.Exec(t, db, "select pgflow.create_flow('empty')")
	fx.Exec(t, db, "select pgmq.create('stranger')")

	fx.Exec(t, db, "select pgflow.delete_flow_and_data('del')")
	require.Empty(t, listed(t, db, "del"))
	require.Empty(t, listed(t, db, fx.FixtureQueue))
	require.False(t, tableExists(t, db, "q_"+fx.FixtureQueue))
	require.False(t, tableExists(t, db, "a_"+fx.FixtureQueue))

	fx.Exec(t, db, "select pgflow.delete_flow_and_data('empty')")
	require.Empty(t, listed(t, db, "empty"))

	// An unknown flow touches no queue, even one with its name.
	fx.Exec(t, db, "select pgflow.delete_flow_and_data('stranger')")
	require.Equal(t, []string{"stranger"}, listed(t, db, "stranger"))
	require.Zero(t, count(t, db, "select 1 from pgflow.flows"))
}

// Two metadata spellings for one normalized queue are ambiguous: deletion stops before destroying anything.
func TestAmbiguousListedQueueAbortsDeletion(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('amb')")
	fx.Exec(t, db, "select pgflow.add_step('amb', 'a')")
	run := fx.StartFlow(t, db, "amb", `{}`)
	fx.Exec(t, db, "select pgmq.create('AMB')") // a second spelling of the same queue
	require.Equal(t, []string{"AMB", "amb"}, listed(t, db, "amb"))

	err := execErr(db, "select pgflow.delete_flow_and_data('amb')")
	requirePgError(t, err, "55000",
		`Cannot delete flow "amb": its queue "amb" is listed by PGMQ under 2 spellings (AMB, amb); nothing was deleted`)
	require.Equal(t, 1, count(t, db, "select 1 from pgflow.flows where flow_slug = 'amb'"))
	require.Equal(t, 1, count(t, db, "select 1 from pgflow.step_tasks where run_id = $1", run.RunID))
	require.Equal(t, []string{"AMB", "amb"}, listed(t, db, "amb"))
	require.Len(t, fx.QueueMessages(t, db, "amb"), 1)
}

// A PGMQ call that fails inside delete_flow_and_data rolls the whole deletion back.
func TestFailingPGMQCallRollsBackDeletion(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, "select pgflow.create_flow('keep')")
	fx.Exec(t, db, "select pgflow.add_step('keep', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('keep', 'b')")
	fx.RouteSteps(t, db, "keep", fx.FixtureQueue, "b")
	run := fx.StartFlow(t, db, "keep", `{}`)
	// A view that depends on the queue table of 'keep' makes its pgmq.drop_queue fail (DROP TABLE without CASCADE),
	// after the rows were deleted and the fixture queue (dropped first, in name order) is gone.
	fx.Exec(t, db, "create view public.blocks_drop as select msg_id from pgmq.q_keep")

	err := execErr(db, "select pgflow.delete_flow_and_data('keep')")
	requirePgError(t, err, "2BP01", "cannot drop table pgmq.q_keep because other objects depend on it")

	require.Equal(t, 1, count(t, db, "select 1 from pgflow.flows where flow_slug = 'keep'"))
	require.Equal(t, 2, count(t, db, "select 1 from pgflow.steps where flow_slug = 'keep'"))
	require.Equal(t, 2, count(t, db, "select 1 from pgflow.step_tasks where run_id = $1", run.RunID))
	require.Equal(t, []string{"keep"}, listed(t, db, "keep"))
	require.Equal(t, []string{fx.FixtureQueue}, listed(t, db, fx.FixtureQueue))
	require.Len(t, fx.QueueMessages(t, db, "keep"), 1)
	require.Len(t, fx.QueueMessages(t, db, fx.FixtureQueue), 1)

	fx.Exec(t, db, "drop view public.blocks_drop")
	fx.Exec(t, db, "select pgflow.delete_flow_and_data('keep')")
	require.Zero(t, count(t, db, "select 1 from pgflow.flows"))
	require.Empty(t, listed(t, db, fx.FixtureQueue))
}

// The optional pruning helper deletes pruned tasks' messages from the queues the tasks stored, and prunes the
// archives of the flows' persisted routes only.
func TestPruneUsesTaskSnapshotsAndRoutes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	prune, err := schema.OptionalSQL("prune_data_older_than")
	require.NoError(t, err)
	fx.Exec(t, db, prune)
	d := routedFlow(t, db, "pr",
		"select pgflow.create_flow('pr', max_attempts => 1)",
		"select pgflow.add_step('pr', 'a')")
	age := func(runID string) {
		fx.Exec(t, db, `update pgflow.runs set started_at = started_at - interval '30 days',
			completed_at = completed_at - interval '30 days', failed_at = failed_at - interval '30 days' where run_id = $1`, runID)
	}

	// Old completed run: its message is in the fixture queue's archive, aged.
	done := fx.StartFlow(t, db, "pr", `{}`)
	require.Len(t, fx.ReadAndStartFrom(t, db, "pr", fx.FixtureQueue, 30, 10), 1)
	fx.CompleteTask(t, db, done.RunID, "a", 0, `1`)
	doneID := *fx.GetTask(t, db, done.RunID, "a", 0).MessageID
	age(done.RunID)
	fx.Exec(t, db, "update pgmq.a_fixture_q set archived_at = archived_at - interval '30 days'")

	// Old failed run whose message is still queued in the fixture queue.
	failed := fx.StartFlow(t, db, "pr", `{}`)
	failedID := *fx.GetTask(t, db, failed.RunID, "a", 0).MessageID
	fx.Exec(t, db, "update pgflow.runs set status = 'failed', failed_at = now() where run_id = $1", failed.RunID)
	age(failed.RunID)

	// An old archived message in the flow-named queue, which is no longer one of the flow's routes.
	stray := fx.Val[int64](t, db, `select pgmq.send('pr', '{"stray": true}')`)
	fx.Exec(t, db, "select pgmq.archive('pr', $1::bigint)", stray)
	fx.Exec(t, db, "update pgmq.a_pr set archived_at = archived_at - interval '30 days'")

	fx.Exec(t, db, "select pgflow.prune_data_older_than(interval '7 days')")
	require.Zero(t, count(t, db, "select 1 from pgflow.runs"))
	require.False(t, fx.InArchive(t, db, fx.FixtureQueue, doneID), "old archive rows of the route are pruned")
	require.False(t, fx.InQueue(t, db, fx.FixtureQueue, failedID), "the pruned task's message is deleted from its stored queue")
	require.False(t, fx.InArchive(t, db, fx.FixtureQueue, failedID), "deleted, not archived")
	require.True(t, fx.InArchive(t, db, "pr", stray), "archives of queues that are not routes are not pruned")
	d.requireUntouched(t, db)
}
