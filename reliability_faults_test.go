package pgflow_test

// In-process faults (issue 6, "Faults"): worker connections terminated mid-poll, mid-claim and mid-complete; a
// handler that outlives its timeout; stalled-task recovery up to the final failure.

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/reliability"
)

// victimPool is a worker pool whose sessions carry application_name so the test can find and kill them.
func victimPool(t *testing.T, db *pgtest.DB, appName string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// terminateWhen waits for a session of appName in db whose current or last statement contains fragment (and, when
// lockWait, that is running it and waiting for a lock), terminates it with pg_terminate_backend and returns its
// pid.
func terminateWhen(t *testing.T, admin *pgxpool.Pool, db *pgtest.DB, appName, fragment string, lockWait bool) int {
	t.Helper()
	var pid int
	eventually(t, relWait, "a session running "+fragment, func() bool {
		err := admin.QueryRow(context.Background(), `
			select a.pid from pg_stat_activity as a
			 where a.datname = $1 and a.application_name = $2
			   and strpos(a.query, $3) > 0 and (not $4 or (a.state = 'active' and a.wait_event_type = 'Lock'))
			 limit 1`, db.Name, appName, fragment, lockWait).Scan(&pid)
		return err == nil
	})
	var ok bool
	require.NoError(t, admin.QueryRow(context.Background(), `select pg_terminate_backend($1)`, pid).Scan(&ok))
	require.True(t, ok)
	return pid
}

// The worker's connections are killed with pg_terminate_backend while it polls (or between polls), while its claim
// (pgflow.start_tasks) waits for a lock, and while its completion (pgflow.complete_task) waits for a lock. Each
// time the statement's transaction rolls back, the worker retries with backoff, and the task runs once and
// completes once: a lost connection never costs an attempt.
func TestReliabilityTerminatedConnections(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := relDB(t)
	compileRelFlow(t, db.Pool, reliability.OneStepFlow)
	const app = "rel-terminated"
	gate := reliability.NewChanGate()
	flow := relFlow(t, reliability.OneStepFlow, reliability.Handlers{
		Recorder: reliability.DBRecorder{DB: db.Pool}, Gate: gate,
	})
	logger, logs := newRelLogger(t, "worker")
	cfg := relWorkerConfig(logger)
	cfg.PollOnly = true // mid-poll kills a session waiting inside pgmq.read_with_poll
	w := runInProc(t, victimPool(t, db, app), flow, cfg)
	waitRegistered(t, db.Pool, w.w.ID())

	t.Run("mid-poll", func(t *testing.T) {
		terminateWhen(t, db.Pool, db, app, "pgmq.read", false)
		eventually(t, relWait, "the worker to log the failed poll", func() bool {
			return logs.Count("SQLSTATE 57P01") > 0
		})
		runs := startRelRuns(t, db.Pool, reliability.OneStepFlow, reliability.Input{}, 1)
		waitRunsDone(t, db.Pool, reliability.OneStepFlow, relWait)
		task := relTasks(t, db.Pool, reliability.OneStepFlow, "work")[0]
		require.Equal(t, runs[0], task.RunID)
		require.Equal(t, "completed", task.Status)
		require.Equal(t, 1, task.Attempts)
	})

	t.Run("mid-claim", func(t *testing.T) {
		// Holding the worker's row FOR UPDATE blocks the claim at its foreign-key check on last_worker_id.
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `select from pgflow.workers where worker_id = $1::uuid for update`, w.w.ID())
		require.NoError(t, err)
		lost := logs.Count("SQLSTATE 57P01")
		runs := startRelRuns(t, db.Pool, reliability.OneStepFlow, reliability.Input{}, 1)
		terminateWhen(t, db.Pool, db, app, "pgflow.start_tasks", true)
		eventually(t, relWait, "the worker to log the failed claim", func() bool {
			return logs.Count("SQLSTATE 57P01") > lost
		})
		require.NoError(t, tx.Rollback(ctx))
		waitRunsDone(t, db.Pool, reliability.OneStepFlow, relWait)
		for _, task := range relTasks(t, db.Pool, reliability.OneStepFlow, "work") {
			if task.RunID != runs[0] {
				continue
			}
			require.Equal(t, "completed", task.Status)
			require.Equal(t, 1, task.Attempts, "the rolled-back claim consumed no attempt")
			require.Len(t, invocationsOf(t, db.Pool, task.RunID, "work", 0), 1)
		}
	})

	t.Run("mid-complete", func(t *testing.T) {
		runs := startRelRuns(t, db.Pool, reliability.OneStepFlow, reliability.Input{HangAttempts: 1}, 1)
		select {
		case <-gate.Waiting:
		case <-time.After(relWait):
			t.Fatal("the handler did not start")
		}
		// Holding the run row FOR UPDATE blocks complete_task at its first lock.
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `select from pgflow.runs where run_id = $1::uuid for update`, runs[0])
		require.NoError(t, err)
		gate.Release()
		lost := logs.Count("SQLSTATE 57P01")
		terminateWhen(t, db.Pool, db, app, "pgflow.complete_task", true)
		eventually(t, relWait, "the worker to log the failed report", func() bool {
			return logs.Count("SQLSTATE 57P01") > lost
		})
		require.NoError(t, tx.Rollback(ctx))
		waitRunsDone(t, db.Pool, reliability.OneStepFlow, relWait)
		for _, task := range relTasks(t, db.Pool, reliability.OneStepFlow, "work") {
			if task.RunID != runs[0] {
				continue
			}
			require.Equal(t, "completed", task.Status)
			require.Equal(t, 1, task.Attempts, "a failed report consumed no attempt")
			require.Len(t, invocationsOf(t, db.Pool, task.RunID, "work", 0), 1, "the handler ran once")
		}
	})

	require.NoError(t, w.stop())
	inv := requireInvariants(t, db.Pool, reliability.OneStepFlow, true)
	require.EqualValues(t, 3, inv.Runs)
}

// A handler that runs past its step's timeout does not wait for stalled-task recovery: its context ends at the
// deadline (pgflow.ErrStepTimeout), the attempt fails as timed out and the task is retried per its policy. Every
// run completes with the first attempt that does not hang — one result, one completion, no requeue — and the
// timed-out attempts' handlers, released afterwards, change nothing.
func TestReliabilityHandlerOutlivesTimeout(t *testing.T) {
	t.Parallel()
	db := relDB(t)
	compileRelFlow(t, db.Pool, reliability.OneStepFlow)
	lateValue := startRelRuns(t, db.Pool, reliability.OneStepFlow, reliability.Input{HangAttempts: 1}, 1)[0]
	lateError := startRelRuns(t, db.Pool, reliability.OneStepFlow, reliability.Input{HangAttempts: 1, FailAttempts: 1}, 1)[0]
	twice := startRelRuns(t, db.Pool, reliability.OneStepFlow, reliability.Input{HangAttempts: 2}, 1)[0]
	gate := reliability.NewChanGate()
	flow := relFlow(t, reliability.OneStepFlow, reliability.Handlers{
		Recorder: reliability.DBRecorder{DB: db.Pool}, Gate: gate,
	})
	logger, _ := newRelLogger(t, "worker")
	cfg := relWorkerConfig(logger)
	cfg.MaintenanceInterval = 500 * time.Millisecond
	w := runInProc(t, db.Pool, flow, cfg)

	waitRunsDone(t, db.Pool, reliability.OneStepFlow, relWait)
	before := requireInvariants(t, db.Pool, reliability.OneStepFlow, false)
	gate.Release()
	require.NoError(t, w.stop())
	after := requireInvariants(t, db.Pool, reliability.OneStepFlow, false)
	require.Equal(t, before, after, "late returns change nothing")
	require.EqualValues(t, 3, after.StepCompletedEvents)
	require.EqualValues(t, 7, after.Invocations, "the hanging attempts and the one that completed")
	want := map[string]int{lateValue: 2, lateError: 2, twice: 3}
	for _, task := range relTasks(t, db.Pool, reliability.OneStepFlow, "work") {
		require.Contains(t, want, task.RunID)
		require.Equal(t, "completed", task.Status)
		require.Equal(t, want[task.RunID], task.Attempts)
		require.Zero(t, task.Requeued, "timed out by the worker, not recovered")
		require.Equal(t, want[task.RunID], task.Output.Attempt, "the recorded result is the last attempt's")
	}
}

// Stalled-task recovery end to end, up to its final failure: a handler that never returns is requeued three
// times (each time by the worker's own maintenance, each time run again), and the fourth stall gives the task up
// through the ordinary failure path — task and step failed with a message naming the stall, run failed, one
// run:failed event, nothing left in the queue. Instead of waiting 33 s per stall, the test ages each attempt by
// moving its started_at (and queued_at) an hour back (the only thing it does behind the worker's back).
func TestReliabilityStalledRecoveryGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := relDB(t)
	compileRelFlow(t, db.Pool, reliability.OneStepFlow)
	// A 10 min step timeout: the worker's own deadline (3 s by default here) must not fail the hanging attempts
	// before the test has aged them (an hour back is still a stall: 10 min + 30 s).
	_, err := db.Pool.Exec(ctx, `update pgflow.steps set opt_timeout = 600 where flow_slug = $1`, reliability.OneStepFlow)
	require.NoError(t, err)
	flow := relFlow(t, reliability.OneStepFlow, reliability.Handlers{Recorder: reliability.DBRecorder{DB: db.Pool}})
	logger, logs := newRelLogger(t, "worker")
	cfg := relWorkerConfig(logger)
	cfg.MaintenanceInterval = 300 * time.Millisecond
	cfg.ShutdownTimeout = time.Second
	w := runInProc(t, db.Pool, flow, cfg)

	runID := startRelRuns(t, db.Pool, reliability.OneStepFlow, reliability.Input{HangAttempts: 1000}, 1)[0]
	for attempt := 1; attempt <= 4; attempt++ {
		eventually(t, relWait, "attempt to start", func() bool {
			return queryInt(t, db.Pool, `select count(*) from reliability.invocations where attempt = $1`, attempt) == 1
		})
		tag, err := db.Pool.Exec(ctx, `update pgflow.step_tasks set queued_at = now() - interval '2 hours', started_at = now() - interval '1 hour'
		                                where run_id = $1::uuid and status = 'started' and attempts_count = $2`, runID, attempt)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())
	}
	waitRunsDone(t, db.Pool, reliability.OneStepFlow, relWait)

	task := relTasks(t, db.Pool, reliability.OneStepFlow, "work")[0]
	require.Equal(t, "failed", task.Status)
	require.Equal(t, 3, task.Requeued)
	require.Equal(t, 4, task.Attempts)
	require.NotNil(t, task.Error)
	require.Contains(t, *task.Error, "Task stalled")
	var runStatus, stepStatus string
	var stalledAt *time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `
		select r.status, ss.status, t.permanently_stalled_at
		  from pgflow.runs as r
		  join pgflow.step_states as ss on ss.run_id = r.run_id
		  join pgflow.step_tasks as t on t.run_id = r.run_id
		 where r.run_id = $1::uuid`, runID).Scan(&runStatus, &stepStatus, &stalledAt))
	require.Equal(t, "failed", runStatus)
	require.Equal(t, "failed", stepStatus)
	require.NotNil(t, stalledAt)
	require.Equal(t, 3, logs.Count("requeued stalled tasks"))

	require.NoError(t, w.stop()) // the four hanging handlers are cancelled; their failures change nothing
	inv, err := reliability.Read(ctx, db.Pool, reliability.OneStepFlow)
	require.NoError(t, err)
	require.EqualValues(t, 1, inv.RunsFailed)
	require.EqualValues(t, 1, inv.RunTerminalEvents)
	require.EqualValues(t, 0, inv.RunsWithDupTerminal)
	require.EqualValues(t, 0, inv.QueueLength)
	require.EqualValues(t, 4, inv.Invocations)
	require.EqualValues(t, 4, inv.Attempts)
}
