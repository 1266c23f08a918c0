package pgflow_test

// Worker processes that die or freeze mid-handler (issue 6, "Faults"). The workers are real processes built from
// internal/reliability/testworker; their handlers record every invocation in reliability.invocations before they
// hang, so a handler that was killed is still on record.

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/reliability"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// A worker killed with SIGKILL while its handlers run leaves its tasks 'started'. Their messages stay hidden
// for the step timeout + 2 s, and stalled-task recovery (run by another worker's maintenance) requeues them once
// they started more than the timeout + 30 s ago; the other worker then runs them and every run completes, each
// task with exactly one recorded result (the survivor's), two attempts and one requeue.
func TestReliabilityKilledWorkerTasksFinishElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := relDB(t)
	compileRelFlow(t, db.Pool, reliability.OneStepFlow)
	bin := reliability.BuildTestWorker(t)

	victim := reliability.StartProcess(t, bin, reliability.ProcConfig{DatabaseURL: db.URL, Flow: reliability.OneStepFlow})
	waitRegistered(t, db.Pool, victim.Config.WorkerID)
	runs := startRelRuns(t, db.Pool, reliability.OneStepFlow, reliability.Input{HangAttempts: 1}, 3)
	eventually(t, relWait, "the victim's three handlers to start", func() bool {
		return queryInt(t, db.Pool, `select count(*) from reliability.invocations where worker_id = $1::uuid`, victim.Config.WorkerID) == 3
	})

	victim.Kill()
	for _, task := range relTasks(t, db.Pool, reliability.OneStepFlow, "work") {
		require.Equal(t, "started", task.Status, "a killed worker's task stays started until recovery")
		require.Equal(t, victim.Config.WorkerID, *task.Worker)
	}

	survivor := reliability.StartProcess(t, bin, reliability.ProcConfig{
		DatabaseURL: db.URL, Flow: reliability.OneStepFlow, Maintenance: 500 * time.Millisecond,
	})
	waitRunsDone(t, db.Pool, reliability.OneStepFlow, relWait)

	inv := requireInvariants(t, db.Pool, reliability.OneStepFlow, false)
	require.EqualValues(t, 3, inv.Runs)
	require.EqualValues(t, 6, inv.Attempts, "each task: the killed attempt and the survivor's")
	require.EqualValues(t, 3, inv.Requeued)
	require.EqualValues(t, 3, inv.StepCompletedEvents, "one step completion per run")
	for _, task := range relTasks(t, db.Pool, reliability.OneStepFlow, "work") {
		require.Contains(t, runs, task.RunID)
		require.Equal(t, "completed", task.Status)
		require.Equal(t, 2, task.Attempts)
		require.Equal(t, 1, task.Requeued)
		require.Equal(t, survivor.Config.WorkerID, task.Output.Worker, "the survivor's result is the recorded one")
		require.Equal(t, 2, task.Output.Attempt)
		require.Equal(t, []string{victim.Config.WorkerID + "/1", survivor.Config.WorkerID + "/2"},
			invocationsOf(t, db.Pool, task.RunID, "work", 0))
	}

	// The killed worker never reports again; the survivor stops cleanly.
	require.NoError(t, survivor.Stop(relWait))
	var stopped bool
	require.NoError(t, db.Pool.QueryRow(ctx, `select stopped_at is not null from pgflow.workers where worker_id = $1::uuid`,
		survivor.Config.WorkerID).Scan(&stopped))
	require.True(t, stopped)
}

// A worker killed with SIGKILL keeps a recent heartbeat for up to 30 s, but its listening session ends with the
// process, and the surviving worker's next heartbeat forgets it. From then on, every start wakes the survivor on
// its own channel, never the dead worker (whose wake would be lost until a periodic read), and every run completes.
func TestReliabilityKilledWorkerIsNotWokenAlone(t *testing.T) {
	t.Parallel()
	db := relDB(t)
	compileRelFlow(t, db.Pool, reliability.OneStepFlow)
	bin := reliability.BuildTestWorker(t)
	victim := reliability.StartProcess(t, bin, reliability.ProcConfig{DatabaseURL: db.URL, Flow: reliability.OneStepFlow})
	// A worker woken alone passes the wake on to the queue's channel when its read comes back full or every slot is
	// busy (internal/poller/passon.go). With more free slots than the test ever has messages (20 runs) neither can
	// happen, however slowly the survivor settles its tasks, so every notification seen is a start's own wake.
	survivor := reliability.StartProcess(t, bin, reliability.ProcConfig{DatabaseURL: db.URL, Flow: reliability.OneStepFlow,
		MaxConcurrent: 32, BatchSize: 24})
	listenerOf := func(workerID string) int64 {
		return queryInt(t, db.Pool, `select coalesce(max(listener_pid), 0) from pgflow.workers
			where worker_id = $1::uuid and stopped_at is null`, workerID)
	}
	eventually(t, relWait, "both workers heartbeat the session they listen in", func() bool {
		return listenerOf(victim.Config.WorkerID) != 0 && listenerOf(survivor.Config.WorkerID) != 0
	})
	victimSession := listenerOf(victim.Config.WorkerID)

	victim.Kill()
	eventually(t, relWait, "the killed worker's session to end", func() bool {
		return queryInt(t, db.Pool, `select count(*) from pg_catalog.pg_stat_activity where pid = $1::integer`, victimSession) == 0
	})
	eventually(t, relWait, "the survivor's heartbeat to forget the killed worker's session", func() bool {
		return listenerOf(victim.Config.WorkerID) == 0
	})
	require.EqualValues(t, 1, queryInt(t, db.Pool, `select count(*) from pgflow.workers where worker_id = $1::uuid
		and stopped_at is null and last_heartbeat_at >= now() - interval '30 seconds'`, victim.Config.WorkerID),
		"by its last heartbeat the killed worker still looks alive")

	collect := testutil.Notifications(t, db.URL, sqlapi.WorkerChannel(victim.Config.WorkerID),
		sqlapi.WorkerChannel(survivor.Config.WorkerID), sqlapi.QueueChannel(reliability.OneStepFlow))
	for i := range 20 {
		startRelRuns(t, db.Pool, reliability.OneStepFlow, reliability.Input{}, 1)
		require.Equal(t, []string{sqlapi.WorkerChannel(survivor.Config.WorkerID) + " "}, collect(),
			"start %d: the surviving worker alone is woken", i)
	}
	waitRunsDone(t, db.Pool, reliability.OneStepFlow, relWait)
	inv := requireInvariants(t, db.Pool, reliability.OneStepFlow, true)
	require.EqualValues(t, 20, inv.Runs)
	require.NoError(t, survivor.Stop(relWait))
}

// A worker frozen with SIGSTOP mid-handler (a long GC pause, a suspended VM) loses its tasks to stalled-task
// recovery exactly like a dead one. When it wakes up after another worker completed them, its handlers' step
// timeouts have long passed: it fails those attempts and reports them, and the database fences the reports by
// attempt — they change nothing (the recorded output stays the other worker's, no step or run event is repeated,
// no attempt is consumed) and the worker logs them as stale results.
func TestReliabilityFrozenWorkerLateResultIgnored(t *testing.T) {
	t.Parallel()
	db := relDB(t)
	compileRelFlow(t, db.Pool, reliability.OneStepFlow)
	bin := reliability.BuildTestWorker(t)

	frozen := reliability.StartProcess(t, bin, reliability.ProcConfig{DatabaseURL: db.URL, Flow: reliability.OneStepFlow})
	waitRegistered(t, db.Pool, frozen.Config.WorkerID)
	startRelRuns(t, db.Pool, reliability.OneStepFlow, reliability.Input{HangAttempts: 1}, 2)
	eventually(t, relWait, "the frozen worker's handlers to start", func() bool {
		return queryInt(t, db.Pool, `select count(*) from reliability.invocations where worker_id = $1::uuid`, frozen.Config.WorkerID) == 2
	})
	require.NoError(t, frozen.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = frozen.Signal(syscall.SIGCONT) })

	other := reliability.StartProcess(t, bin, reliability.ProcConfig{
		DatabaseURL: db.URL, Flow: reliability.OneStepFlow, Maintenance: 500 * time.Millisecond,
	})
	waitRunsDone(t, db.Pool, reliability.OneStepFlow, relWait)
	before := requireInvariants(t, db.Pool, reliability.OneStepFlow, false)

	// Wake the frozen worker and let its hanging handlers return: it reports two late (stale) results.
	require.NoError(t, os.WriteFile(reliability.FileGate{Dir: frozen.Config.ReleaseDir}.ReleasePath(), nil, 0o644))
	require.NoError(t, frozen.Signal(syscall.SIGCONT))
	eventually(t, relWait, "the woken worker's two late reports to be refused as stale", func() bool {
		return strings.Count(frozen.Output(), `"msg":"stale result not recorded`) == 2
	})
	// A graceful stop drains: the worker reports both results before it exits.
	require.NoError(t, frozen.Stop(relWait))

	after := requireInvariants(t, db.Pool, reliability.OneStepFlow, false)
	require.Equal(t, before, after, "late results change nothing")
	require.EqualValues(t, 2, after.StepCompletedEvents)
	require.EqualValues(t, 4, after.Attempts)
	for _, task := range relTasks(t, db.Pool, reliability.OneStepFlow, "work") {
		require.Equal(t, other.Config.WorkerID, task.Output.Worker)
		require.Equal(t, 2, task.Attempts)
	}
	require.NoError(t, other.Stop(relWait))
}
