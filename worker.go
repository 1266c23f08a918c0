package pgflow

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow/internal/backoff"
	"github.com/pgflow-go/pgflow/internal/pgerr"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// workerFunctionName is recorded as pgflow.workers.function_name for every Go worker.
const workerFunctionName = "pgflow-go"

// ErrShapeMismatch is wrapped by the error Run returns when the flow stored in the database differs from the
// flow in code and the worker may not recompile it; errors.As the error to a *ShapeMismatchError for the list.
var ErrShapeMismatch = errors.New("flow definition differs from the one in the database")

// ShapeMismatchError reports that the flow stored in the database has a different shape (steps, dependencies,
// step types, conditions or modes) than the flow the worker runs, in a database where recompiling is not allowed.
// Nothing was changed in the database.
type ShapeMismatchError struct {
	Flow        string   // flow slug
	Differences []string // one entry per difference, as reported by pgflow.ensure_flow_compiled
}

func (e *ShapeMismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pgflow: flow %q: %s (%d difference", e.Flow, ErrShapeMismatch, len(e.Differences))
	if len(e.Differences) != 1 {
		b.WriteString("s")
	}
	b.WriteString("):")
	for _, d := range e.Differences {
		b.WriteString("\n  - ")
		b.WriteString(d)
	}
	b.WriteString("\napply a migration with the new definition (Flow.CompileSQL), give the changed flow a new slug, " +
		"or set WorkerConfig.AllowDataLoss to recompile it (this deletes the flow's runs and queue)")
	return b.String()
}

// Unwrap returns ErrShapeMismatch.
func (e *ShapeMismatchError) Unwrap() error { return ErrShapeMismatch }

// Worker runs the tasks of one flow: it reads the flow's queue, claims tasks with pgflow.start_tasks, runs their
// handlers with bounded concurrency and reports the results. Create it with NewWorker and start it with Run. A
// Worker runs once; its configuration is fixed at NewWorker.
type Worker struct {
	pool  *pgxpool.Pool
	slug  string
	queue string // the PGMQ queue polled: the flow's default route, read from the database at startup
	steps map[string]*stepDef
	shape json.RawMessage
	cfg   resolvedConfig
	log   *slog.Logger // carries flow and worker_id

	inputs *runInputCache
	used   atomic.Bool
	// batching: the schema has pgflow.complete_tasks and queue notifications (v0.18.0); read at startup.
	batching bool
	// fencing: the schema fences results by attempt, fails tasks permanently and releases tasks (v0.20.0); read
	// at startup.
	fencing bool
	// stopNow, when set (RunWorker: a second SIGINT/SIGTERM), ends a graceful shutdown at once: handlers are
	// cancelled and the tasks still running are released without waiting for them.
	stopNow <-chan struct{}
	hooks   workerHooks
	obs     *observer // delivers events to WorkerConfig.Hooks; nil without hooks
}

// workerHooks lets the package's tests observe and shorten the worker's lifecycle. The zero value is production
// behaviour.
type workerHooks struct {
	skipCompile   bool           // do not call ensure_flow_compiled
	shutdownBegun func()         // called once reading has stopped, before in-flight tasks are awaited
	abandonGrace  time.Duration  // how long to wait for handlers after their context was cancelled; default 10 s
	retry         backoff.Policy // backoff of database retries; zero = 100 ms .. 5 s
}

const (
	defaultAbandonGrace = 10 * time.Second
	releaseTimeout      = 5 * time.Second  // how long a stopping worker tries to put an interrupted task back
	defaultStepTimeout  = 60 * time.Second // pgflow.flows.opt_timeout's default, when a claim did not report one
	stopMarkTimeout     = 10 * time.Second // how long Run tries to record the worker as stopped
	runInputCacheSize   = 256              // runs whose input a worker keeps in memory
	maxErrorMessageLen  = 32 << 10         // longest error_message the worker stores
)

// NewWorker validates cfg, freezes flow (no step can be added afterwards) and returns a worker for it. It does not
// touch the database. Errors name the bad configuration field and value, or are the flow's definition errors.
func NewWorker(pool *pgxpool.Pool, flow AnyFlow, cfg WorkerConfig) (*Worker, error) {
	if pool == nil {
		return nil, errors.New("pgflow: NewWorker: pool is nil")
	}
	core := flowCoreOf(flow)
	if core == nil {
		return nil, errors.New("pgflow: NewWorker: flow is nil; create flows with NewFlow")
	}
	rc, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	steps, err := core.freeze()
	if err != nil {
		return nil, fmt.Errorf("pgflow: NewWorker: flow %q has definition errors: %w", core.slug, err)
	}
	shape, err := flow.Shape()
	if err != nil {
		return nil, fmt.Errorf("pgflow: NewWorker: shape of flow %q: %w", core.slug, err)
	}
	w := &Worker{
		pool:   pool,
		slug:   core.slug,
		steps:  make(map[string]*stepDef, len(steps)),
		shape:  shape,
		cfg:    rc,
		log:    rc.Logger.With("flow", core.slug, "worker_id", rc.WorkerID),
		inputs: newRunInputCache(runInputCacheSize),
	}
	w.obs = newObserver(rc.Hooks, w.log)
	for _, d := range steps {
		w.steps[d.slug] = d
	}
	return w, nil
}

// flowCoreOf returns the core of flow, or nil for a nil interface or a nil *Flow.
func flowCoreOf(flow AnyFlow) (c *flowCore) {
	if flow == nil {
		return nil
	}
	defer func() {
		if recover() != nil {
			c = nil
		}
	}()
	return flow.core()
}

// ID returns the worker's id (pgflow.workers.worker_id), a UUID.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// RunWorker creates a worker with NewWorker and runs it until ctx is cancelled or the process receives SIGINT or
// SIGTERM, then shuts it down gracefully (see Worker.Run). A second SIGINT or SIGTERM during the graceful
// shutdown stops the worker at once: the handlers' context is cancelled and the tasks still running go back to
// their queue without spending an attempt, without waiting for ShutdownTimeout.
func RunWorker(ctx context.Context, pool *pgxpool.Pool, flow AnyFlow, cfg WorkerConfig) error {
	w, err := NewWorker(pool, flow, cfg)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	return w.runUntilSignalled(ctx, sig)
}

// runUntilSignalled runs w until ctx ends or a signal arrives on sig (graceful shutdown); a second signal stops
// it at once.
func (w *Worker) runUntilSignalled(ctx context.Context, sig <-chan os.Signal) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopNow := make(chan struct{})
	w.stopNow = stopNow
	finished := make(chan struct{})
	log := w.log // Run adds the queue to w.log at startup
	var watcher sync.WaitGroup
	watcher.Go(func() {
		var first os.Signal
		select {
		case first = <-sig:
		case <-finished:
			return
		}
		log.Warn(fmt.Sprintf("received %s: shutting down gracefully (handlers may run up to %s); send %s again to stop at once "+
			"(running tasks go back to their queue without spending an attempt)", first, w.cfg.ShutdownTimeout, first),
			"signal", first.String())
		cancel()
		select {
		case again := <-sig:
			log.Warn(fmt.Sprintf("received %s again: stopping at once; cancelling handlers and releasing their tasks", again),
				"signal", again.String())
			close(stopNow)
		case <-finished:
		}
	})
	err := w.Run(ctx)
	close(finished)
	watcher.Wait()
	return err
}

// Run starts the worker and blocks until it has stopped.
//
// Startup: the flow is compiled or verified with pgflow.ensure_flow_compiled (a difference in a database where
// recompiling is not allowed returns a *ShapeMismatchError) and the worker registers in pgflow.workers.
// Transient database errors during startup are retried with capped exponential backoff until ctx ends.
//
// Then the worker polls the flow's queue, runs handlers (at most MaxConcurrent at once, refilling free slots as
// soon as a handler finishes), sends heartbeats and runs stalled-task maintenance, until ctx is cancelled or the
// worker is deprecated. Shutdown stops reading, lets in-flight handlers finish for up to ShutdownTimeout (then
// cancels their context), reports their results, records the worker as stopped and returns nil. Run never closes
// the pool. Run may be called once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.used.CompareAndSwap(false, true) {
		return fmt.Errorf("pgflow: worker %s of flow %q: Run was already called; create a new Worker", w.cfg.WorkerID, w.slug)
	}
	registering, err := w.startup(ctx)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Shutdown was requested before the worker was running: not an error. The worker row may exist if
			// registration raced with the cancellation.
			if registering {
				w.markStopped(ctx)
			}
			w.log.Info("worker stopped before startup completed")
			return nil
		}
		return err
	}
	w.serve(ctx)
	return nil
}

// startup compiles or verifies the flow and registers the worker, retrying transient database errors.
// registering reports whether registration was attempted (so a worker row may exist).
func (w *Worker) startup(ctx context.Context) (registering bool, err error) {
	status := "not checked"
	if !w.hooks.skipCompile {
		var res sqlapi.CompileResult
		err := w.retryStartup(ctx, "compile the flow", func(ctx context.Context) (err error) {
			res, err = sqlapi.EnsureFlowCompiled(ctx, w.pool, w.slug, w.shape, w.cfg.AllowDataLoss)
			return err
		})
		if err != nil {
			return false, err
		}
		status = res.Status
		switch res.Status {
		case "mismatch":
			return false, &ShapeMismatchError{Flow: w.slug, Differences: res.Differences}
		case "recompiled":
			w.log.Warn("flow definition changed: the flow was recompiled and its runs, tasks and queue were deleted",
				"differences", strings.Join(res.Differences, "; "))
		case "compiled":
			w.log.Info("flow compiled into the database")
		case "verified":
			w.log.Debug("flow definition matches the database")
		default:
			return false, fmt.Errorf("pgflow: worker %s: pgflow.ensure_flow_compiled(%q) returned the unknown status %q", w.cfg.WorkerID, w.slug, res.Status)
		}
	}
	err = w.retryStartup(ctx, "resolve the flow's queue", func(ctx context.Context) (err error) {
		w.queue, err = sqlapi.FlowQueue(ctx, w.pool, w.slug)
		return err
	})
	if err != nil {
		return false, err
	}
	w.log = w.log.With("queue", w.queue)
	err = w.retryStartup(ctx, "look for pgflow.complete_tasks", func(ctx context.Context) (err error) {
		w.batching, err = sqlapi.HasWorkerBatching(ctx, w.pool)
		return err
	})
	if err != nil {
		return false, err
	}
	if w.batching {
		err = w.retryStartup(ctx, "look for pgflow.release_tasks", func(ctx context.Context) (err error) {
			w.fencing, err = sqlapi.HasAttemptFencing(ctx, w.pool)
			return err
		})
		if err != nil {
			return false, err
		}
		if !w.fencing {
			w.log.Info("the schema is older than v0.20.0: results are not fenced by attempt, shutdown spends the attempts of " +
				"interrupted tasks and permanent errors are retried; run `pgflow migrate up`")
		}
	}
	err = w.retryStartup(ctx, "register the worker", func(ctx context.Context) error {
		return sqlapi.RegisterWorker(ctx, w.pool, w.cfg.WorkerID, w.queue, workerFunctionName)
	})
	if err != nil {
		return true, err
	}
	w.log.Info("worker started", "compilation", status,
		"max_concurrent", w.cfg.MaxConcurrent, "batch_size", w.cfg.BatchSize)
	return true, nil
}

// retryStartup runs fn until it succeeds, fails permanently, or ctx ends (then it returns ctx's error).
func (w *Worker) retryStartup(ctx context.Context, what string, fn func(context.Context) error) error {
	for n := 1; ; n++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("pgflow: worker %s: %s: %w", w.cfg.WorkerID, what, ctx.Err())
		}
		if !pgerr.Transient(err) {
			return fmt.Errorf("pgflow: worker %s: %s: %w%s", w.cfg.WorkerID, what, err, pgerr.SchemaHint(err))
		}
		delay := w.hooks.retry.Delay(n)
		w.log.Warn("worker startup: database error, retrying", "action", what, "retry", n, "delay", delay, "error", err)
		if backoff.Sleep(ctx, delay) != nil {
			return fmt.Errorf("pgflow: worker %s: %s: %w", w.cfg.WorkerID, what, ctx.Err())
		}
	}
}

// errDeprecated is the cancellation cause of the poll loop when pgflow.heartbeat_worker reports deprecation.
var errDeprecated = errors.New("worker deprecated")

// workerRun is the state of one Run after startup.
type workerRun struct {
	w   *Worker
	cfg *resolvedConfig
	log *slog.Logger

	loopCtx  context.Context // ends when shutdown begins (ctx cancelled or deprecation)
	stopLoop context.CancelCauseFunc

	handlerCtx context.Context // handlers' context; ends at the hard stop (ShutdownTimeout after shutdown began)
	hardStop   context.CancelFunc

	reportCtx context.Context // database calls for claimed tasks; ends when Run stops waiting for handlers
	abandon   context.CancelFunc
	// giveUp is closed when the worker stops waiting for handlers that ignore their cancelled context (or at once
	// on a second signal): their tasks are released.
	giveUp     chan struct{}
	giveUpOnce sync.Once
	base       context.Context // Run's context without its cancellation

	sem      chan struct{} // one token per running task
	batcher  *completionBatcher
	waker    *queueWaker // nil: poll with pgmq.read_with_poll
	tasks    sync.WaitGroup
	inFlight atomic.Int64
}

// serve runs the worker after a successful startup and returns when it has stopped.
func (w *Worker) serve(ctx context.Context) {
	base := context.WithoutCancel(ctx)
	r := &workerRun{w: w, cfg: &w.cfg, log: w.log, sem: make(chan struct{}, w.cfg.MaxConcurrent),
		giveUp: make(chan struct{}), base: base}
	r.loopCtx, r.stopLoop = context.WithCancelCause(ctx)
	r.handlerCtx, r.hardStop = context.WithCancel(base)
	r.reportCtx, r.abandon = context.WithCancel(base)
	defer r.stopLoop(nil)
	defer r.hardStop()
	defer r.abandon()
	defer w.obs.start(ctx)()

	var bg sync.WaitGroup
	hbCtx, stopHeartbeat := context.WithCancel(base)
	defer stopHeartbeat()
	bg.Go(func() { r.heartbeatLoop(hbCtx) })
	if !w.cfg.maintenanceOff {
		bg.Go(func() { r.maintenanceLoop(r.loopCtx) })
	}

	r.batcher = newCompletionBatcher(r)
	if w.batching && !w.cfg.PollOnly {
		waker, err := newQueueWaker(w.pool, w.queue, w.log)
		if err != nil {
			w.log.Warn("cannot listen for queue notifications; polling instead", "error", err)
		} else {
			r.waker = waker
		}
	}
	r.pollLoop()
	if r.waker != nil {
		r.waker.close()
	}

	cause := context.Cause(r.loopCtx)
	reason := "context cancelled"
	if errors.Is(cause, errDeprecated) {
		reason = "worker deprecated"
	}
	r.log.Info("worker shutting down: stopped reading messages", "reason", reason, "in_flight", r.inFlight.Load())
	if w.hooks.shutdownBegun != nil {
		w.hooks.shutdownBegun()
	}
	r.drain()
	r.batcher.stop()
	stopHeartbeat()
	bg.Wait()
	w.markStopped(ctx)
	r.log.Info("worker stopped")
}

// markStopped records the worker as stopped, retrying transient errors for a short while.
func (w *Worker) markStopped(ctx context.Context) {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopMarkTimeout)
	defer cancel()
	for n := 1; ; n++ {
		err := sqlapi.MarkWorkerStopped(mctx, w.pool, w.cfg.WorkerID)
		if err == nil {
			return
		}
		if !pgerr.Transient(err) || mctx.Err() != nil {
			w.log.Error("could not record the worker as stopped", "error", err)
			return
		}
		if backoff.Sleep(mctx, w.hooks.retry.Delay(n)) != nil {
			w.log.Error("could not record the worker as stopped", "error", err)
			return
		}
	}
}

// drain waits for in-flight tasks: up to ShutdownTimeout, then cancels their context and waits up to the abandon
// grace period more; then it gives up on the handlers still running and their tasks are released (put back in the
// queue without spending the attempt). A second signal (stopNow) skips both waits.
func (r *workerRun) drain() {
	done := make(chan struct{})
	go func() {
		r.tasks.Wait()
		close(done)
	}()
	timer := time.NewTimer(r.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
		r.log.Warn("shutdown timeout passed: cancelling the context of the handlers still running",
			"shutdown_timeout", r.cfg.ShutdownTimeout, "in_flight", r.inFlight.Load())
	case <-r.w.stopNow:
	}
	r.hardStop()
	grace := r.w.hooks.abandonGrace
	if grace <= 0 {
		grace = defaultAbandonGrace
	}
	giveUp := time.NewTimer(grace)
	defer giveUp.Stop()
	select {
	case <-done:
		return
	case <-giveUp.C:
		r.log.Error("handlers ignored the cancellation of their context; the worker stops without waiting for them "+
			"and puts their tasks back in the queue", "in_flight", r.inFlight.Load(), "waited", grace)
	case <-r.w.stopNow:
	}
	r.giveUpOnce.Do(func() { close(r.giveUp) })
	// The tasks' goroutines release their tasks now, each within releaseTimeout.
	last := time.NewTimer(releaseTimeout + time.Second)
	defer last.Stop()
	select {
	case <-done:
	case <-last.C:
		r.log.Error("some interrupted tasks could not be put back in the queue; stalled-task recovery will requeue them",
			"in_flight", r.inFlight.Load())
	}
	r.abandon()
}

func (r *workerRun) release(n int) {
	for range n {
		<-r.sem
	}
}

// claimLinger is how long a busy worker waits for more free slots before it reads, so that it claims many tasks
// per round trip instead of one each time a single slot frees up.
const claimLinger = 5 * time.Millisecond

// gatherSlots takes one free slot (waiting for it), then every slot free right now, up to BatchSize. When the
// last read found a full batch (more work is likely waiting) and tasks are still running, it waits up to
// claimLinger for more slots to free up. ok is false when shutdown began (no slot is held then).
func (r *workerRun) gatherSlots(backlog bool) (n int, ok bool) {
	select {
	case r.sem <- struct{}{}:
	case <-r.loopCtx.Done():
		return 0, false
	}
	n = 1
	var linger <-chan time.Time
	for n < r.cfg.BatchSize {
		select {
		case r.sem <- struct{}{}:
			n++
			continue
		default:
		}
		if !backlog || r.inFlight.Load() == 0 {
			return n, true
		}
		if linger == nil {
			t := time.NewTimer(claimLinger)
			defer t.Stop()
			linger = t.C
		}
		select {
		case r.sem <- struct{}{}:
			n++
		case <-linger:
			return n, true
		case <-r.loopCtx.Done():
			r.release(n)
			return 0, false
		}
	}
	return n, true
}

// pollLoop reads and claims messages while free slots exist, until shutdown begins.
func (r *workerRun) pollLoop() {
	failures := 0
	backlog := false // the last read returned as many messages as it asked for
	for {
		if r.loopCtx.Err() != nil {
			return
		}
		n, ok := r.gatherSlots(backlog)
		if !ok {
			return
		}
		pollStart := time.Now()
		read, tasks, err := r.poll(n)
		if err != nil {
			r.release(n)
			if r.loopCtx.Err() != nil {
				return
			}
			r.w.obs.polled(r.w, pollStart, 0, 0, err)
			failures++
			delay := r.w.hooks.retry.Delay(failures)
			r.log.Warn("polling the queue failed, retrying", "retry", failures, "delay", delay, "error", err)
			if backoff.Sleep(r.loopCtx, delay) != nil {
				return
			}
			continue
		}
		failures = 0
		backlog = read == n
		r.w.obs.polled(r.w, pollStart, read, len(tasks), nil)
		r.release(n - len(tasks))
		for _, t := range tasks {
			r.w.obs.taskClaimed(r.taskMeta(t.ClaimedTask))
			r.tasks.Add(1)
			r.inFlight.Add(1)
			go r.runTask(t)
		}
	}
}

// claimedTask is a task this worker claimed, with the time of the claim (its handler's deadline is the step's
// timeout after it).
type claimedTask struct {
	sqlapi.ClaimedTask
	claimedAt time.Time
}

// timeout is the task's effective step timeout.
func (t claimedTask) timeout() time.Duration {
	if t.TimeoutSeconds <= 0 {
		return defaultStepTimeout
	}
	return time.Duration(t.TimeoutSeconds) * time.Second
}

// ref names the task's attempt for the fenced SQL calls.
func (t claimedTask) ref() sqlapi.TaskRef {
	return sqlapi.TaskRef{RunID: t.RunID, StepSlug: t.StepSlug, TaskIndex: t.TaskIndex, Attempt: t.Attempt}
}

// claim starts the tasks of msgs with pgflow.start_tasks, retrying transient errors until shutdown begins.
func (r *workerRun) claim(msgs []sqlapi.Message) []claimedTask {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	for n := 1; ; n++ {
		// The claim itself is not cancelled by shutdown: once start_tasks has committed, its rows must reach
		// handlers, so the call may not be interrupted half way.
		claimedAt := time.Now() // not later than the claim's started_at: the deadlines below are never late
		tasks, err := sqlapi.StartTasksFromQueue(r.reportCtx, r.w.pool, r.w.slug, r.w.queue, ids, r.cfg.WorkerID)
		if err == nil {
			if len(tasks) < len(ids) {
				r.explainUnclaimed(ids, tasks)
			}
			out := make([]claimedTask, len(tasks))
			for i, t := range tasks {
				out[i] = claimedTask{ClaimedTask: t, claimedAt: claimedAt}
			}
			return out
		}
		if r.loopCtx.Err() != nil || r.reportCtx.Err() != nil {
			return nil
		}
		delay := r.w.hooks.retry.Delay(n)
		r.log.Warn("claiming tasks failed, retrying", "retry", n, "delay", delay, "messages", len(ids), "error", err)
		if backoff.Sleep(r.loopCtx, delay) != nil {
			return nil
		}
	}
}

// explainUnclaimed logs why messages of a batch were not claimed. A message with no matching task, or whose
// task belongs to another flow, is left exactly as it is (in the queue, not archived, its visibility untouched)
// and reported at warn level with its identifiers, never its body: it will reappear after its visibility timeout
// until an operator handles it (docs/queues.md). Started and finished tasks are routine redeliveries (debug).
func (r *workerRun) explainUnclaimed(ids []int64, claimed []sqlapi.ClaimedTask) {
	got := make(map[int64]bool, len(claimed))
	for _, t := range claimed {
		got[t.MsgID] = true
	}
	var missing []int64
	for _, id := range ids {
		if !got[id] {
			missing = append(missing, id)
		}
	}
	why, err := sqlapi.ClassifyUnclaimed(r.reportCtx, r.w.pool, r.w.slug, r.w.queue, missing)
	if err != nil {
		r.log.Warn("some messages were not claimed; could not tell why", "count", len(missing), "error", err)
		return
	}
	for _, u := range why {
		id := strconv.FormatInt(u.MsgID, 10)
		switch u.Reason {
		case sqlapi.UnclaimedNoTask:
			r.log.Warn("message has no matching task; left in the queue untouched (it reappears after its visibility timeout until an operator archives or deletes it)",
				"msg_id", id)
		case sqlapi.UnclaimedOtherFlow:
			r.log.Warn("message belongs to a task of another flow; skipped and left untouched",
				"msg_id", id, "task_flow", u.OwnerFlow)
		default:
			r.log.Debug("message not claimed: its task is not waiting to run", "msg_id", id, "reason", u.Reason)
		}
	}
}

// handlerResult is what a handler returned, and when.
type handlerResult struct {
	out      json.RawMessage
	err      error
	finished time.Time
}

// runTask runs the handler of one claimed task and reports its result; it frees the task's slot at the end.
//
// The handler's context carries the step's timeout as its deadline, measured from the claim. When it passes
// before the handler returns, the attempt fails at once with an error naming the step and the timeout, without
// waiting for the handler: a handler that ignores its context cannot hold the task (or its slot) beyond its
// timeout, and what it returns later is a stale result, dropped and counted (Hooks.StaleResult). At the hard stop
// of a shutdown the worker waits for the handler (up to the abandon grace), then releases the task.
func (r *workerRun) runTask(t claimedTask) {
	defer r.tasks.Done()
	defer r.release(1)
	defer r.inFlight.Add(-1)
	log := r.log.With("run_id", t.RunID, "step", t.StepSlug, "task_index", t.TaskIndex,
		"msg_id", strconv.FormatInt(t.MsgID, 10), "attempt", t.Attempt)
	meta := r.taskMeta(t.ClaimedTask)
	ctx := r.w.obs.taskStarted(r.handlerCtx, meta) // the handler's context, before its deadline

	def := r.w.steps[t.StepSlug]
	if def == nil {
		msg := fmt.Sprintf("pgflow: flow %q has no step %q in the code of worker %s (the worker runs a different version of the flow)",
			r.w.slug, t.StepSlug, r.cfg.WorkerID)
		log.Error("claimed a task of an unknown step; failing it", "error", msg)
		r.w.obs.taskFinished(ctx, meta, r.reportFailure(log, t, msg, false))
		return
	}
	if t.FlowInput != nil {
		r.w.inputs.put(t.RunID, t.FlowInput)
	}
	env := &taskEnv{
		meta:      meta,
		input:     t.Input,
		flowInput: t.FlowInput,
		loadFlowInput: func(ctx context.Context) (json.RawMessage, error) {
			return r.w.inputs.get(ctx, t.RunID, func(ctx context.Context) (json.RawMessage, error) {
				return sqlapi.RunInput(ctx, r.w.pool, t.RunID)
			})
		},
		logger: log,
	}
	timeout := t.timeout()
	deadline := t.claimedAt.Add(timeout)
	timedOut := &stepTimeoutError{step: t.StepSlug, taskIndex: t.TaskIndex, mapStep: def.stepType == stepTypeMap,
		timeout: timeout, attempt: t.Attempt, maxAttempts: t.MaxAttempts}
	hctx, cancel := context.WithDeadlineCause(ctx, deadline, timedOut)
	defer cancel()

	log.Debug("task started", "timeout", timeout)
	start := time.Now()
	done := make(chan handlerResult, 1)
	go func() {
		out, err := def.run(hctx, env)
		done <- handlerResult{out: out, err: err, finished: time.Now()}
	}()

	var res handlerResult
	select {
	case res = <-done:
	case <-hctx.Done():
		if context.Cause(hctx) == error(timedOut) {
			select {
			case res = <-done: // returned at the deadline: handled below
			default:
				r.timeoutWithoutHandler(ctx, log, meta, t, timedOut, start, done)
				return
			}
			break
		}
		// The hard stop of a shutdown: wait for the handler, until the worker gives up on it.
		select {
		case res = <-done:
		case <-r.giveUp:
			r.w.obs.handlerDone(ctx, meta, time.Since(start), context.Cause(hctx))
			r.w.obs.taskFinished(ctx, meta, r.releaseTask(log, t, "its handler ignored the cancellation of its context"))
			return
		}
	}
	elapsed := res.finished.Sub(start)
	err := res.err
	if !res.finished.Before(deadline) {
		// The deadline passed before the handler returned: the attempt timed out, whatever it returned. The
		// recorded error is the timeout alone (the same whether the worker noticed the deadline or the handler's
		// return first); what the handler returned goes to the log.
		if err == nil {
			r.staleResult(log, meta, StaleTimedOut, nil, 0)
		} else {
			log.Debug("the handler of a timed-out attempt returned an error", "error", err)
		}
		err = timedOut
	}
	r.w.obs.handlerDone(ctx, meta, elapsed, err)
	if err == nil {
		log.Debug("task completed", "duration", elapsed)
		r.w.obs.taskFinished(ctx, meta, r.reportCompletion(log, t, res.out))
		return
	}
	msg := err.Error()
	permanent := errors.Is(err, ErrPermanent)
	switch pe := (*PanicError)(nil); {
	case errors.As(err, &pe):
		log.Error("handler panicked", "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack), "duration", elapsed)
	case errors.Is(err, ErrStepTimeout):
		log.Warn("task timed out", "error", msg, "timeout", timeout, "duration", elapsed)
	case permanent:
		log.Warn("task failed with a permanent error: it is not retried", "error", msg, "duration", elapsed)
	default:
		log.Warn("task failed", "error", msg, "duration", elapsed)
	}
	if r.handlerCtx.Err() != nil && !permanent && !errors.Is(err, ErrStepTimeout) {
		// Interrupted by the shutdown's hard stop: the attempt was not the task's fault.
		if r.w.fencing {
			r.w.obs.taskFinished(ctx, meta, r.releaseTask(log, t, "the worker shut down while its handler ran"))
			return
		}
		msg = fmt.Sprintf("worker %s shut down: the handler was still running %s after shutdown began and its context was cancelled: %s",
			r.cfg.WorkerID, r.cfg.ShutdownTimeout, msg)
	}
	r.w.obs.taskFinished(ctx, meta, r.reportFailure(log, t, msg, permanent))
}

// timeoutWithoutHandler fails an attempt whose handler is still running at its step's deadline, without waiting
// for it, and watches for what the handler returns later: a stale result, dropped.
func (r *workerRun) timeoutWithoutHandler(ctx context.Context, log *slog.Logger, meta TaskMeta, t claimedTask,
	timedOut *stepTimeoutError, start time.Time, done <-chan handlerResult) {
	log.Warn("task timed out: its handler is still running; failing the attempt without waiting for it "+
		"(whatever it returns later is dropped)", "error", timedOut.Error(), "timeout", timedOut.timeout)
	r.w.obs.handlerDone(ctx, meta, time.Since(start), timedOut)
	r.w.obs.taskFinished(ctx, meta, r.reportFailure(log, t, timedOut.Error(), false))
	go func() {
		res := <-done
		if res.err != nil && (errors.Is(res.err, context.DeadlineExceeded) || errors.Is(res.err, context.Canceled)) {
			log.Debug("the handler of a timed-out attempt returned its context's error", "error", res.err)
			return
		}
		r.staleResult(log, meta, StaleTimedOut, res.err, 0)
	}()
}

// staleResult logs a result that is not recorded because its attempt is no longer current, and reports it to
// the hooks. Never the output itself: only the task's identity.
func (r *workerRun) staleResult(log *slog.Logger, meta TaskMeta, reason string, handlerErr error, current int) {
	args := []any{"reason", reason}
	if current > 0 {
		args = append(args, "current_attempt", current)
	}
	if handlerErr != nil {
		args = append(args, "handler_failed", true)
	}
	switch reason {
	case StaleTimedOut:
		log.Warn("stale result dropped: the handler returned after its step timeout had already failed this attempt", args...)
	default:
		log.Warn("stale result not recorded: this attempt is no longer the task's current attempt "+
			"(the task was recovered and claimed again)", args...)
	}
	r.w.obs.staleResult(meta, reason, handlerErr, current)
}

// reportCompletion records a successful task and returns what became of it. Completions of handlers that finish
// at about the same time are recorded together, in one transaction (completionBatcher); the outcome is the same
// as recording each alone (tryComplete, then refuseOutput for an output the database refuses).
func (r *workerRun) reportCompletion(log *slog.Logger, t claimedTask, out json.RawMessage) TaskOutcome {
	return r.batcher.complete(log, t, out)
}

// tryComplete records one successful task; refused is the database's permanent refusal of the output, when it
// refused it (then nothing was recorded and the task is still to be failed).
func (r *workerRun) tryComplete(log *slog.Logger, t claimedTask, out json.RawMessage) (o TaskOutcome, refused error) {
	var done sqlapi.CompletedTask
	_, err := r.report(log, "complete_task", func(ctx context.Context) (string, error) {
		if r.w.batching {
			res, err := sqlapi.CompleteTasks(ctx, r.w.pool, []sqlapi.TaskResult{{
				RunID: t.RunID, StepSlug: t.StepSlug, TaskIndex: t.TaskIndex, Output: out, Attempt: t.Attempt,
			}}, r.w.fencing)
			if err == nil {
				done = res[0]
			}
			return "", err
		}
		status, err := sqlapi.CompleteTask(ctx, r.w.pool, t.RunID, t.StepSlug, t.TaskIndex, out)
		done = sqlapi.CompletedTask{Status: status, Outcome: sqlapi.OutcomeIgnored}
		switch status {
		case "completed":
			done.Outcome = sqlapi.OutcomeRecorded
		case "":
			done.Outcome = sqlapi.OutcomeUnknown
		}
		return status, err
	})
	switch {
	case err != nil && refusesResult(err):
		return "", err
	case err != nil:
		r.logReportLost(log, "complete_task", err)
		return OutcomeUnreported, nil
	}
	return r.completionOutcome(log, t, done), nil
}

// completionOutcome turns what the database reported for one completion into the task's outcome, logging it.
func (r *workerRun) completionOutcome(log *slog.Logger, t claimedTask, done sqlapi.CompletedTask) TaskOutcome {
	switch done.Outcome {
	case sqlapi.OutcomeRecorded:
		if done.Status == "failed" {
			log.Warn("task failed: the database refused its output (see the task's error_message)")
			return OutcomeFailed
		}
		return OutcomeCompleted
	case sqlapi.OutcomeStale:
		r.staleResult(log, r.taskMeta(t.ClaimedTask), StaleSuperseded, nil, 0)
		return OutcomeStale
	default:
		log.Info("task result not recorded: the task is no longer running (its run failed or its step finished)",
			"status", done.Status, "outcome", done.Outcome)
		return OutcomeNotRecorded
	}
}

// refusesResult reports whether err is the database refusing a result for good (invalid data, a program limit
// such as jsonb's size or nesting, a check of the function), as opposed to an error of the setup (a missing
// function, privileges, authentication), which is no reason to fail the task.
func refusesResult(err error) bool {
	return pgerr.Permanent(err) && !pgerr.Misconfigured(err)
}

// refuseOutput fails a task whose output the database refused permanently, with the database's reason.
func (r *workerRun) refuseOutput(log *slog.Logger, t claimedTask, refused error) TaskOutcome {
	msg := fmt.Sprintf("pgflow: flow %q, step %q: the database refused the handler's output: %s", r.w.slug, t.StepSlug, pgerr.Reason(refused))
	log.Warn("task output refused by the database; failing the task without retry", "error", msg)
	return r.reportFailure(log, t, msg, true)
}

// reportFailure records a failed attempt with pgflow.fail_task (fenced by the attempt when the schema can;
// permanent: no retry) and returns what became of the task.
func (r *workerRun) reportFailure(log *slog.Logger, t claimedTask, msg string, permanent bool) TaskOutcome {
	msg = cleanErrorMessage(msg)
	var failed sqlapi.FailedTask
	_, err := r.report(log, "fail_task", func(ctx context.Context) (string, error) {
		if r.w.fencing {
			var err error
			failed, err = sqlapi.FailTaskAt(ctx, r.w.pool, t.ref(), msg, permanent)
			return failed.Status, err
		}
		status, err := sqlapi.FailTask(ctx, r.w.pool, t.RunID, t.StepSlug, t.TaskIndex, msg)
		failed = sqlapi.FailedTask{Status: status, Outcome: sqlapi.OutcomeRecorded}
		if status != "queued" && status != "failed" {
			failed.Outcome = sqlapi.OutcomeIgnored
		}
		return status, err
	})
	switch {
	case err != nil:
		r.logReportLost(log, "fail_task", err)
		return OutcomeUnreported
	case failed.Outcome == sqlapi.OutcomeStale:
		r.staleResult(log, r.taskMeta(t.ClaimedTask), StaleSuperseded, errors.New(msg), failed.CurrentAttempt)
		return OutcomeStale
	case failed.Outcome != sqlapi.OutcomeRecorded:
		log.Info("task failure not recorded: the task is no longer running (its run failed or its step finished)",
			"status", failed.Status, "outcome", failed.Outcome)
		return OutcomeNotRecorded
	case failed.Status == "queued":
		log.Info("task will be retried")
		return OutcomeRetried
	case permanent:
		log.Warn("task failed permanently: not retried", "error", msg)
		return OutcomeFailed
	default:
		log.Warn("task failed permanently: no attempts left", "error", msg)
		return OutcomeFailed
	}
}

// releaseTask puts a task interrupted by the shutdown back in its queue without spending its attempt
// (pgflow.release_tasks); why says what interrupted it. It returns OutcomeReleased, or what else became of it.
func (r *workerRun) releaseTask(log *slog.Logger, t claimedTask, why string) TaskOutcome {
	if !r.w.fencing {
		log.Warn("task interrupted by the shutdown: the schema cannot release it (before v0.20.0); stalled-task recovery will requeue it", "why", why)
		return OutcomeUnreported
	}
	ctx, cancel := context.WithTimeout(r.base, releaseTimeout)
	defer cancel()
	for n := 1; ; n++ {
		released, err := sqlapi.ReleaseTasks(ctx, r.w.pool, []sqlapi.TaskRef{t.ref()})
		switch {
		case err == nil && released[0]:
			log.Info("task put back in the queue without spending its attempt: " + why)
			return OutcomeReleased
		case err == nil:
			log.Info("task not released: this attempt is no longer running (its run or step finished, or it was recovered)")
			return OutcomeNotRecorded
		case !pgerr.Transient(err) || ctx.Err() != nil:
			log.Error("could not put the interrupted task back in the queue; stalled-task recovery will requeue it", "error", err)
			return OutcomeUnreported
		}
		if backoff.Sleep(ctx, r.w.hooks.retry.Delay(n)) != nil {
			log.Error("could not put the interrupted task back in the queue; stalled-task recovery will requeue it", "error", err)
			return OutcomeUnreported
		}
	}
}

func (r *workerRun) logReportLost(log *slog.Logger, call string, err error) {
	log.Error("could not report the task's result; the task stays started until stalled-task recovery requeues it",
		"call", "pgflow."+call, "error", err)
}

// report runs call until it succeeds. Transient errors are retried with backoff until the hard stop, after which
// one more attempt is made; other errors are returned at once. Reporting never costs the task an attempt.
func (r *workerRun) report(log *slog.Logger, what string, call func(context.Context) (string, error)) (string, error) {
	for n := 1; ; n++ {
		status, err := call(r.reportCtx)
		if err == nil {
			return status, nil
		}
		if !pgerr.Transient(err) || r.handlerCtx.Err() != nil || r.reportCtx.Err() != nil {
			return "", err
		}
		delay := r.w.hooks.retry.Delay(n)
		log.Warn("reporting the task's result failed, retrying", "call", "pgflow."+what, "retry", n, "delay", delay, "error", err)
		_ = backoff.Sleep(r.handlerCtx, delay) // at the hard stop: one last attempt
	}
}

// cleanErrorMessage makes msg storable as text: valid UTF-8, no NUL characters, bounded length.
func cleanErrorMessage(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	msg = strings.ReplaceAll(msg, "\x00", `\x00`)
	if len(msg) > maxErrorMessageLen {
		cut := maxErrorMessageLen
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + " … (truncated)"
	}
	if msg == "" {
		msg = "handler failed without an error message"
	}
	return msg
}

// heartbeatLoop sends heartbeats every HeartbeatInterval until ctx ends; it begins shutdown on deprecation and
// registers the worker again when its row is missing.
func (r *workerRun) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		deprecated, err := sqlapi.HeartbeatWorker(ctx, r.w.pool, r.cfg.WorkerID)
		switch {
		case errors.Is(err, sqlapi.ErrWorkerNotRegistered):
			r.log.Warn("worker row missing from pgflow.workers; registering again")
			if err := sqlapi.RegisterWorker(ctx, r.w.pool, r.cfg.WorkerID, r.w.queue, workerFunctionName); err != nil && ctx.Err() == nil {
				r.log.Warn("registering the worker again failed", "error", err)
			}
		case err != nil:
			if ctx.Err() == nil {
				r.log.Warn("heartbeat failed", "error", err)
			}
		case deprecated && r.loopCtx.Err() == nil:
			r.log.Info("worker deprecated: finishing in-flight tasks and stopping")
			r.stopLoop(errDeprecated)
		}
	}
}

// maintenanceLoop runs pgflow.requeue_stalled_tasks every MaintenanceInterval (when no other worker is doing it)
// until ctx ends.
func (r *workerRun) maintenanceLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.MaintenanceInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ran, n, err := sqlapi.RequeueStalledTasks(ctx, r.w.pool)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				r.log.Warn("stalled-task maintenance failed", "error", err)
			}
		case !ran:
			r.log.Debug("stalled-task maintenance skipped: another worker is running it")
		case n > 0:
			r.log.Info("requeued stalled tasks", "count", n)
		}
	}
}

// runInputCache keeps the inputs of recently seen runs so the tasks of one run load it at most once while it is
// cached. It holds at most size runs (least recently used evicted, in constant time: with one-step flows every task
// brings a new run); concurrent loads of one run share one query.
type runInputCache struct {
	mu      sync.Mutex
	size    int
	entries map[string]*list.Element // values are *inputEntry; front = most recently used
	order   *list.List
}

type inputEntry struct {
	runID string
	ready chan struct{} // closed when raw/err are set
	raw   json.RawMessage
	err   error
}

func newRunInputCache(size int) *runInputCache {
	return &runInputCache{size: size, entries: make(map[string]*list.Element), order: list.New()}
}

// put stores a run input that arrived with a task.
func (c *runInputCache) put(runID string, raw json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[runID]; ok {
		c.order.MoveToFront(el)
		return
	}
	e := &inputEntry{runID: runID, ready: make(chan struct{}), raw: raw}
	close(e.ready)
	c.insertLocked(e)
}

// get returns the input of runID, loading it with load when it is not cached. A failed load is not cached.
func (c *runInputCache) get(ctx context.Context, runID string, load func(context.Context) (json.RawMessage, error)) (json.RawMessage, error) {
	c.mu.Lock()
	if el, ok := c.entries[runID]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*inputEntry)
		c.mu.Unlock()
		select {
		case <-e.ready:
			return e.raw, e.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	e := &inputEntry{runID: runID, ready: make(chan struct{})}
	c.insertLocked(e)
	c.mu.Unlock()

	e.raw, e.err = load(ctx)
	if e.err != nil {
		c.mu.Lock()
		if el, ok := c.entries[runID]; ok && el.Value.(*inputEntry) == e {
			c.order.Remove(el)
			delete(c.entries, runID)
		}
		c.mu.Unlock()
	}
	close(e.ready)
	return e.raw, e.err
}

// insertLocked adds an entry as the most recently used, evicting the least recently used one when the cache is
// full; c.mu must be held.
func (c *runInputCache) insertLocked(e *inputEntry) {
	if c.order.Len() >= c.size {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.entries, oldest.Value.(*inputEntry).runID)
	}
	c.entries[e.runID] = c.order.PushFront(e)
}

func (c *runInputCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
