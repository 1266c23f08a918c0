package queueidentity_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// Every test here routes all steps of its flow to the fixture queue, so the flow-named queue holds only decoys with
// the same ids as the task messages. Each operation must hit the fixture queue (the task's stored queue) and leave
// every decoy exactly as it was.

func TestClaimAndCompleteUseStoredQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := routedFlow(t, db, "cq",
		"select pgflow.create_flow('cq', timeout => 30)",
		"select pgflow.add_step('cq', 'a')",
		"select pgflow.add_step('cq', 'b', array['a'])")
	run := fx.StartFlow(t, db, "cq", `{}`)

	claimed := fx.ReadAndStartFrom(t, db, "cq", fx.FixtureQueue, 5, 10)
	require.Len(t, claimed, 1)
	aID := claimed[0].MsgID
	require.Greater(t, fx.VisibleIn(t, db, fx.FixtureQueue, aID), 25.0, "claim visibility: timeout 30 + 2 s")
	d.requireUntouched(t, db)

	fx.CompleteTask(t, db, run.RunID, "a", 0, `1`)
	require.True(t, fx.InArchive(t, db, fx.FixtureQueue, aID), "completion archived from the stored queue")
	bID := *fx.GetTask(t, db, run.RunID, "b", 0).MessageID
	require.True(t, fx.InQueue(t, db, fx.FixtureQueue, bID), "the dependent's message went to its route")
	require.Len(t, fx.StartTasksFrom(t, db, "cq", fx.FixtureQueue, []int64{bID}, fx.DefaultWorker), 1)
	fx.CompleteTask(t, db, run.RunID, "b", 0, `2`)
	require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
	require.Equal(t, []int64{aID, bID}, fx.MessageIDs(fx.ArchivedMessages(t, db, fx.FixtureQueue)))
	d.requireUntouched(t, db)
}

func TestFailRetryUsesStoredQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := routedFlow(t, db, "rq",
		"select pgflow.create_flow('rq', max_attempts => 3, base_delay => 100)",
		"select pgflow.add_step('rq', 'a')")
	run := fx.StartFlow(t, db, "rq", `{}`)
	claimed := fx.ReadAndStartFrom(t, db, "rq", fx.FixtureQueue, 1, 10)
	require.Len(t, claimed, 1)

	require.Equal(t, "queued", fx.FailTask(t, db, run.RunID, "a", 0, "again").Status)
	in := fx.VisibleIn(t, db, fx.FixtureQueue, claimed[0].MsgID)
	require.Greater(t, in, 190.0, "retry delay calculate_retry_delay(100, 1) = 200 s set on the stored queue")
	require.LessOrEqual(t, in, 200.0)
	d.requireUntouched(t, db)
}

func TestExhaustionArchivesFromStoredQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := routedFlow(t, db, "ex",
		"select pgflow.create_flow('ex', max_attempts => 1)",
		"select pgflow.add_step('ex', 'a')",
		"select pgflow.add_step('ex', 'b')",
		"select pgflow.add_step('ex', 'c')")
	run := fx.StartFlow(t, db, "ex", `{}`)
	require.Len(t, fx.ReadAndStartFrom(t, db, "ex", fx.FixtureQueue, 30, 2), 2) // a and b started, c queued

	fx.FailTask(t, db, run.RunID, "a", 0, "fatal")
	require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)
	require.Empty(t, fx.QueueMessages(t, db, fx.FixtureQueue), "the task's and the run's messages left the stored queue")
	require.Len(t, fx.ArchivedMessages(t, db, fx.FixtureQueue), 3)
	d.requireUntouched(t, db)
}

func TestSkipAndCascadeArchiveFromStoredQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := routedFlow(t, db, "sk",
		"select pgflow.create_flow('sk', max_attempts => 1)",
		"select pgflow.add_step('sk', 'm', step_type => 'map', when_exhausted => 'skip-cascade')",
		"select pgflow.add_step('sk', 'after', array['m'])",
		"select pgflow.add_step('sk', 'x')")

	// fail_task's skip: the sibling task's message is archived from its stored queue.
	run := fx.StartFlow(t, db, "sk", `[1, 2]`)
	require.Len(t, fx.ReadAndStartFrom(t, db, "sk", fx.FixtureQueue, 30, 10), 3)
	sibling := *fx.GetTask(t, db, run.RunID, "m", 1).MessageID
	fx.FailTask(t, db, run.RunID, "m", 0, "boom")
	require.Equal(t, "skipped", fx.GetStep(t, db, run.RunID, "m").Status)
	require.Equal(t, "skipped", fx.GetStep(t, db, run.RunID, "after").Status)
	require.True(t, fx.InArchive(t, db, fx.FixtureQueue, sibling))
	d.requireUntouched(t, db)

	// The force-skip cascade (cancel) archives the skipped steps' messages from their stored queue.
	run2 := fx.StartFlow(t, db, "sk", `[1]`)
	xID := *fx.GetTask(t, db, run2.RunID, "x", 0).MessageID
	mID := *fx.GetTask(t, db, run2.RunID, "m", 0).MessageID
	require.Equal(t, 2, fx.Val[int](t, db, "select pgflow._cascade_force_skip_steps($1, 'm', 'cancelled')", run2.RunID))
	require.True(t, fx.InArchive(t, db, fx.FixtureQueue, mID))
	require.True(t, fx.InQueue(t, db, fx.FixtureQueue, xID))
	require.Equal(t, 1, fx.Val[int](t, db, "select pgflow._cascade_force_skip_steps($1, 'x', 'cancelled')", run2.RunID))
	require.True(t, fx.InArchive(t, db, fx.FixtureQueue, xID))
	d.requireUntouched(t, db)
}

func TestConditionFailArchivesFromStoredQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := routedFlow(t, db, "cf",
		"select pgflow.create_flow('cf')",
		"select pgflow.add_step('cf', 'a')",
		"select pgflow.add_step('cf', 'b')",
		`select pgflow.add_step('cf', 'c', array['b'], required_input_pattern => '{"b": {"ok": true}}', when_unmet => 'fail')`)
	run := fx.StartFlow(t, db, "cf", `{}`)
	require.Len(t, fx.ReadAndStartFrom(t, db, "cf", fx.FixtureQueue, 30, 10), 2)

	fx.CompleteTask(t, db, run.RunID, "b", 0, `{"ok": false}`)
	require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)
	require.Equal(t, "failed", fx.GetStep(t, db, run.RunID, "c").Status)
	require.Empty(t, fx.QueueMessages(t, db, fx.FixtureQueue), "a's started message was archived from its stored queue")
	require.Len(t, fx.ArchivedMessages(t, db, fx.FixtureQueue), 2)
	d.requireUntouched(t, db)
}

func TestLateCallbacksArchiveFromStoredQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := routedFlow(t, db, "lc",
		"select pgflow.create_flow('lc')",
		"select pgflow.add_step('lc', 'a')",
		"select pgflow.add_step('lc', 'b')")
	run := fx.StartFlow(t, db, "lc", `{}`)
	require.Len(t, fx.ReadAndStartFrom(t, db, "lc", fx.FixtureQueue, 30, 10), 2)
	// Both steps end without their tasks' messages being cleaned up (as after a replayed or late delivery).
	fx.Exec(t, db, `update pgflow.step_states set status = 'failed', failed_at = now(), error_message = 'elsewhere'
		where run_id = $1`, run.RunID)

	aID := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID
	bID := *fx.GetTask(t, db, run.RunID, "b", 0).MessageID
	require.Equal(t, "started", fx.CompleteTask(t, db, run.RunID, "a", 0, `1`).Status)
	require.True(t, fx.InArchive(t, db, fx.FixtureQueue, aID), "late completion archived from the stored queue")
	require.True(t, fx.InQueue(t, db, fx.FixtureQueue, bID))
	require.Equal(t, "started", fx.FailTask(t, db, run.RunID, "b", 0, "late").Status)
	require.True(t, fx.InArchive(t, db, fx.FixtureQueue, bID), "late failure archived from the stored queue")
	d.requireUntouched(t, db)
}

func TestTypeViolationArchivesFromStoredQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := routedFlow(t, db, "tv",
		"select pgflow.create_flow('tv')",
		"select pgflow.add_step('tv', 'a')",
		"select pgflow.add_step('tv', 'm', array['a'], step_type => 'map')",
		"select pgflow.add_step('tv', 'b')")
	run := fx.StartFlow(t, db, "tv", `{}`)
	require.Len(t, fx.ReadAndStartFrom(t, db, "tv", fx.FixtureQueue, 30, 1), 1) // a started, b still queued

	row := fx.CompleteTask(t, db, run.RunID, "a", 0, `{"not": "an array"}`)
	require.Equal(t, "failed", row.Status)
	require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)
	require.Empty(t, fx.QueueMessages(t, db, fx.FixtureQueue))
	require.Len(t, fx.ArchivedMessages(t, db, fx.FixtureQueue), 2)
	d.requireUntouched(t, db)
}

func TestRequeueStalledUsesStoredQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := routedFlow(t, db, "rs",
		"select pgflow.create_flow('rs', timeout => 10)",
		"select pgflow.add_step('rs', 'a')",
		"select pgflow.add_step('rs', 'g')")
	run := fx.StartFlow(t, db, "rs", `{}`)
	require.Len(t, fx.ReadAndStartFrom(t, db, "rs", fx.FixtureQueue, 300, 10), 2)
	stall := func(step string, requeued int) {
		fx.Exec(t, db, `update pgflow.step_tasks set started_at = now() - interval '41 seconds',
			queued_at = now() - interval '41 seconds', requeued_count = $3 where run_id = $1 and step_slug = $2`,
			run.RunID, step, requeued)
	}

	// Requeue: the message becomes visible at once, in the stored queue.
	stall("a", 0)
	require.Equal(t, 1, fx.Val[int](t, db, "select pgflow.requeue_stalled_tasks()"))
	aID := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID
	require.LessOrEqual(t, fx.VisibleIn(t, db, fx.FixtureQueue, aID), 0.0)
	d.requireUntouched(t, db)

	// Give-up: the task fails through fail_task, which archives from the stored queue.
	stall("g", 3)
	require.Equal(t, 0, fx.Val[int](t, db, "select pgflow.requeue_stalled_tasks()"))
	require.Equal(t, "failed", fx.GetTask(t, db, run.RunID, "g", 0).Status)
	require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)
	require.Empty(t, fx.QueueMessages(t, db, fx.FixtureQueue))
	require.Len(t, fx.ArchivedMessages(t, db, fx.FixtureQueue), 2)
	d.requireUntouched(t, db)
}

// Concurrent claimers naming the same ids of the stored queue still get each task exactly once.
func TestConcurrentClaimsFromStoredQueueClaimOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := routedFlow(t, db, "cc",
		"select pgflow.create_flow('cc')",
		"select pgflow.add_step('cc', 'm', step_type => 'map')")
	run := fx.StartFlow(t, db, "cc", `[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]`)
	ids := fx.ReadMessages(t, db, fx.FixtureQueue, 30, 100)
	require.Len(t, ids, 16)

	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		seen = map[int64]int{}
		errs []error
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tasks, err := fx.TryStartTasksFrom(context.Background(), db, "cc", fx.FixtureQueue, ids, fx.DefaultWorker)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			for _, tk := range tasks {
				seen[tk.MsgID]++
			}
		}()
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, seen, 16)
	for id, n := range seen {
		require.Equal(t, 1, n, "message %d claimed %d times", id, n)
	}
	require.Equal(t, 16, count(t, db, "select 1 from pgflow.step_tasks where run_id = $1 and status = 'started' and attempts_count = 1", run.RunID))
	d.requireUntouched(t, db)
}

// The terminal-state guards of the callbacks still hold for routed tasks, and they leave the stored queue alone.
func TestTerminalStateGuardsWithStoredQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	d := routedFlow(t, db, "tg",
		"select pgflow.create_flow('tg', base_delay => 50)",
		"select pgflow.add_step('tg', 'a')",
		"select pgflow.add_step('tg', 'b')")
	run := fx.StartFlow(t, db, "tg", `{}`)
	aID := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID
	before := messageState(t, db, fx.FixtureQueue, aID)

	// Callbacks for a task that is still queued change nothing and touch no message.
	require.Equal(t, "queued", fx.CompleteTask(t, db, run.RunID, "a", 0, `1`).Status)
	require.Equal(t, "queued", fx.FailTask(t, db, run.RunID, "a", 0, "no").Status)
	require.Equal(t, before, messageState(t, db, fx.FixtureQueue, aID))

	// A completed task stays completed on a replay; its archived message stays archived.
	require.Len(t, fx.StartTasksFrom(t, db, "tg", fx.FixtureQueue, []int64{aID}, fx.DefaultWorker), 1)
	fx.CompleteTask(t, db, run.RunID, "a", 0, `"first"`)
	require.Equal(t, `"first"`, fx.CompleteTask(t, db, run.RunID, "a", 0, `"second"`).Output)
	require.Equal(t, "completed", fx.FailTask(t, db, run.RunID, "a", 0, "late").Status)
	require.True(t, fx.InArchive(t, db, fx.FixtureQueue, aID))
	require.Equal(t, 1, fx.GetRun(t, db, run.RunID).RemainingSteps)
	d.requireUntouched(t, db)
}
