package pgflowtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/backoff"
	"github.com/pgflow-go/pgflow/internal/completer"
	"github.com/pgflow-go/pgflow/internal/executor"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/taskrun"
)

// WorkerFunctionName is the function_name of the pgflow.workers rows RunFlow and DriveRun register for the tasks
// they claim (a worker's is "pgflow-go").
const WorkerFunctionName = "pgflowtest"

// RunFlowOpts are the options of RunFlow and DriveRun. A nil *RunFlowOpts means the defaults.
type RunFlowOpts struct {
	// RunID starts the run with this id (a UUID) instead of one the database makes. RunFlow only.
	RunID string
	// AllowDataLoss lets RunFlow recompile a flow whose stored definition differs from the code, which deletes
	// the flow's runs, tasks and queue: set it when the test database outlives test runs (the flow changed since
	// it was compiled there) and is not marked local (pgflow.environment = 'local'). Without it such a difference
	// is a *pgflow.ShapeMismatchError. RunFlow only.
	AllowDataLoss bool
	// Logger receives what a worker logs about the tasks: failures, retries, panics with their stacks. Nil
	// discards it.
	Logger *slog.Logger
}

func (o *RunFlowOpts) orZero() *RunFlowOpts {
	if o == nil {
		return &RunFlowOpts{}
	}
	return o
}

// RunFlow compiles flow into db (pgflow.ensure_flow_compiled, as a worker does at startup), starts one run of it
// with input and runs the run's tasks in the calling goroutine, one at a time, until the run completes or fails.
// It returns the run as it is then: read outputs with pgflow.StepOutput and pgflow.RunOutput. A failed run is
// returned together with its error, run.Err() (wrapping pgflow.ErrRunFailed and naming each failed step with its
// error message). See DriveRun for how tasks are run.
//
// db needs the pgflow schema (see the package documentation). It may be a test's transaction (pgx.Tx), so that
// everything RunFlow did is rolled back with it; a statement the database refuses aborts that transaction, as
// always in PostgreSQL (a handler's error is not such a statement: it is recorded with pgflow.fail_task).
func RunFlow[I any](ctx context.Context, db DB, flow *pgflow.Flow[I], input I, opts *RunFlowOpts) (*pgflow.Run, error) {
	if flow == nil {
		return nil, errors.New("pgflowtest: RunFlow: the flow is nil")
	}
	opts = opts.orZero()
	ef, err := flow.EngineFlow()
	if err != nil {
		return nil, fmt.Errorf("pgflowtest: RunFlow: %w", err)
	}
	subject := fmt.Sprintf("pgflowtest: RunFlow of flow %q", ef.Slug)
	raw, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("%s: encode input %T: %w", subject, input, err)
	}
	if db == nil {
		return nil, fmt.Errorf("%s: the database is nil", subject)
	}
	if _, err := sqlapi.SchemaVersion(ctx, db); err != nil {
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	res, err := sqlapi.EnsureFlowCompiled(ctx, db, ef.Slug, ef.Shape,
		sqlapi.FlowDeployment{QueueMode: ef.QueueMode, MessageRetention: ef.MessageRetention}, opts.AllowDataLoss)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	switch res.Status {
	case "compiled", "verified", "recompiled":
	case "mismatch":
		return nil, fmt.Errorf("%s: %w (set RunFlowOpts.AllowDataLoss to recompile it, which deletes its runs)",
			subject, &pgflow.ShapeMismatchError{Flow: ef.Slug, Differences: res.Differences})
	default:
		return nil, fmt.Errorf("%s: pgflow.ensure_flow_compiled returned the unknown status %q", subject, res.Status)
	}
	started, err := sqlapi.StartFlowWithStates(ctx, db, ef.Slug, raw, opts.RunID)
	switch {
	case err != nil && sqlapi.IsInvalidRunID(err):
		return nil, fmt.Errorf("%s: RunFlowOpts.RunID %q: %w: %w", subject, opts.RunID, pgflow.ErrInvalidRunID, err)
	case err != nil && sqlapi.IsDuplicateRun(err):
		return nil, fmt.Errorf("%s: RunFlowOpts.RunID %q is already the id of a run: %w", subject, opts.RunID, err)
	case err != nil:
		return nil, fmt.Errorf("%s: start the run with input %.200s: %w", subject, raw, err)
	}
	return drive(ctx, db, ef, started.Run.RunID, opts)
}

// DriveRun runs the tasks of an existing run of flow — one that the code under test started, say — in the
// calling goroutine until the run completes or fails, and returns it as RunFlow does. The flow must be in the
// database (it is, since the run exists); DriveRun does not compile it.
//
// It works as a worker with one handler slot that serves this run only. It finds the run's queued tasks
// (pgflow.step_tasks) and, one at a time in step and task order, claims the task with pgflow.start_tasks by its
// message id, runs its handler with the worker's own executor — the same timeout, permanent-error, panic and
// output handling — and records the result with the worker's completer (pgflow.complete_tasks,
// pgflow.fail_task). Claiming by message id rather than reading the queue (pgmq.read) leaves other runs' messages
// alone, so tests that run flows in parallel in one database do not steal each other's tasks, and it claims a
// task whose message is delayed — a StartDelay or a retry's BaseDelay backoff — at once: delays are skipped, and
// a retried task is attempted again at once until its attempts are spent.
//
// It never sleeps and starts nothing that outlives it, with one exception it cannot prevent: a handler that
// ignores its context after its step timeout keeps running in its goroutine (the attempt has failed, as in a
// worker). When the run is not finished and none of its tasks is queued — another worker holds its tasks, or a
// result could not be recorded — DriveRun returns the run and an error that names the tasks, instead of waiting.
// Do not run a Worker for the same flow against the same database at the same time.
func DriveRun(ctx context.Context, db DB, flow pgflow.AnyFlow, runID string, opts *RunFlowOpts) (*pgflow.Run, error) {
	if isNil(flow) {
		return nil, errors.New("pgflowtest: DriveRun: the flow is nil")
	}
	ef, err := flow.EngineFlow()
	if err != nil {
		return nil, fmt.Errorf("pgflowtest: DriveRun: %w", err)
	}
	if db == nil {
		return nil, fmt.Errorf("pgflowtest: DriveRun of run %s of flow %q: the database is nil", runID, ef.Slug)
	}
	if _, err := sqlapi.SchemaVersion(ctx, db); err != nil {
		return nil, fmt.Errorf("pgflowtest: DriveRun of run %s of flow %q: %w", runID, ef.Slug, err)
	}
	return drive(ctx, db, ef, runID, opts.orZero())
}

// drive runs the tasks of run runID of flow ef until the run is finished.
func drive(ctx context.Context, db DB, ef *taskrun.Flow, runID string, opts *RunFlowOpts) (*pgflow.Run, error) {
	subject := fmt.Sprintf("pgflowtest: run %s of flow %q", runID, ef.Slug)
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r, err := getRun(ctx, db, runID)
	if err != nil {
		return nil, fmt.Errorf("pgflowtest: flow %q: %w", ef.Slug, err)
	}
	if r.Run.FlowSlug != ef.Slug {
		return nil, fmt.Errorf("%s: the run belongs to flow %q", subject, r.Run.FlowSlug)
	}
	runID = r.Run.RunID // canonical text
	if r.Run.Status == string(pgflow.RunCompleted) || r.Run.Status == string(pgflow.RunFailed) {
		run := pgflow.EngineRun(r)
		return run, run.Err()
	}

	// A worker row for the claims (start_tasks records it in step_tasks.last_worker_id).
	workerID := newUUID()
	queue, err := sqlapi.FlowQueue(ctx, db, ef.Slug)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	if err := sqlapi.RegisterWorker(ctx, db, workerID, queue, WorkerFunctionName); err != nil {
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	defer func() { _ = sqlapi.MarkWorkerStopped(context.WithoutCancel(ctx), db, workerID) }()

	// The worker's engine below the claim: the executor runs a handler and hands its result to the completer.
	// Both run one task at a time here, so a *pgx.Conn or a pgx.Tx is never used by two goroutines at once.
	base := context.WithoutCancel(ctx)
	comp := completer.New(completer.Config{DB: db, Logger: log, QueueSize: 1, Retry: backoff.Policy{},
		HardStop: ctx, Calls: ctx, Base: base})
	defer comp.Stop()
	exec := executor.New(executor.Config{Flows: map[string]*taskrun.Flow{ef.Slug: ef}, DB: db, Completer: comp,
		Logger: log, Handlers: ctx, GiveUp: ctx.Done()})

	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", subject, err)
		}
		if r, err = getRun(ctx, db, runID); err != nil {
			return nil, fmt.Errorf("pgflowtest: flow %q: %w", ef.Slug, err)
		}
		run := pgflow.EngineRun(r)
		if run.Status.Terminal() {
			return run, run.Err()
		}
		tasks, err := sqlapi.ListRunTasks(ctx, db, sqlapi.ListRunTasksParams{RunID: runID})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", subject, err)
		}
		// The first queued task of a started step (a skipped step's other tasks may stay queued).
		next := -1
		for i, t := range tasks {
			if s := run.Step(t.StepSlug); t.Status == "queued" && t.MessageID != nil && t.QueueName != nil &&
				s != nil && s.Status == pgflow.StepStarted {
				next = i
				break
			}
		}
		if next < 0 {
			return run, fmt.Errorf("%s is %s, but none of its tasks is queued: %s", subject, run.Status, stuck(run, tasks, workerID))
		}
		t := tasks[next]
		claimedAt := time.Now() // not later than the claim: the handler's deadline is never late
		claimed, err := sqlapi.StartTasks(ctx, db, ef.Slug, *t.QueueName, []int64{*t.MessageID}, workerID)
		if err != nil {
			return nil, fmt.Errorf("%s: claim step %q task %d: %w", subject, t.StepSlug, t.TaskIndex, err)
		}
		if len(claimed) == 0 {
			why := "unknown"
			if u, err := sqlapi.ClassifyUnclaimed(ctx, db, ef.Slug, *t.QueueName, []int64{*t.MessageID}); err == nil && len(u) == 1 {
				why = u[0].Reason
			}
			return nil, fmt.Errorf("%s: pgflow.start_tasks did not claim queued step %q task %d (message %d of queue %q; reason: %s): is another worker running this flow on this database?",
				subject, t.StepSlug, t.TaskIndex, *t.MessageID, *t.QueueName, why)
		}
		exec.Run(executor.Task{ClaimedTask: claimed[0], QueueName: *t.QueueName, WorkerID: workerID, ClaimedAt: claimedAt})
	}
}

// stuck says why an unfinished run has no queued task.
func stuck(run *pgflow.Run, tasks []sqlapi.Task, workerID string) string {
	var why []string
	for _, t := range tasks {
		if t.Status != "started" {
			continue
		}
		who := "another worker"
		if t.LastWorkerID != nil {
			who = "worker " + *t.LastWorkerID
		}
		if t.LastWorkerID != nil && *t.LastWorkerID == workerID {
			why = append(why, fmt.Sprintf("step %q task %d was run here but its result could not be recorded (set RunFlowOpts.Logger to see why)",
				t.StepSlug, t.TaskIndex))
			continue
		}
		why = append(why, fmt.Sprintf("step %q task %d is started by %s (is a worker running this flow on this database?)",
			t.StepSlug, t.TaskIndex, who))
	}
	if len(why) == 0 {
		for _, s := range run.Steps {
			if !s.Status.Terminal() {
				why = append(why, fmt.Sprintf("step %q is %s with %d dependencies left", s.StepSlug, s.Status, s.RemainingDeps))
			}
		}
	}
	return strings.Join(why, "; ")
}
