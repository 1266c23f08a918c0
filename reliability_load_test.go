package pgflow_test

// Load and races (issue 6, "Races and load"): many workers on one flow, concurrent starts with one run id,
// concurrent compilation.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/reliability"
)

// Four worker processes share one flow with 20 000 tasks (20 runs of a map step over 1 000 elements, plus the 20
// tasks that produce the arrays). Every run completes; every task's handler ran exactly once and its result is
// recorded exactly once (one invocation per task, the output naming it, one step:completed per step and run);
// the sum of attempts equals the number of tasks; the queue is empty.
func TestReliabilityFourWorkers20kTasks(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("20 000-task load test; run without -short")
	}
	const runs, items, workers = 20, 1000, 4
	db := relDB(t)
	compileRelFlow(t, db.Pool, reliability.MapFlow)
	bin := reliability.BuildTestWorker(t)
	var procs []*reliability.Process
	for range workers {
		p := reliability.StartProcess(t, bin, reliability.ProcConfig{
			DatabaseURL: db.URL, Flow: reliability.MapFlow, LogLevel: "warn", MaxConcurrent: 10, BatchSize: 10,
		})
		procs = append(procs, p)
	}
	for _, p := range procs {
		waitRegistered(t, db.Pool, p.Config.WorkerID)
	}
	start := time.Now()
	startRelRuns(t, db.Pool, reliability.MapFlow, reliability.Input{Items: items}, runs)
	waitRunsDone(t, db.Pool, reliability.MapFlow, 10*time.Minute)
	t.Logf("%d tasks done by %d worker processes in %s", runs*(items+1), workers, time.Since(start).Round(time.Millisecond))
	for _, p := range procs {
		require.NoError(t, p.Stop(relWait), "worker %s", p.Config.WorkerID)
	}

	inv := requireInvariants(t, db.Pool, reliability.MapFlow, true)
	require.EqualValues(t, runs*(items+1), inv.Tasks)
	require.EqualValues(t, runs*items, inv.RecordedTasks)
	require.EqualValues(t, inv.Tasks, inv.Attempts)
	require.EqualValues(t, runs*2, inv.StepCompletedEvents, "list and each completed once per run")
	// Every worker took part.
	var perWorker []int64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`select array_agg(n order by n) from (select count(*) as n from reliability.invocations group by worker_id) as c`).Scan(&perWorker))
	require.Len(t, perWorker, workers, "invocations per worker: %v", perWorker)
	t.Logf("invocations per worker: %v", perWorker)
}

// Many concurrent starts with one caller-chosen run id, through the client and through pgflow.start_flow
// directly, create exactly one run: every client call returns that run, every direct call either returns it or
// fails with the primary-key violation, and the run's start is emitted once.
func TestReliabilityConcurrentStartSameRunID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := relDB(t)
	compileRelFlow(t, db.Pool, reliability.OneStepFlow)
	client := newClient(t, db.Pool, nil)
	defer client.Close()
	const callers = 16
	for round := range 5 {
		runID := reliability.NewUUID()
		var wg sync.WaitGroup
		clientIDs := make([]string, callers)
		clientErrs := make([]error, callers)
		sqlErrs := make([]error, callers)
		ready := make(chan struct{})
		for i := range callers {
			wg.Go(func() {
				<-ready
				run, err := client.StartRunJSON(ctx, reliability.OneStepFlow, json.RawMessage(`{"sleep_ms":1}`), &pgflow.StartOpts{RunID: runID})
				clientErrs[i] = err
				if err == nil {
					clientIDs[i] = run.ID
				}
			})
			wg.Go(func() {
				<-ready
				_, sqlErrs[i] = db.Pool.Exec(ctx, `select pgflow.start_flow($1, '{}'::jsonb, $2::uuid)`, reliability.OneStepFlow, runID)
			})
		}
		close(ready)
		wg.Wait()
		for i := range callers {
			require.NoError(t, clientErrs[i], "round %d caller %d", round, i)
			require.Equal(t, runID, clientIDs[i])
			if sqlErrs[i] != nil {
				var pgErr *pgconn.PgError
				require.True(t, errors.As(sqlErrs[i], &pgErr), "round %d: %v", round, sqlErrs[i])
				require.Equal(t, "23505", pgErr.Code, "round %d: %v", round, sqlErrs[i])
				require.Equal(t, "runs_pkey", pgErr.ConstraintName)
			}
		}
		require.EqualValues(t, 1, queryInt(t, db.Pool, `select count(*) from pgflow.runs where run_id = $1::uuid`, runID))
		require.EqualValues(t, 1, queryInt(t, db.Pool, `select count(*) from pgflow.step_tasks where run_id = $1::uuid`, runID))
		require.EqualValues(t, 1, queryInt(t, db.Pool,
			`select count(*) from realtime.captured where event = 'run:started' and payload ->> 'run_id' = $1`, runID))
	}
	require.EqualValues(t, 5, queryInt(t, db.Pool, `select count(*) from pgflow.runs`))
	require.EqualValues(t, 5, queryInt(t, db.Pool, `select queue_length from pgmq.metrics('rel_one')`), "one message per run")
}

// Workers of one flow that start at the same moment on an empty database compile it concurrently: no worker
// fails, the flow exists once with its steps, and a worker started afterwards verifies it. The same holds for
// concurrent pgflow.ensure_flow_compiled calls on separate connections.
func TestReliabilityConcurrentCompilation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := relDB(t)
	rec := reliability.DBRecorder{DB: db.Pool}

	const n = 6
	logs := make([]*relLogs, n)
	workers := make([]*inProcWorker, n)
	ready := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		logger, l := newRelLogger(t, fmt.Sprintf("worker %d", i))
		logs[i] = l
		wg.Go(func() {
			<-ready
			workers[i] = runInProc(t, db.Pool, relFlow(t, reliability.MapFlow, reliability.Handlers{Recorder: rec}), relWorkerConfig(logger))
		})
	}
	close(ready)
	wg.Wait()
	for _, w := range workers {
		waitRegistered(t, db.Pool, w.w.ID())
	}
	compiled, verified := 0, 0
	for _, l := range logs {
		compiled += l.Count("flow compiled into the database")
		verified += l.Count("flow definition matches the database")
		require.Zero(t, l.Count("level=ERROR"), l.String())
	}
	require.Equal(t, 1, compiled, "exactly one worker created the flow")
	require.Equal(t, n-1, verified)
	require.EqualValues(t, 1, queryInt(t, db.Pool, `select count(*) from pgflow.flows where flow_slug = $1`, reliability.MapFlow))
	require.EqualValues(t, 2, queryInt(t, db.Pool, `select count(*) from pgflow.steps where flow_slug = $1`, reliability.MapFlow))
	require.EqualValues(t, 1, queryInt(t, db.Pool, `select count(*) from pgflow.deps where flow_slug = $1`, reliability.MapFlow))
	require.EqualValues(t, 1, queryInt(t, db.Pool, `select count(*) from pgmq.list_queues() where queue_name = $1`, reliability.MapFlow))

	// The compiled flow runs.
	startRelRuns(t, db.Pool, reliability.MapFlow, reliability.Input{Items: 5}, 2)
	waitRunsDone(t, db.Pool, reliability.MapFlow, relWait)
	for _, w := range workers {
		require.NoError(t, w.stop())
	}
	requireInvariants(t, db.Pool, reliability.MapFlow, true)

	// Raw concurrent ensure_flow_compiled of another flow, one connection each.
	f := relFlow(t, reliability.OneStepFlow, reliability.Handlers{Recorder: rec})
	shape, err := f.Shape()
	require.NoError(t, err)
	statuses := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			conn, err := pgx.Connect(ctx, db.URL)
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Close(ctx)
			<-start
			var raw []byte
			errs[i] = conn.QueryRow(ctx, `select pgflow.ensure_flow_compiled($1, $2::jsonb)`, reliability.OneStepFlow, string(shape)).Scan(&raw)
			var res struct{ Status string }
			if errs[i] == nil {
				errs[i] = json.Unmarshal(raw, &res)
			}
			statuses[i] = res.Status
		})
	}
	close(start)
	wg.Wait()
	counts := map[string]int{}
	for i := range n {
		require.NoError(t, errs[i])
		counts[statuses[i]]++
	}
	require.Equal(t, map[string]int{"compiled": 1, "verified": n - 1}, counts)
	require.EqualValues(t, 1, queryInt(t, db.Pool, `select count(*) from pgflow.steps where flow_slug = $1`, reliability.OneStepFlow))
}
