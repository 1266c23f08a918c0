package pgflow

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow/internal/backoff"
	"github.com/pgflow-go/pgflow/internal/claimer"
	"github.com/pgflow-go/pgflow/internal/completer"
	"github.com/pgflow-go/pgflow/internal/executor"
	"github.com/pgflow-go/pgflow/internal/maintenance"
	"github.com/pgflow-go/pgflow/internal/notify"
	"github.com/pgflow-go/pgflow/internal/observe"
	"github.com/pgflow-go/pgflow/internal/pgerr"
	"github.com/pgflow-go/pgflow/internal/poller"
	"github.com/pgflow-go/pgflow/internal/scheduler"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/taskrun"
)

// workerFunctionName is recorded as pgflow.workers.function_name for every Go worker.
const workerFunctionName = "pgflow-go"

const (
	// abandonGrace is how long a stopping worker waits for handlers after it cancelled their context; then it
	// stops waiting and puts their tasks back in the queue.
	abandonGrace = 10 * time.Second
	// releaseTimeout bounds how long the tasks of abandoned handlers take to be put back.
	releaseTimeout = 6 * time.Second
	// stopMarkTimeout is how long a stopping worker tries to record its rows as stopped.
	stopMarkTimeout = 10 * time.Second
)

// Worker runs the tasks of one or more flows: for each flow's queue it reads messages, claims their tasks with
// pgflow.start_tasks, runs their handlers (all flows share one pool of handler slots; a flow may have a smaller
// share of its own) and records the results. One Worker per process is the intent: it shares the Client's LISTEN
// connection, and runs one heartbeat timer and one maintenance loop for all its flows.
//
// Create it with NewWorker. Start it with Start (returns once it is running) and stop it with Stop, or use Run,
// which does both around a context. A Worker runs once.
type Worker struct {
	client *Client
	pool   *pgxpool.Pool
	cfg    resolvedConfig
	flows  []*workerFlow
	log    *slog.Logger
	retry  backoff.Policy

	mu      sync.Mutex
	started bool
	running bool

	loop       context.Context // ends when shutdown begins
	stopLoop   context.CancelFunc
	hardStop   context.CancelFunc // cancels the handlers' context
	abandon    context.CancelFunc // cancels the report calls
	cancelNow  chan struct{}      // closed by StopAndCancel: cancel handlers at once
	hurry      chan struct{}      // closed when a Stop's context ended: stop waiting for handlers at once
	cancelOnce sync.Once
	hurryOnce  sync.Once
	stopped    chan struct{} // closed when the worker has stopped
}

// workerFlow is one WorkerFlow: a flow, or chosen steps of a flow with per-step queues, with the queues it reads.
type workerFlow struct {
	def    *taskrun.Flow
	limit  int // WorkerFlow.MaxConcurrent (0: none)
	batch  int // WorkerFlow.BatchSize or WorkerConfig.BatchSize
	queues []*servedQueue
}

// servedQueue is one queue a worker reads, with the steps routed to it and its worker row.
type servedQueue struct {
	name     string
	steps    []string // the flow's steps whose tasks this queue carries, in step order
	workerID string
}

// NewWorker validates cfg, freezes its flows (no step can be added afterwards) and returns a worker for them. It
// does not touch the database. Errors name the bad configuration field and value, or are the flows' definition
// errors.
func NewWorker(client *Client, cfg *WorkerConfig) (*Worker, error) {
	if client == nil {
		return nil, errors.New("pgflow: NewWorker: client is nil; create one with NewClient")
	}
	if cfg == nil {
		return nil, errors.New("pgflow: NewWorker: config is nil; give at least WorkerConfig.Flows")
	}
	rc, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	w := &Worker{client: client, pool: client.pool, cfg: rc, log: rc.Logger, stopped: make(chan struct{}),
		cancelNow: make(chan struct{}), hurry: make(chan struct{})}
	defs := map[string]*taskrun.Flow{}
	rows := 0
	for _, wf := range rc.Flows {
		slug := flowCoreOf(wf.Flow).slug
		def, ok := defs[slug]
		if !ok {
			if def, err = wf.Flow.EngineFlow(); err != nil {
				return nil, fmt.Errorf("pgflow: NewWorker: %w", err)
			}
			defs[slug] = def
		}
		f := &workerFlow{def: def, limit: wf.MaxConcurrent, batch: cmp.Or(wf.BatchSize, rc.BatchSize)}
		for _, q := range routesOf(def, wf.Steps) {
			q.workerID = rowID(rc, rows, def, q.name)
			rows++
			f.queues = append(f.queues, q)
		}
		w.flows = append(w.flows, f)
	}
	return w, nil
}

// routesOf returns the queues that carry the given steps of def (all steps when steps is empty): the flow's one
// queue, or with per-step queues one queue per step, in step order.
func routesOf(def *taskrun.Flow, steps []string) []*servedQueue {
	if def.QueueMode != queueModeStep {
		return []*servedQueue{{name: strings.ToLower(def.Slug), steps: steps}}
	}
	if len(steps) == 0 {
		steps = def.StepOrder
	}
	index := make(map[string]int, len(def.StepOrder))
	for i, s := range def.StepOrder {
		index[s] = i
	}
	qs := make([]*servedQueue, 0, len(steps))
	for _, s := range def.StepOrder {
		if slices.Contains(steps, s) {
			qs = append(qs, &servedQueue{name: stepQueueName(def.Slug, s, index[s]), steps: []string{s}})
		}
	}
	return qs
}

// rowID is the id of the worker's n-th row: WorkerID (or a random id) for the first; for the others an id derived
// from WorkerID and the flow slug (a flow's one queue) or the queue name (a per-step queue), so a restarted worker
// with the same WorkerID keeps its rows, or a random one.
func rowID(rc resolvedConfig, n int, def *taskrun.Flow, queue string) string {
	if n == 0 {
		return rc.WorkerID
	}
	if rc.workerIDDefault {
		return newUUID()
	}
	key := def.Slug
	if def.QueueMode == queueModeStep {
		key = queue
	}
	sum := sha256.Sum256([]byte(rc.WorkerID + "/" + key))
	return formatUUID(sum[:16], 5)
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

// ID returns the id of the worker's row for its first queue (pgflow.workers.worker_id), a UUID: WorkerID when it
// was given. A worker reading several queues (several flows, or steps with per-step queues) has one row per
// queue; WorkerIDs lists them.
func (w *Worker) ID() string {
	for _, f := range w.flows {
		if len(f.queues) > 0 {
			return f.queues[0].workerID
		}
	}
	return w.cfg.WorkerID // only flows with per-step queues and no steps: no rows
}

// WorkerIDs returns the worker's row id for each queue it reads, by queue name (a flow's queue is its slug in
// lower case; see QueuePerStep for per-step queues).
func (w *Worker) WorkerIDs() map[string]string {
	ids := map[string]string{}
	for _, f := range w.flows {
		for _, q := range f.queues {
			ids[q.name] = q.workerID
		}
	}
	return ids
}

// Run starts the worker (see Start), runs it until ctx is cancelled or the database deprecates it, then stops it
// gracefully (see Stop; handlers get up to ShutdownTimeout). It returns Start's error, or nil. Signals are the
// caller's business: cancel ctx on SIGTERM, and call StopAndCancel (or cancel the context of a Stop) on a second
// one (examples/ and the CLI show how).
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			w.log.Info("worker stopped before startup completed")
			return nil
		}
		return err
	}
	select {
	case <-ctx.Done():
	case <-w.stopped:
	}
	return w.Stop(context.WithoutCancel(ctx))
}

// Start compiles or verifies every flow (pgflow.ensure_flow_compiled: a difference where recompiling is not
// allowed returns a *ShapeMismatchError), registers one worker row per flow's queue and starts reading. It
// returns once the worker is running; ctx bounds the startup only. Transient database errors during startup are
// retried with capped exponential backoff until ctx ends. A schema older than this code needs fails with a
// message saying to run `pgflow migrate up`.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return fmt.Errorf("pgflow: worker %s: Start was already called; create a new Worker", w.ID())
	}
	w.started = true
	w.mu.Unlock()

	if err := w.startup(ctx); err != nil {
		w.markStopped(ctx)
		close(w.stopped)
		return err
	}
	w.launch(ctx)
	var names []string
	for _, f := range w.flows {
		for _, q := range f.queues {
			names = append(names, q.name)
		}
	}
	w.log.Info("worker started", "worker_id", w.ID(), "queues", strings.Join(names, ","),
		"max_concurrent", w.cfg.MaxConcurrent, "batch_size", w.cfg.BatchSize, "listen", !w.cfg.PollOnly)
	return nil
}

// startup checks the schema, compiles or verifies the flows and registers the worker rows.
func (w *Worker) startup(ctx context.Context) error {
	err := w.retryStartup(ctx, "check the schema version", func(ctx context.Context) error {
		_, err := sqlapi.SchemaVersion(ctx, w.pool)
		return err
	})
	if err != nil {
		return err
	}
	compiled := map[string]bool{}
	for _, f := range w.flows {
		if compiled[f.def.Slug] {
			continue
		}
		compiled[f.def.Slug] = true
		if err := w.compile(ctx, f.def); err != nil {
			return err
		}
	}
	for _, f := range w.flows {
		for _, q := range f.queues {
			err := w.retryStartup(ctx, fmt.Sprintf("register the worker of queue %q (flow %q)", q.name, f.def.Slug),
				func(ctx context.Context) error {
					return sqlapi.RegisterWorker(ctx, w.pool, q.workerID, q.name, workerFunctionName)
				})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// compile compiles or verifies one flow, then checks that the database routes its steps to the queues the worker
// will read.
func (w *Worker) compile(ctx context.Context, def *taskrun.Flow) error {
	var res sqlapi.CompileResult
	err := w.retryStartup(ctx, fmt.Sprintf("compile flow %q", def.Slug), func(ctx context.Context) (err error) {
		res, err = sqlapi.EnsureFlowCompiled(ctx, w.pool, def.Slug, def.Shape,
			sqlapi.FlowDeployment{QueueMode: def.QueueMode, MessageRetention: def.MessageRetention}, w.cfg.AllowDataLoss)
		return err
	})
	if err != nil {
		return err
	}
	log := w.log.With("flow", def.Slug)
	switch res.Status {
	case "mismatch":
		return &ShapeMismatchError{Flow: def.Slug, Differences: res.Differences}
	case "recompiled":
		log.Warn("flow definition changed: the flow was recompiled and its runs, tasks and queues were deleted",
			"differences", strings.Join(res.Differences, "; "))
	case "compiled":
		log.Info("flow compiled into the database", "queue_mode", def.QueueMode)
	case "verified":
		log.Debug("flow definition matches the database")
	default:
		return fmt.Errorf("pgflow: worker %s: pgflow.ensure_flow_compiled(%q) returned the unknown status %q", w.ID(), def.Slug, res.Status)
	}
	var routes map[string]string
	err = w.retryStartup(ctx, fmt.Sprintf("read the queues of flow %q", def.Slug), func(ctx context.Context) (err error) {
		routes, err = sqlapi.StepRoutes(ctx, w.pool, def.Slug)
		return err
	})
	if err != nil {
		return err
	}
	for _, q := range routesOf(def, nil) {
		for _, s := range q.steps {
			if routes[s] != q.name {
				return fmt.Errorf("pgflow: worker %s: step %q of flow %q is routed to queue %q in the database, but the worker would read %q; "+
					"the steps' routes were changed outside pgflow", w.ID(), s, def.Slug, routes[s], q.name)
			}
		}
	}
	return w.upsertSchedules(ctx)
}

// retryStartup runs fn until it succeeds, fails permanently, or ctx ends (then it returns ctx's error).
func (w *Worker) retryStartup(ctx context.Context, what string, fn func(context.Context) error) error {
	err := pgerr.Retry(ctx, w.retry, func(n int, delay time.Duration, err error) {
		w.log.Warn("worker startup: database error, retrying", "action", what, "retry", n, "delay", delay, "error", err)
	}, fn)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("pgflow: worker %s: %s: %w", w.ID(), what, ctx.Err())
	case errors.Is(err, sqlapi.ErrSchemaTooOld):
		return fmt.Errorf("pgflow: worker %s: %w", w.ID(), err)
	default:
		return fmt.Errorf("pgflow: worker %s: %s: %w%s", w.ID(), what, err, pgerr.SchemaHint(err))
	}
}

// launch builds the engine for a started worker and starts its loops; a goroutine then waits for the shutdown
// to begin and carries it out (shutdown).
func (w *Worker) launch(ctx context.Context) {
	base := context.WithoutCancel(ctx)
	var loop, handlers, calls context.Context
	loop, w.stopLoop = context.WithCancel(base)
	handlers, w.hardStop = context.WithCancel(base)
	calls, w.abandon = context.WithCancel(base)
	w.loop = loop
	giveUp := make(chan struct{})

	obs := observe.New(sinksOf(w.cfg.Hooks), w.log)
	stopObserver := obs.Start(base)
	tasks := &poller.Tasks{}
	comp := completer.New(completer.Config{DB: w.pool, Logger: w.log, Observer: obs, QueueSize: w.cfg.MaxConcurrent,
		InFlight: tasks.InFlight, Retry: w.retry, HardStop: handlers, Calls: calls, Base: base})
	flows := make(map[string]*taskrun.Flow, len(w.flows))
	for _, f := range w.flows {
		flows[f.def.Slug] = f.def
	}
	exec := executor.New(executor.Config{Flows: flows, DB: w.pool, Completer: comp, Observer: obs, Logger: w.log,
		Handlers: handlers, GiveUp: giveUp})

	var listener *notify.Listener
	if !w.cfg.PollOnly {
		listener = w.client.notifier()
	}
	slots := poller.NewSlots(w.cfg.MaxConcurrent)
	var pollers sync.WaitGroup
	var subs []*notify.Subscription
	type ownSub struct {
		sub   *notify.Subscription
		queue string
		log   *slog.Logger
	}
	var owns []ownSub
	var rows []maintenance.Row
	for _, f := range w.flows {
		var flowSlots poller.Slots
		if f.limit > 0 && f.limit < w.cfg.MaxConcurrent {
			flowSlots = poller.NewSlots(f.limit)
		}
		for _, q := range f.queues {
			log := w.log.With("flow", f.def.Slug, "worker_id", q.workerID, "queue", q.name)
			var sub, own *notify.Subscription
			if listener != nil {
				s, err := listener.Subscribe(sqlapi.QueueChannel(q.name))
				if err != nil {
					log.Warn("cannot listen for queue notifications; polling instead", "error", err)
				} else {
					sub = s
					subs = append(subs, s)
					// The worker row's own channel: the schema wakes one alive worker of a queue there (v0.20.0).
					if s, err := listener.Subscribe(sqlapi.WorkerChannel(q.workerID)); err != nil {
						log.Warn("cannot listen on the worker's own channel; woken by queue notifications only", "error", err)
					} else {
						own = s
						owns = append(owns, ownSub{sub: s, queue: q.name, log: log})
					}
				}
			}
			row := maintenance.Row{WorkerID: q.workerID, Queue: q.name}
			if own != nil {
				// The heartbeat tells the schema whether this row's LISTEN is in effect, and in which server session:
				// only while it is and that session exists may it be woken alone (a wake sent to a row that does not
				// listen, or whose process died, would be lost until a periodic read).
				row.ListenerPID = own.ListenerPID
			}
			rows = append(rows, row)
			p := poller.New(poller.Config{
				DB: w.pool, Flow: f.def.Slug, Queue: q.name, WorkerID: q.workerID, BatchSize: f.batch,
				VisibilitySeconds: w.cfg.vtSeconds, MaxPollSeconds: w.cfg.maxPollSeconds, PollIntervalMs: w.cfg.pollIntervalMs,
				MaxPollWait: w.cfg.MaxPollWait, Slots: slots, FlowSlots: flowSlots, Wake: sub, Own: own, Listener: listener,
				Claimer: claimer.New(claimer.Config{DB: w.pool, Read: w.pool, Flow: f.def.Slug, Queue: q.name,
					WorkerID: q.workerID, Logger: log, Retry: w.retry, Lane: comp}),
				Expect: comp.Expect, Executor: exec, Tasks: tasks, Observer: obs, Logger: log, Retry: w.retry,
			})
			pollers.Go(func() { p.Run(loop, calls) })
		}
	}

	var bg sync.WaitGroup
	beat, stopBeat := context.WithCancel(base)
	bg.Go(func() {
		maintenance.Heartbeat(beat, w.pool, rows, workerFunctionName, w.cfg.HeartbeatInterval, w.log, w.stopLoop)
	})
	if !w.cfg.maintenanceOff {
		bg.Go(func() { maintenance.RequeueStalled(loop, w.pool, w.cfg.MaintenanceInterval, w.log) })
	}
	bg.Go(func() { scheduler.New(scheduler.Config{DB: w.pool, Logger: w.log.With("worker_id", w.ID())}).Run(loop) })

	w.mu.Lock()
	w.running = true
	w.mu.Unlock()

	go func() {
		<-loop.Done()
		pollers.Wait()
		for _, s := range subs {
			s.Close()
		}
		// Until the rows are recorded as stopped, pgflow._wake_queue may still wake this worker alone: pass such
		// wakes on to the queues' other workers.
		forward, stopForward := context.WithCancel(base)
		var forwarders sync.WaitGroup
		for _, o := range owns {
			forwarders.Go(func() { poller.ForwardWakes(forward, w.pool, o.queue, o.sub, o.log) })
		}
		w.log.Info("worker shutting down: stopped reading messages", "worker_id", w.ID(), "in_flight", tasks.InFlight())
		w.drain(tasks, giveUp)
		comp.Stop()
		stopBeat()
		bg.Wait()
		stopObserver()
		w.markStopped(base)
		stopForward()
		forwarders.Wait()
		for _, o := range owns {
			o.sub.Close()
		}
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
		w.log.Info("worker stopped", "worker_id", w.ID())
		close(w.stopped)
	}()
}

// drain waits for in-flight tasks: up to ShutdownTimeout (StopAndCancel: not at all), then cancels their context
// and waits up to abandonGrace more; then it gives up on the handlers still running and their tasks are put back
// in the queue without spending the attempt. A Stop whose context ends skips both waits.
func (w *Worker) drain(tasks *poller.Tasks, giveUp chan struct{}) {
	done := make(chan struct{})
	go func() {
		tasks.Wait()
		close(done)
	}()
	timer := time.NewTimer(w.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
		w.log.Warn("shutdown timeout passed: cancelling the context of the handlers still running",
			"shutdown_timeout", w.cfg.ShutdownTimeout, "in_flight", tasks.InFlight())
	case <-w.cancelNow:
	case <-w.hurry:
	}
	w.hardStop()
	grace := time.NewTimer(abandonGrace)
	defer grace.Stop()
	select {
	case <-done:
		w.abandon()
		return
	case <-grace.C:
		w.log.Error("handlers ignored the cancellation of their context; the worker stops without waiting for them "+
			"and puts their tasks back in the queue", "in_flight", tasks.InFlight(), "waited", abandonGrace)
	case <-w.hurry:
	}
	close(giveUp)
	last := time.NewTimer(releaseTimeout)
	defer last.Stop()
	select {
	case <-done:
	case <-last.C:
		w.log.Error("some interrupted tasks could not be put back in the queue; stalled-task recovery will requeue them",
			"in_flight", tasks.InFlight())
	}
	w.abandon()
}

// Stop stops the worker gracefully and returns once it has stopped: it stops reading, lets the running handlers
// finish (for up to ShutdownTimeout; then their context is cancelled, and handlers that ignore the cancellation
// are given up after a grace period), records their results, and marks the worker's rows stopped. Tasks whose
// handler was interrupted go back to their queue without spending an attempt. When ctx ends first, the worker
// stops at once: handlers are cancelled and their tasks put back (ctx's error is returned). Stop never closes the
// pool. Stopping a worker that was never started, or is already stopped, returns nil.
func (w *Worker) Stop(ctx context.Context) error {
	return w.stop(ctx, false)
}

// StopAndCancel is Stop without waiting for handlers to finish on their own: their context is cancelled at once,
// and their tasks go back to the queue without spending an attempt. Use it for a second SIGINT/SIGTERM.
func (w *Worker) StopAndCancel(ctx context.Context) error {
	return w.stop(ctx, true)
}

func (w *Worker) stop(ctx context.Context, cancel bool) error {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	if cancel {
		w.cancelOnce.Do(func() { close(w.cancelNow) })
	}
	if w.stopLoop != nil {
		w.stopLoop()
	}
	select {
	case <-w.stopped:
		return nil
	case <-ctx.Done():
		w.hurryOnce.Do(func() { close(w.hurry) })
		<-w.stopped
		return ctx.Err()
	}
}

// Stopped returns a channel closed once the worker has stopped (after Stop, a deprecation, or a failed Start).
func (w *Worker) Stopped() <-chan struct{} { return w.stopped }

// markStopped records the worker's rows as stopped, retrying transient errors for a short while.
func (w *Worker) markStopped(ctx context.Context) {
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopMarkTimeout)
	defer cancel()
	for _, f := range w.flows {
		for _, q := range f.queues {
			err := pgerr.Retry(mctx, w.retry, nil, func(ctx context.Context) error {
				return sqlapi.MarkWorkerStopped(ctx, w.pool, q.workerID)
			})
			if err != nil && !errors.Is(err, sqlapi.ErrWorkerNotRegistered) {
				w.log.Error("could not record the worker as stopped", "worker_id", q.workerID, "error", err)
			}
		}
	}
}
