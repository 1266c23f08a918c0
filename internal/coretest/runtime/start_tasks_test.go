package runtime_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

func TestStartTasksClaimsQueuedTasks(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	run := fx.StartFlow(t, db, "sequential", `{"n": 7}`)

	tasks := fx.ReadAndStart(t, db, "sequential", 5, 10)
	require.Len(t, tasks, 1)
	tk := tasks[0]
	require.Equal(t, "sequential", tk.FlowSlug)
	require.Equal(t, run.RunID, tk.RunID)
	require.Equal(t, "first", tk.StepSlug)
	require.Equal(t, "{}", tk.Input, "a root step's input has no dependency keys")
	require.Equal(t, fx.JSON(t, db, `{"n": 7}`), tk.FlowInput, "a root single step gets the run input as flow_input")
	require.Equal(t, 0, tk.TaskIndex)

	row := fx.GetTask(t, db, run.RunID, "first", 0)
	require.Equal(t, "started", row.Status)
	require.Equal(t, 1, row.AttemptsCount)
	require.NotNil(t, row.StartedAt)
	require.Equal(t, ptr(fx.DefaultWorker), row.LastWorkerID)
	require.Equal(t, *row.MessageID, tk.MsgID)

	// Claiming the same id again claims nothing and uses no attempt.
	require.Empty(t, fx.StartTasks(t, db, "sequential", []int64{tk.MsgID}, fx.DefaultWorker))
	require.Equal(t, 1, fx.GetTask(t, db, run.RunID, "first", 0).AttemptsCount)
}

func TestStartTasksInputs(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'b')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'both', array['a', 'b'])")
	fx.Exec(t, db, "select pgflow.add_step('f', 'each', array['a'], step_type => 'map')")
	run := fx.StartFlow(t, db, "f", `{"flow": "input"}`)

	roots := fx.ReadAndStart(t, db, "f", 30, 10)
	require.Len(t, roots, 2)
	fx.CompleteTask(t, db, run.RunID, "a", 0, `[10, {"x": null}, null]`)
	fx.CompleteTask(t, db, run.RunID, "b", 0, `"bee"`)

	tasks := fx.ReadAndStart(t, db, "f", 30, 10)
	byKey := map[string]fx.Task{}
	for _, tk := range tasks {
		byKey[tk.StepSlug+"/"+string(rune('0'+tk.TaskIndex))] = tk
	}
	require.Len(t, tasks, 4)
	require.Equal(t, fx.JSON(t, db, `{"a": [10, {"x": null}, null], "b": "bee"}`), byKey["both/0"].Input)
	require.Empty(t, byKey["both/0"].FlowInput, "a dependent step's flow_input is NULL (workers load it lazily)")
	require.Equal(t, "10", byKey["each/0"].Input)
	require.Equal(t, fx.JSON(t, db, `{"x": null}`), byKey["each/1"].Input)
	require.Equal(t, "null", byKey["each/2"].Input, "a JSON null element is delivered as JSON null")
	for _, i := range []string{"0", "1", "2"} {
		require.Empty(t, byKey["each/"+i].FlowInput, "map tasks get no flow_input")
	}
}

func TestStartTasksRootMapInputs(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', step_type => 'map')")
	fx.StartFlow(t, db, "f", `[[1, 2], {"k": "v"}, "s"]`)
	tasks := fx.ReadAndStart(t, db, "f", 30, 10)
	require.Len(t, tasks, 3)
	want := []string{"[1, 2]", `{"k": "v"}`, `"s"`}
	for _, tk := range tasks {
		require.Equal(t, want[tk.TaskIndex], tk.Input)
		require.Empty(t, tk.FlowInput)
	}
}

func TestStartTasksOnlyEligibleTasks(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	fx.SetupFlow(t, db, "sequential_other")
	fx.EnsureWorker(t, db, "sequential", fx.DefaultWorker)

	// A task of a failed run is not claimed.
	failed := fx.StartFlow(t, db, "sequential", `{}`)
	fid := *fx.GetTask(t, db, failed.RunID, "first", 0).MessageID
	fx.Exec(t, db, "update pgflow.runs set status = 'failed', failed_at = now() where run_id = $1", failed.RunID)
	require.Empty(t, fx.StartTasks(t, db, "sequential", []int64{fid}, fx.DefaultWorker))

	// A task of a skipped step is not claimed.
	skipped := fx.StartFlow(t, db, "sequential", `{}`)
	sid := *fx.GetTask(t, db, skipped.RunID, "first", 0).MessageID
	fx.Exec(t, db, `update pgflow.step_states set status = 'skipped', skip_reason = 'condition_unmet',
		skipped_at = now(), remaining_tasks = null where run_id = $1 and step_slug = 'first'`, skipped.RunID)
	require.Empty(t, fx.StartTasks(t, db, "sequential", []int64{sid}, fx.DefaultWorker))

	// The message id of another flow's task is not claimed through this flow.
	other := fx.StartFlow(t, db, "other", `{}`)
	oid := *fx.GetTask(t, db, other.RunID, "first", 0).MessageID
	require.Empty(t, fx.StartTasks(t, db, "sequential", []int64{oid}, fx.DefaultWorker))
	require.Equal(t, "queued", fx.GetTask(t, db, other.RunID, "first", 0).Status)

	// Unknown ids, NULL and empty arrays claim nothing.
	require.Empty(t, fx.StartTasks(t, db, "sequential", []int64{999999}, fx.DefaultWorker))
	require.Empty(t, fx.StartTasks(t, db, "sequential", []int64{}, fx.DefaultWorker))
	require.Equal(t, 0, fx.Val[int](t, db, "select count(*)::int from pgflow.start_tasks('sequential', null, $1)", fx.DefaultWorker))

	for _, r := range []string{failed.RunID, skipped.RunID, other.RunID} {
		tk := fx.GetTasks(t, db, r, "first")[0]
		require.Equal(t, "queued", tk.Status)
		require.Equal(t, 0, tk.AttemptsCount)
	}
}

func TestStartTasksUnknownWorkerIsRejected(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	run := fx.StartFlow(t, db, "sequential", `{}`)
	id := *fx.GetTask(t, db, run.RunID, "first", 0).MessageID
	_, err := fx.TryStartTasks(fx.Ctx(t), db, "sequential", []int64{id}, "22222222-2222-2222-2222-222222222222")
	requirePgError(t, err, "23503",
		`insert or update on table "step_tasks" violates foreign key constraint "step_tasks_last_worker_id_fkey"`)
	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "first", 0).Status)
}

// Fix of upstream pgflow: start_tasks really sets the visibility of each claimed message to the effective step
// timeout + 2 s (upstream's statement for it never ran, so messages kept the worker's read vt).
func TestStartTasksSetsVisibilityToTimeoutPlusTwo(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', timeout => 40)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'flow_timeout')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'step_timeout', timeout => 300)")
	run := fx.StartFlow(t, db, "f", `{}`)
	flowMsg := *fx.GetTask(t, db, run.RunID, "flow_timeout", 0).MessageID
	stepMsg := *fx.GetTask(t, db, run.RunID, "step_timeout", 0).MessageID

	// Read with vt 1 s, claim only one of them: the other keeps the read vt.
	ids := fx.ReadMessages(t, db, "f", 1, 10)
	require.ElementsMatch(t, []int64{flowMsg, stepMsg}, ids)
	fx.EnsureWorker(t, db, "f", fx.DefaultWorker)
	claimed := fx.StartTasks(t, db, "f", []int64{stepMsg}, fx.DefaultWorker)
	require.Len(t, claimed, 1)
	require.InDelta(t, 302, fx.VisibleIn(t, db, "f", stepMsg), 3, "step timeout 300 + 2")
	require.Less(t, fx.VisibleIn(t, db, "f", flowMsg), 2.0, "an unclaimed message keeps the vt of the read")

	claimed = fx.StartTasks(t, db, "f", []int64{flowMsg}, fx.DefaultWorker)
	require.Len(t, claimed, 1)
	require.InDelta(t, 42, fx.VisibleIn(t, db, "f", flowMsg), 3, "flow timeout 40 + 2")

	// A call that claims nothing changes no visibility.
	fx.Exec(t, db, "select pgflow.set_vt_batch('f', array[$1::bigint], array[0])", stepMsg)
	require.Empty(t, fx.StartTasks(t, db, "f", []int64{stepMsg}, fx.DefaultWorker))
	require.LessOrEqual(t, fx.VisibleIn(t, db, "f", stepMsg), 0.5)
}

// Two workers racing with the same message ids: every task is claimed exactly once.
func TestStartTasksConcurrentClaimersClaimEachTaskOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('race')")
	fx.Exec(t, db, "select pgflow.add_step('race', 'm', step_type => 'map')")
	const workers = 4
	const tasksPerRound = 50
	ws := []string{
		"aaaaaaaa-0000-0000-0000-000000000001", "aaaaaaaa-0000-0000-0000-000000000002",
		"aaaaaaaa-0000-0000-0000-000000000003", "aaaaaaaa-0000-0000-0000-000000000004",
	}
	for _, w := range ws {
		fx.EnsureWorker(t, db, "race", w)
	}
	for round := 0; round < 10; round++ {
		run := fx.Val[string](t, db,
			"select run_id::text from pgflow.start_flow('race', (select jsonb_agg(i) from generate_series(1, $1) i))",
			tasksPerRound)
		ids := fx.Val[[]int64](t, db, "select array_agg(message_id order by message_id) from pgflow.step_tasks where run_id = $1", run)

		var wg sync.WaitGroup
		results := make([][]fx.Task, workers)
		errs := make([]error, workers)
		start := make(chan struct{})
		for i := 0; i < workers; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-start
				results[i], errs[i] = fx.TryStartTasks(context.Background(), db, "race", ids, ws[i])
			}(i)
		}
		close(start)
		wg.Wait()

		seen := map[int64]int{}
		for i := range results {
			require.NoError(t, errs[i])
			for _, tk := range results[i] {
				seen[tk.MsgID]++
			}
		}
		require.Len(t, seen, tasksPerRound, "round %d: every task is claimed", round)
		for id, n := range seen {
			require.Equal(t, 1, n, "round %d: message %d claimed %d times", round, id, n)
		}
		require.Equal(t, 0, fx.Val[int](t, db,
			"select count(*)::int from pgflow.step_tasks where run_id = $1 and attempts_count <> 1", run),
			"round %d: a task claimed once has used exactly one attempt", round)
		// Each returned row was claimed by the worker that got it.
		for i := range results {
			for _, tk := range results[i] {
				require.Equal(t, ws[i], fx.Val[string](t, db,
					"select last_worker_id::text from pgflow.step_tasks where message_id = $1 and flow_slug = 'race'", tk.MsgID))
			}
		}
	}
}
