package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// A run whose middle step failed resumes in place: the completed first step keeps its state, output and task row
// (its handler is not run again), the failed step gets a fresh attempt on its row (attempt numbers keep counting,
// the budget starts again), the skipped last step waits for it again, and the run completes through the ordinary
// SQL path with the stored output of the first step as input of the second. A report of the attempt from before
// the retry changes nothing.
func TestRetryRunResumesAFailedChain(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	db := d.Pool
	fx.InstallRealtime(t, db)
	fx.Exec(t, db, "select pgflow.create_flow('chain', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('chain', 'first')")
	fx.Exec(t, db, "select pgflow.add_step('chain', 'second', array['first'])")
	fx.Exec(t, db, "select pgflow.add_step('chain', 'last', array['second'])")
	run := fx.StartFlow(t, db, "chain", `{"n": 1}`)
	require.Len(t, fx.ReadAndStart(t, db, "chain", 30, 1), 1)
	fx.CompleteTask(t, db, run.RunID, "first", 0, `{"x": 1}`)
	require.Len(t, fx.ReadAndStart(t, db, "chain", 30, 1), 1)
	require.Equal(t, "failed", fx.FailTask(t, db, run.RunID, "second", 0, "bug").Status)
	require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)
	require.Equal(t, ptr("run_failed"), fx.GetStep(t, db, run.RunID, "last").SkipReason)

	firstState := rowJSON(t, db, "select to_jsonb(s) from pgflow.step_states s where run_id = $1::uuid and step_slug = 'first'", run.RunID)
	firstTask := rowJSON(t, db, "select to_jsonb(t) from pgflow.step_tasks t where run_id = $1::uuid and step_slug = 'first'", run.RunID)
	// The worker that claimed says it listens on its own channel: read-now wakes go to it alone.
	fx.Exec(t, db, `select pgflow.heartbeat_worker($1::uuid, listener_pid => pg_catalog.pg_backend_pid())`, fx.DefaultWorker)
	collect := channelNotifications(t, d.URL, "pgflow:queue:chain", workerChannel(fx.DefaultWorker))

	var status string
	var remaining int
	require.NoError(t, db.QueryRow(fx.Ctx(t), `select status, remaining_steps from pgflow.retry_run($1::uuid)
		where failed_at is null and cancelled_at is null`, run.RunID).Scan(&status, &remaining))
	require.Equal(t, "started", status)
	require.Equal(t, 2, remaining)
	require.Equal(t, []note{{workerChannel(fx.DefaultWorker), ""}}, collect(),
		"the restarted step's message wakes the queue's alive listening worker (the one that claimed before)")

	second := fx.GetStep(t, db, run.RunID, "second")
	require.Equal(t, "started", second.Status)
	require.Equal(t, ptr(1), second.RemainingTasks)
	require.Nil(t, second.ErrorMessage)
	require.Nil(t, second.FailedAt)
	task := fx.GetTask(t, db, run.RunID, "second", 0)
	require.Equal(t, "queued", task.Status)
	require.Equal(t, 1, task.AttemptsCount, "attempt numbers keep counting")
	require.Nil(t, task.ErrorMessage)
	require.Nil(t, task.FailedAt)
	require.NotNil(t, task.MessageID)
	require.True(t, fx.InQueue(t, db, "chain", *task.MessageID))
	last := fx.GetStep(t, db, run.RunID, "last")
	require.Equal(t, "created", last.Status)
	require.Equal(t, 1, last.RemainingDeps)
	require.Nil(t, last.SkipReason)
	require.Nil(t, last.SkippedAt)
	evs := fx.RealtimeEvents(t, db, run.RunID)
	started := fx.FilterEvents(evs, "run:started", "")
	require.Len(t, started, 2)
	require.Equal(t, true, started[1].Payload["retried"])
	require.Len(t, fx.FilterEvents(evs, "step:started", "second"), 2)

	// The attempt from before the retry is stale: queued, and later started with attempt 2.
	stale := fullState(t, db, run.RunID, "chain")
	require.Equal(t, "queued", fx.Val[string](t, db, "select status from pgflow.complete_task($1::uuid, 'second', 0, '1', 1)", run.RunID))
	require.Equal(t, stale, fullState(t, db, run.RunID, "chain"))
	claimed := fx.ReadAndStart(t, db, "chain", 30, 1)
	require.Len(t, claimed, 1)
	require.Equal(t, fx.JSON(t, db, `{"first": {"x": 1}}`), fx.JSON(t, db, claimed[0].Input), "the dependent sees the stored output")
	require.Equal(t, 2, fx.GetTask(t, db, run.RunID, "second", 0).AttemptsCount)
	stale = fullState(t, db, run.RunID, "chain")
	require.Equal(t, "started", fx.Val[string](t, db, "select status from pgflow.fail_task($1::uuid, 'second', 0, 'old', 1)", run.RunID))
	require.Equal(t, "stale", fx.Val[string](t, db,
		"select outcome from pgflow.complete_tasks(array[$1::uuid], array['second'], array[0], array['1'::jsonb], array[1])", run.RunID))
	require.Equal(t, stale, fullState(t, db, run.RunID, "chain"))

	require.Equal(t, "completed", fx.Val[string](t, db, "select status from pgflow.complete_task($1::uuid, 'second', 0, '2', 2)", run.RunID))
	require.Len(t, fx.ReadAndStart(t, db, "chain", 30, 1), 1)
	fx.CompleteTask(t, db, run.RunID, "last", 0, `3`)
	r := fx.GetRun(t, db, run.RunID)
	require.Equal(t, "completed", r.Status)
	require.Equal(t, fx.JSON(t, db, `{"last": 3}`), r.Output)
	require.Nil(t, r.FailedAt)
	require.Equal(t, firstState, rowJSON(t, db, "select to_jsonb(s) from pgflow.step_states s where run_id = $1::uuid and step_slug = 'first'", run.RunID))
	require.Equal(t, firstTask, rowJSON(t, db, "select to_jsonb(t) from pgflow.step_tasks t where run_id = $1::uuid and step_slug = 'first'", run.RunID))
}

// A fresh attempt has the step's whole budget again: with max_attempts 2 the retried task retries once more
// before it fails the run again.
func TestRetryRunGivesFreshAttempts(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('b', max_attempts => 2, base_delay => 0)")
	fx.Exec(t, db, "select pgflow.add_step('b', 'a')")
	run := fx.StartFlow(t, db, "b", `{}`)
	for i := 0; i < 2; i++ {
		require.Len(t, fx.ReadAndStart(t, db, "b", 30, 1), 1)
		fx.FailTask(t, db, run.RunID, "a", 0, "x")
	}
	require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)
	fx.Exec(t, db, "select pgflow.retry_run($1::uuid)", run.RunID)
	require.Len(t, fx.ReadAndStart(t, db, "b", 30, 1), 1)
	row := fx.FailTask(t, db, run.RunID, "a", 0, "y")
	require.Equal(t, "queued", row.Status, "attempt 3 is the first of the fresh budget")
	require.Equal(t, 3, row.AttemptsCount)
	require.Len(t, fx.ReadAndStart(t, db, "b", 30, 1), 1)
	require.Equal(t, "failed", fx.FailTask(t, db, run.RunID, "a", 0, "z").Status)
	require.Equal(t, "failed", fx.GetRun(t, db, run.RunID).Status)
}

// A cancelled run with a half-done map resumes: the map's completed task is kept (not run again), the others run
// again on their rows, the map's output is every task's output in index order, and the dependent runs on it.
func TestRetryRunResumesACancelledMap(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('mp')")
	fx.Exec(t, db, "select pgflow.add_step('mp', 'list')")
	fx.Exec(t, db, "select pgflow.add_step('mp', 'each', array['list'], step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('mp', 'sum', array['each'])")
	run := fx.StartFlow(t, db, "mp", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "mp", 30, 1), 1)
	fx.CompleteTask(t, db, run.RunID, "list", 0, `[10, 20, 30]`)
	require.Len(t, fx.ReadAndStart(t, db, "mp", 30, 2), 2) // each[0], each[1]
	fx.CompleteTask(t, db, run.RunID, "each", 0, `"a"`)
	each0 := rowJSON(t, db, "select to_jsonb(t) from pgflow.step_tasks t where run_id = $1::uuid and step_slug = 'each' and task_index = 0", run.RunID)
	fx.Exec(t, db, "select pgflow.cancel_run($1::uuid)", run.RunID)
	require.Empty(t, fx.QueueMessages(t, db, "mp"))

	fx.Exec(t, db, "select pgflow.retry_run($1::uuid)", run.RunID)
	st := fx.GetStep(t, db, run.RunID, "each")
	require.Equal(t, "started", st.Status)
	require.Equal(t, ptr(2), st.RemainingTasks)
	require.Equal(t, each0, rowJSON(t, db, "select to_jsonb(t) from pgflow.step_tasks t where run_id = $1::uuid and step_slug = 'each' and task_index = 0", run.RunID))
	require.Equal(t, "created", fx.GetStep(t, db, run.RunID, "sum").Status)
	require.Equal(t, "completed", fx.GetStep(t, db, run.RunID, "list").Status)

	claimed := fx.ReadAndStart(t, db, "mp", 30, 10)
	require.Len(t, claimed, 2, "only the unfinished map tasks run again")
	got := map[int]string{}
	for _, c := range claimed {
		require.Equal(t, "each", c.StepSlug)
		got[c.TaskIndex] = fx.JSON(t, db, c.Input)
	}
	require.Equal(t, map[int]string{1: "20", 2: "30"}, got)
	fx.CompleteTask(t, db, run.RunID, "each", 2, `"c"`)
	fx.CompleteTask(t, db, run.RunID, "each", 1, `"b"`)
	require.Equal(t, fx.JSON(t, db, `["a", "b", "c"]`), fx.GetStep(t, db, run.RunID, "each").Output)
	sum := fx.ReadAndStart(t, db, "mp", 30, 1)
	require.Len(t, sum, 1)
	require.Equal(t, fx.JSON(t, db, `{"each": ["a", "b", "c"]}`), fx.JSON(t, db, sum[0].Input))
	fx.CompleteTask(t, db, run.RunID, "sum", 0, `6`)
	require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
}

// A fresh retry starts a new run of the same flow with the same input, linked by retry_of; the original stays as
// it was. Runs that are started or completed cannot be retried (55000), unknown runs are P0002.
func TestRetryRunFreshAndRefusals(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('fr', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('fr', 'a')")
	run := fx.StartFlow(t, db, "fr", `{"k": [1, 2]}`)
	_, err := db.Exec(fx.Ctx(t), "select pgflow.retry_run($1::uuid)", run.RunID)
	requirePgError(t, err, "55000", "run "+run.RunID+" is started: only failed or cancelled runs can be retried")
	require.Len(t, fx.ReadAndStart(t, db, "fr", 30, 1), 1)
	fx.FailTask(t, db, run.RunID, "a", 0, "boom")
	before := fullRows(t, db, run.RunID)

	var newID, retryOf, input, status string
	require.NoError(t, db.QueryRow(fx.Ctx(t), `select run_id::text, retry_of::text, input::text, status
		from pgflow.retry_run($1::uuid, fresh => true)`, run.RunID).Scan(&newID, &retryOf, &input, &status))
	require.NotEqual(t, run.RunID, newID)
	require.Equal(t, run.RunID, retryOf)
	require.Equal(t, fx.JSON(t, db, `{"k": [1, 2]}`), input)
	require.Equal(t, "started", status)
	require.Equal(t, "queued", fx.GetTask(t, db, newID, "a", 0).Status)
	require.Equal(t, before, fullRows(t, db, run.RunID), "the original run is not changed")

	require.Len(t, fx.ReadAndStart(t, db, "fr", 30, 1), 1)
	fx.CompleteTask(t, db, newID, "a", 0, `1`)
	_, err = db.Exec(fx.Ctx(t), "select pgflow.retry_run($1::uuid, true)", newID)
	requirePgError(t, err, "55000", "run "+newID+" is completed: only failed or cancelled runs can be retried")
	_, err = db.Exec(fx.Ctx(t), "select pgflow.retry_run('00000000-0000-0000-0000-0000000000bb')")
	requirePgError(t, err, "P0002", "run 00000000-0000-0000-0000-0000000000bb not found")
}

// Two retries of one run at once: the first resumes it, the second waits for the run's lock and then gets 55000;
// the step runs again once (one new message).
func TestRetryRunConcurrentRetriesResumeOnce(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	db := d.Pool
	fx.Exec(t, db, "select pgflow.create_flow('cc', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('cc', 'a')")
	run := fx.StartFlow(t, db, "cc", `{}`)
	require.Len(t, fx.ReadAndStart(t, db, "cc", 30, 1), 1)
	fx.FailTask(t, db, run.RunID, "a", 0, "boom")

	ctx := fx.Ctx(t)
	c1, err := pgx.Connect(ctx, d.URL)
	require.NoError(t, err)
	defer c1.Close(context.Background())
	c2, err := pgx.Connect(ctx, d.URL)
	require.NoError(t, err)
	defer c2.Close(context.Background())
	var pid2 int
	require.NoError(t, c2.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid2))

	tx, err := c1.Begin(ctx)
	require.NoError(t, err)
	var status string
	require.NoError(t, tx.QueryRow(ctx, "select status from pgflow.retry_run($1::uuid)", run.RunID).Scan(&status))
	require.Equal(t, "started", status)

	second := make(chan error, 1)
	go func() {
		_, err := c2.Exec(ctx, "select pgflow.retry_run($1::uuid)", run.RunID)
		second <- err
	}()
	// Wait until the second retry is blocked on the first one's lock (a condition, not a sleep).
	require.Eventually(t, func() bool {
		var waiting bool
		_ = db.QueryRow(ctx, "select wait_event_type = 'Lock' from pg_stat_activity where pid = $1", pid2).Scan(&waiting)
		return waiting
	}, time.Minute, 5*time.Millisecond)
	require.NoError(t, tx.Commit(ctx))
	requirePgError(t, <-second, "55000", "run "+run.RunID+" is started: only failed or cancelled runs can be retried")

	require.Len(t, fx.QueueMessages(t, db, "cc"), 1, "one new message")
	require.Equal(t, 1, fx.Val[int](t, db, "select count(*)::int from pgflow.step_tasks where run_id = $1::uuid", run.RunID))
	require.Len(t, fx.ReadAndStart(t, db, "cc", 30, 1), 1)
	fx.CompleteTask(t, db, run.RunID, "a", 0, `1`)
	require.Equal(t, "completed", fx.GetRun(t, db, run.RunID).Status)
}
