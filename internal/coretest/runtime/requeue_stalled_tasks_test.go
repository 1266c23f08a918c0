package runtime_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// backdate pretends the task started `seconds` ago.
func backdate(t *testing.T, db fx.DB, runID, step string, seconds int) {
	t.Helper()
	fx.Exec(t, db, `update pgflow.step_tasks set started_at = now() - make_interval(secs => $3),
		queued_at = least(queued_at, now() - make_interval(secs => $3))
		where run_id = $1 and step_slug = $2`, runID, step, seconds)
}

func requeue(t *testing.T, db fx.DB) int {
	t.Helper()
	return fx.Val[int](t, db, "select pgflow.requeue_stalled_tasks()")
}

func TestRequeueStalledTasksRequeues(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', timeout => 10)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'stalled')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'fresh')")
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 2)
	backdate(t, db, run.RunID, "stalled", 41) // timeout 10 + 30 < 41
	backdate(t, db, run.RunID, "fresh", 39)   // not yet

	require.Equal(t, 1, requeue(t, db))
	tk := fx.GetTask(t, db, run.RunID, "stalled", 0)
	require.Equal(t, "queued", tk.Status)
	require.Nil(t, tk.StartedAt)
	require.Nil(t, tk.LastWorkerID)
	require.Equal(t, 1, tk.RequeuedCount)
	require.NotNil(t, tk.LastRequeuedAt)
	require.Equal(t, 1, tk.AttemptsCount, "attempts are not reset")
	require.LessOrEqual(t, fx.VisibleIn(t, db, "f", *tk.MessageID), 0.0, "the message is visible at once")
	require.Equal(t, "started", fx.GetTask(t, db, run.RunID, "fresh", 0).Status)

	// The requeued task is claimed again and uses its next attempt.
	again := fx.ReadAndStart(t, db, "f", 30, 10)
	require.Len(t, again, 1)
	require.Equal(t, "stalled", again[0].StepSlug)
	require.Equal(t, 2, fx.GetTask(t, db, run.RunID, "stalled", 0).AttemptsCount)
	require.Equal(t, 0, requeue(t, db), "nothing stalled any more")
}

// Fix of upstream pgflow: the effective step timeout (step opt_timeout, else flow) is used, not the flow's.
func TestRequeueStalledTasksUsesStepTimeout(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', timeout => 60)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'short', timeout => 5)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'long', timeout => 300)")
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 2)
	backdate(t, db, run.RunID, "short", 40) // 5 + 30 < 40 < 60 + 30
	backdate(t, db, run.RunID, "long", 100) // 60 + 30 < 100 < 300 + 30

	require.Equal(t, 1, requeue(t, db))
	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "short", 0).Status)
	require.Equal(t, "started", fx.GetTask(t, db, run.RunID, "long", 0).Status)
}

func TestRequeueStalledTasksIgnoresTerminalRunsAndSteps(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', timeout => 1, max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'boom')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'orphan')")
	run := fx.StartFlow(t, db, "f", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 2)
	fx.FailTask(t, db, run.RunID, "boom", 0, "x")
	backdate(t, db, run.RunID, "orphan", 1000)
	require.Equal(t, 0, requeue(t, db))
	o := fx.GetTask(t, db, run.RunID, "orphan", 0)
	require.Equal(t, "cancelled", o.Status, "the run's failure cancelled it")
	require.Equal(t, 0, o.RequeuedCount)
	require.Nil(t, o.PermanentlyStalledAt)
}

// Fix of upstream pgflow: after 3 requeues a stalled task fails through the ordinary failure path instead of
// leaving its run 'started' forever.
func TestRequeueStalledTasksGivesUpThroughFailurePath(t *testing.T) {
	t.Parallel()
	cases := []struct {
		whenExhausted string
		runStatus     string
		stepStatus    string
	}{
		{"fail", "failed", "failed"},
		{"skip", "completed", "skipped"},
		{"skip-cascade", "completed", "skipped"},
	}
	for _, c := range cases {
		t.Run(c.whenExhausted, func(t *testing.T) {
			t.Parallel()
			db := newDB(t).Pool
			fx.InstallRealtime(t, db)
			// max_attempts is high: giving up does not depend on attempts left.
			fx.Exec(t, db, "select pgflow.create_flow('f', timeout => 2, max_attempts => 50)")
			fx.Exec(t, db, "select pgflow.add_step('f', 'hang', when_exhausted => $1)", c.whenExhausted)
			run := fx.StartFlow(t, db, "f", `{}`)
			msg := *fx.GetTask(t, db, run.RunID, "hang", 0).MessageID

			for i := 1; i <= 3; i++ {
				require.Len(t, fx.ReadAndStart(t, db, "f", 30, 1), 1, "claim %d", i)
				backdate(t, db, run.RunID, "hang", 33)
				require.Equal(t, 1, requeue(t, db), "requeue %d", i)
				require.Equal(t, i, fx.GetTask(t, db, run.RunID, "hang", 0).RequeuedCount)
				require.Equal(t, "started", fx.GetRun(t, db, run.RunID).Status)
			}
			require.Len(t, fx.ReadAndStart(t, db, "f", 30, 1), 1)
			backdate(t, db, run.RunID, "hang", 33)
			require.Equal(t, 0, requeue(t, db), "a task given up is not counted as requeued")

			tk := fx.GetTask(t, db, run.RunID, "hang", 0)
			require.Equal(t, "failed", tk.Status)
			require.NotNil(t, tk.PermanentlyStalledAt)
			require.NotNil(t, tk.ErrorMessage)
			require.True(t, strings.HasPrefix(*tk.ErrorMessage, "Task stalled"), *tk.ErrorMessage)
			require.Equal(t, 3, tk.RequeuedCount)
			require.Equal(t, 4, tk.AttemptsCount)
			require.False(t, fx.InQueue(t, db, "f", msg), "the message is archived")
			require.True(t, fx.InArchive(t, db, "f", msg))

			st := fx.GetStep(t, db, run.RunID, "hang")
			require.Equal(t, c.stepStatus, st.Status)
			require.Equal(t, tk.ErrorMessage, st.ErrorMessage)
			require.Equal(t, c.runStatus, fx.GetRun(t, db, run.RunID).Status)
			evs := fx.FilterEvents(fx.RealtimeEvents(t, db, run.RunID), "step:"+c.stepStatus, "hang")
			require.Len(t, evs, 1, "the failure path emitted its event")

			require.Equal(t, 0, requeue(t, db))
		})
	}
}

// Recovery racing a late completion of the same stalled task: exactly one of them wins and the state stays
// consistent (completed and archived, or requeued with the completion ignored).
func TestRequeueStalledTasksRacingCompletion(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', timeout => 1)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	fx.EnsureWorker(t, db, "f", fx.DefaultWorker)
	for round := 0; round < 10; round++ {
		run := fx.StartFlow(t, db, "f", `{}`)
		id := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID
		require.Len(t, fx.StartTasks(t, db, "f", []int64{id}, fx.DefaultWorker), 1)
		backdate(t, db, run.RunID, "a", 60)

		var wg sync.WaitGroup
		var cErr, rErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, cErr = db.Exec(context.Background(), "select pgflow.complete_task($1, 'a', 0, '1'::jsonb)", run.RunID)
		}()
		go func() {
			defer wg.Done()
			_, rErr = db.Exec(context.Background(), "select pgflow.requeue_stalled_tasks()")
		}()
		wg.Wait()
		require.NoError(t, cErr)
		require.NoError(t, rErr)
		tk := fx.GetTask(t, db, run.RunID, "a", 0)
		switch tk.Status {
		case "completed":
			require.Equal(t, 0, tk.RequeuedCount)
			require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
			require.True(t, fx.InArchive(t, db, "f", id))
		case "queued":
			require.Equal(t, 1, tk.RequeuedCount)
			require.Empty(t, tk.Output, "the completion after the requeue was ignored")
			require.Equal(t, "started", fx.GetRun(t, db, run.RunID).Status)
			require.True(t, fx.InQueue(t, db, "f", id))
			// Finish the run so the next round's requeue sees only its own task.
			require.Len(t, fx.StartTasks(t, db, "f", []int64{id}, fx.DefaultWorker), 1)
			fx.CompleteTask(t, db, run.RunID, "a", 0, `1`)
		default:
			t.Fatalf("round %d: task ended %s", round, tk.Status)
		}
	}
}

// Stalled-task recovery finds started tasks through the runs in progress (step_tasks has no index on status or
// started_at, so that claims and completions are heap-only updates): a history of finished runs adds nothing to
// what it reads, also with statistics taken while the tables were empty.
func TestRequeueStalledTasksReadsTheRunsInProgressNotTheHistory(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	ctx := fx.Ctx(t)
	fx.Exec(t, db, "select pgflow.create_flow('f', timeout => 10)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'only')")
	fx.EnsureWorker(t, db, "f", fx.DefaultWorker)
	freezeStatistics(t, db, "pgflow.runs", "pgflow.step_states", "pgflow.step_tasks")

	// A history of 2,000 finished runs.
	fx.Exec(t, db, `select pgflow.start_flows('f', array(select '{}'::jsonb from generate_series(1, 2000)))`)
	require.Equal(t, 2000, claimAndComplete(t, db, "f", "", fx.DefaultWorker, 2000))
	require.Equal(t, 2000, fx.Val[int](t, db, `select count(*)::int from pgflow.runs where status = 'completed'`))

	// Three runs in progress, one of whose tasks stalled.
	var runs []string
	for range 3 {
		runs = append(runs, fx.StartFlow(t, db, "f", `{}`).RunID)
	}
	require.Len(t, fx.ReadAndStart(t, db, "f", 30, 10), 3)
	backdate(t, db, runs[0], "only", 41)

	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // the transaction's counters are what is read
	before := tuplesRead(t, tx)
	require.Equal(t, 1, fx.Val[int](t, tx, "select pgflow.requeue_stalled_tasks()"))
	requireReadAtMost(t, tx, before, 20, "requeue_stalled_tasks with 3 runs in progress and 2,000 finished")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "queued", fx.GetTask(t, db, runs[0], "only", 0).Status)
}
