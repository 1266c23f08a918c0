// Package executor runs the handler of one claimed task and hands what it returned to the completer: the output,
// a failure (permanent or to be retried), a timeout, or, when a shutdown interrupted it, a release that does not
// spend the attempt.
//
// The handler's context carries the step's timeout as its deadline, measured from the claim. When the deadline
// passes before the handler returns, the attempt fails at once with an error naming the step and the timeout,
// without waiting for the handler: a handler that ignores its context cannot hold the task (or its slot) beyond
// its timeout, and what it returns later is a stale result, dropped and counted.
//
// It knows the completer below it and nothing above.
package executor

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pgflow-go/pgflow/internal/completer"
	"github.com/pgflow-go/pgflow/internal/observe"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/taskrun"
)

const (
	defaultStepTimeout = 60 * time.Second // pgflow.flows.opt_timeout's default, when a claim did not report one
	runInputCacheSize  = 256              // runs whose input a worker keeps in memory
)

// Task is a claimed task with where and when it was claimed.
type Task struct {
	sqlapi.ClaimedTask
	QueueName string
	WorkerID  string    // the worker row serving the queue
	ClaimedAt time.Time // not later than the claim's started_at: deadlines derived from it are never late
}

// Meta is the task's identity as handlers and hooks see it.
func (t Task) Meta() taskrun.Meta {
	return taskrun.Meta{RunID: t.RunID, FlowSlug: t.FlowSlug, StepSlug: t.StepSlug, TaskIndex: t.TaskIndex,
		Attempt: t.Attempt, MessageID: t.MsgID, WorkerID: t.WorkerID, QueueName: t.QueueName}
}

func (t Task) timeout() time.Duration {
	if t.TimeoutSeconds <= 0 {
		return defaultStepTimeout
	}
	return time.Duration(t.TimeoutSeconds) * time.Second
}

// Config configures an Executor.
type Config struct {
	Flows     map[string]*taskrun.Flow // by flow slug
	DB        sqlapi.DBTX              // reads run inputs
	Completer *completer.Completer
	Observer  *observe.Observer
	Logger    *slog.Logger
	// Handlers is the handlers' base context; it ends at the hard stop of a shutdown.
	Handlers context.Context
	// GiveUp is closed when a shutdown stops waiting for handlers that ignore their cancelled context: their tasks
	// are released.
	GiveUp <-chan struct{}
}

// Executor runs claimed tasks. It is safe for concurrent use.
type Executor struct {
	cfg     Config
	inputs  *runInputCache
	running *runRegistry
}

// New returns an Executor.
func New(cfg Config) *Executor {
	return &Executor{cfg: cfg, inputs: newRunInputCache(runInputCacheSize), running: newRunRegistry()}
}

// CancelRun cancels the context of every running handler of run runID, with a *taskrun.RunCancelledError as its
// cause, and of the handlers of that run that start within the next minute (a claim that raced the cancel). The
// poller calls it for a queue notification {"cancel_run": "<run id>"} (sent by pgflow.cancel_run). It returns how
// many running handlers it cancelled. The handlers' results are still reported: the database fences them.
func (e *Executor) CancelRun(runID string) int { return e.running.cancel(runID) }

// Run runs t's handler and reports its result; it returns once the outcome is known (a handler that outlives its
// timeout is not waited for: it goes on running on a goroutine of its own). It is Start for a caller that waits.
func (e *Executor) Run(t Task) {
	settled := make(chan struct{})
	go e.Start(&t, func() { close(settled) })
	<-settled
}

// Start runs t's handler on the calling goroutine and hands its result to the completer; settled is called once,
// when the task's outcome is known (the caller then frees the task's slot). It may be called on another
// goroutine, and before the handler has returned: a handler still running at its deadline has its attempt failed
// at once, and one that ignores a shutdown's hard stop is given up when the worker gives up (GiveUp); what such a
// handler returns later is dropped. Start returns when the handler has returned and its result is handed on,
// which may be before settled is called (a completion is recorded in a batch, later, by the completer).
//
// The handler runs on the task's own goroutine, not on one more per task: a second goroutine (its creation, its
// stack growing, a channel and a select waking the first) was a large share of the worker's own CPU per task.
// The deadline and the hard stop are watched by context.AfterFunc on the deadline's context, which starts a
// goroutine only when that context ends before the handler returns.
func (e *Executor) Start(t *Task, settled func()) {
	meta := t.Meta()
	log := taskLogger(e.cfg.Logger, t)
	ctx := e.cfg.Observer.TaskStarted(e.cfg.Handlers, meta) // the handler's context, before its deadline
	a := &attempt{e: e, ctx: ctx, meta: meta, log: log, settled: settled}

	var step *taskrun.Step
	if f := e.cfg.Flows[t.FlowSlug]; f != nil {
		step = f.Steps[t.StepSlug]
	}
	if step == nil {
		msg := fmt.Sprintf("flow %q has no step %q in the code of worker %s (the worker runs a different version of the flow)",
			t.FlowSlug, t.StepSlug, t.WorkerID)
		log.Error("claimed a task of an unknown step; failing it", "error", msg)
		a.Settle(e.cfg.Completer.Fail(log, meta, msg, false))
		return
	}
	if t.FlowInput != nil {
		e.inputs.put(t.RunID, t.FlowInput)
	}
	runID := t.RunID
	a.env = taskrun.Env{
		Meta:      meta,
		Input:     t.Input,
		FlowInput: t.FlowInput,
		LoadFlowInput: func(ctx context.Context) (json.RawMessage, error) {
			return e.inputs.get(ctx, runID, func(ctx context.Context) (json.RawMessage, error) {
				return sqlapi.RunInput(ctx, e.cfg.DB, runID)
			})
		},
		Logger: log,
	}
	timeout := t.timeout()
	deadline := t.ClaimedAt.Add(timeout)
	a.timeoutErr = taskrun.TimeoutError{Step: t.StepSlug, TaskIndex: t.TaskIndex, MapStep: step.Map,
		Timeout: timeout, Attempt: t.Attempt, MaxAttempts: t.MaxAttempts}
	// hctx carries the deadline and is what the executor watches; the handler's handlerCtx may also be cancelled
	// on its own when the task's run is cancelled (the handler is then waited for, up to its deadline).
	hctx, cancel := context.WithDeadlineCause(ctx, deadline, &a.timeoutErr)
	defer cancel()
	handlerCtx, cancelRun := context.WithCancelCause(hctx)
	defer cancelRun(nil)
	e.running.add(a, runID, cancelRun)

	debug := log.Enabled(ctx, slog.LevelDebug) // checked first: the arguments of a record cost even when it is off
	if debug {
		log.Debug("task started", "timeout", timeout)
	}
	a.start = time.Now()
	stopWatch := context.AfterFunc(hctx, func() { a.watch(hctx) })
	out, err := step.Run(handlerCtx, &a.env)
	finished := time.Now()
	if !stopWatch() && !a.returned(err) {
		return // the watcher reported the attempt: this result is late (see watch)
	}
	e.running.remove(a)

	elapsed := finished.Sub(a.start)
	if !finished.Before(deadline) {
		// The deadline passed before the handler returned: the attempt timed out, whatever it returned. The
		// recorded error is the timeout alone (the same whether the worker noticed the deadline or the handler's
		// return first); what the handler returned goes to the log.
		if err == nil {
			e.cfg.Completer.Stale(log, meta, observe.StaleTimedOut, nil, 0)
		} else {
			log.Debug("the handler of a timed-out attempt returned an error", "error", err)
		}
		err = &a.timeoutErr
	}
	e.cfg.Observer.HandlerDone(ctx, meta, elapsed, err)
	if err == nil {
		if debug {
			log.Debug("task completed", "duration", elapsed)
		}
		// Handed over in one step: the completer records it with others and settles the task itself, so this
		// goroutine ends here instead of waiting to be woken with the outcome.
		e.cfg.Completer.CompleteAsync(log, meta, out, a)
		return
	}
	runCancelled := errors.Is(context.Cause(handlerCtx), taskrun.ErrRunCancelled) && !errors.Is(err, taskrun.ErrStepTimeout)
	permanent := taskrun.Permanent(err)
	retryDelay, retryAfter := handlerRetryDelay(err, permanent)
	if p, ok := taskrun.AsPanic(err); ok {
		log.Error("handler panicked", "panic", fmt.Sprint(p.PanicValue()), "stack", string(p.PanicStack()), "duration", elapsed)
	} else {
		switch {
		case runCancelled:
			log.Info("handler stopped: its run was cancelled", "error", err.Error(), "duration", elapsed)
		case errors.Is(err, taskrun.ErrStepTimeout):
			log.Warn("task timed out", "error", err.Error(), "timeout", timeout, "duration", elapsed)
		case permanent:
			log.Warn("task failed with a permanent error: it is not retried", "error", err.Error(), "duration", elapsed)
		case retryAfter:
			log.Warn("task failed", "error", err.Error(), "duration", elapsed, "retry_after", retryDelay)
		default:
			log.Warn("task failed", "error", err.Error(), "duration", elapsed)
		}
	}
	if e.cfg.Handlers.Err() != nil && !permanent && !errors.Is(err, taskrun.ErrStepTimeout) {
		// Interrupted by the shutdown's hard stop: the attempt was not the task's fault.
		a.Settle(e.cfg.Completer.Release(log, meta, "the worker shut down while its handler ran"))
		return
	}
	if retryAfter {
		a.Settle(e.cfg.Completer.FailRetryAfter(log, meta, err.Error(), retryDelay))
		return
	}
	a.Settle(e.cfg.Completer.Fail(log, meta, err.Error(), permanent))
}

// attemptState says who reports an attempt's outcome: the task's goroutine once the handler has returned, or the
// watcher when the deadline or a shutdown's give-up came first.
type attemptState uint8

const (
	running         attemptState = iota // the handler runs; nobody reports yet
	handlerDone                         // the handler returned first: the task's goroutine reports
	timingOut                           // the watcher is failing the attempt at its deadline
	lateWaiting                         // ... and the handler has returned meanwhile: the watcher deals with its result
	timeoutRecorded                     // the watcher has failed the attempt: a late result is dealt with on return
	givenUp                             // the watcher has released the task at a shutdown's give-up: a late result is dropped
)

// attempt is one running task attempt: what reporting its outcome needs, who reports it (state), and its place
// among the running handlers of its run (runRegistry).
type attempt struct {
	e       *Executor
	ctx     context.Context // the context TaskStarted returned
	meta    taskrun.Meta
	log     *slog.Logger
	settled func()
	start   time.Time
	// Parts of the attempt kept in it rather than allocated apart (fewer allocations per task).
	env        taskrun.Env
	timeoutErr taskrun.TimeoutError // its address is the cause of the deadline, compared by identity

	mu        sync.Mutex
	state     attemptState
	handlerOK chan struct{} // made by a watcher waiting for the handler at a hard stop; closed when it returns
	lateErr   error         // what a handler returned while the watcher was failing its attempt

	// runRegistry's list of the run's running handlers (guarded by the registry's lock).
	runID      string
	cancelRun  context.CancelCauseFunc
	prev, next *attempt
	linked     bool
}

// Settle reports the task's outcome to the hooks and tells the caller of Start that the task is settled
// (completer.Settler: the completer calls it once a batched completion is recorded).
func (a *attempt) Settle(o observe.Outcome) {
	a.e.cfg.Observer.TaskFinished(a.ctx, a.meta, o)
	a.settled()
}

// returned records that the handler returned with err; it reports whether the task's goroutine reports the
// outcome (false: the watcher has taken the attempt over, and the late result is dealt with here or by it).
func (a *attempt) returned(err error) bool {
	a.mu.Lock()
	switch a.state {
	case running:
		a.state = handlerDone
		if a.handlerOK != nil {
			close(a.handlerOK)
		}
		a.mu.Unlock()
		return true
	case timingOut:
		a.state, a.lateErr = lateWaiting, err
		a.mu.Unlock()
	case timeoutRecorded:
		a.mu.Unlock()
		a.late(err)
	default: // givenUp: the task is back in its queue; the result is dropped
		a.mu.Unlock()
		a.log.Debug("the handler of a task given up at shutdown returned; its result is dropped", "error", err)
	}
	return false
}

// takeOver moves a running attempt to state to; false when the handler has returned first.
func (a *attempt) takeOver(to attemptState) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state != running {
		return false
	}
	a.state = to
	return true
}

// watch runs when hctx ends before the handler returns (context.AfterFunc). At the deadline it fails the attempt
// at once, without waiting for the handler: a handler that ignores its context cannot hold the task (or its slot)
// beyond its timeout, and what it returns later is a stale result, dropped. At a shutdown's hard stop it waits for
// the handler, until the worker gives up on it: the task is then put back in its queue.
func (a *attempt) watch(hctx context.Context) {
	e := a.e
	// Identity, not errors.Is: only this attempt's own deadline is its timeout (a parent's cause could match).
	timedOut := &a.timeoutErr
	if context.Cause(hctx) == error(timedOut) {
		if !a.takeOver(timingOut) {
			return
		}
		e.running.remove(a)
		a.log.Warn("task timed out: its handler is still running; failing the attempt without waiting for it "+
			"(whatever it returns later is dropped)", "error", timedOut.Error(), "timeout", timedOut.Timeout)
		e.cfg.Observer.HandlerDone(a.ctx, a.meta, time.Since(a.start), timedOut)
		a.Settle(e.cfg.Completer.Fail(a.log, a.meta, timedOut.Error(), false))
		a.mu.Lock()
		if a.state == lateWaiting {
			a.mu.Unlock()
			a.late(a.lateErr)
			return
		}
		a.state = timeoutRecorded
		a.mu.Unlock()
		return
	}
	// The hard stop of a shutdown: wait for the handler, until the worker gives up on it.
	a.mu.Lock()
	if a.state != running {
		a.mu.Unlock()
		return
	}
	a.handlerOK = make(chan struct{})
	ok := a.handlerOK
	a.mu.Unlock()
	select {
	case <-ok:
		return
	case <-e.cfg.GiveUp:
	}
	if !a.takeOver(givenUp) {
		return
	}
	e.running.remove(a)
	e.cfg.Observer.HandlerDone(a.ctx, a.meta, time.Since(a.start), context.Cause(hctx))
	a.Settle(e.cfg.Completer.Release(a.log, a.meta, "its handler ignored the cancellation of its context"))
}

// late deals with what a handler returned after the watcher failed its attempt at the deadline: a stale result,
// dropped and counted, unless it is just its context's error.
func (a *attempt) late(err error) {
	if err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		a.log.Debug("the handler of a timed-out attempt returned its context's error", "error", err)
		return
	}
	a.e.cfg.Completer.Stale(a.log, a.meta, observe.StaleTimedOut, err, 0)
}

// MaxRetryAfter bounds the retry delay a handler may ask for (pgflow.RetryAfter); longer delays are cut to it.
const MaxRetryAfter = 24 * time.Hour

// handlerRetryDelay is the retry delay a handler's error asks for (pgflow.RetryAfter), at most MaxRetryAfter;
// ok is false when it asks for none or when the error is permanent (a permanent error is never retried, so
// Permanent wins over RetryAfter wherever either wraps the other). A timed-out attempt's error is the timeout
// alone, so a delay the handler returned after its deadline is not used.
func handlerRetryDelay(err error, permanent bool) (time.Duration, bool) {
	if permanent {
		return 0, false
	}
	d, ok := taskrun.RetryDelay(err)
	return min(d, MaxRetryAfter), ok
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
	ready chan struct{} // closed when raw/err are set by a load; nil for an input that came with a task
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
	c.insertLocked(&inputEntry{runID: runID, raw: raw})
}

// get returns the input of runID, loading it with load when it is not cached. A failed load is not cached.
func (c *runInputCache) get(ctx context.Context, runID string, load func(context.Context) (json.RawMessage, error)) (json.RawMessage, error) {
	c.mu.Lock()
	if el, ok := c.entries[runID]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*inputEntry)
		c.mu.Unlock()
		if e.ready == nil {
			return e.raw, nil
		}
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

// cancelMemory is how long a cancelled run id is remembered, so a handler of that run that starts just after the
// notification (its claim raced the cancel) is cancelled too.
const cancelMemory = time.Minute

// runRegistry keeps the running handlers of each run, for CancelRun: a list per run threaded through the
// attempts themselves, so registering a handler allocates nothing.
type runRegistry struct {
	mu        sync.Mutex
	byRun     map[string]*attempt  // run id -> the first of its running attempts
	cancelled map[string]time.Time // recently cancelled runs, by when
}

func newRunRegistry() *runRegistry {
	return &runRegistry{byRun: map[string]*attempt{}, cancelled: map[string]time.Time{}}
}

// add registers a running handler of runID whose context cancel cancels. A handler of a run cancelled within
// cancelMemory is cancelled at once.
func (r *runRegistry) add(a *attempt, runID string, cancel context.CancelCauseFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at, ok := r.cancelled[runID]; ok && time.Since(at) < cancelMemory {
		cancel(&taskrun.RunCancelledError{RunID: runID})
	}
	a.runID, a.cancelRun, a.linked = runID, cancel, true
	a.prev, a.next = nil, r.byRun[runID]
	if a.next != nil {
		a.next.prev = a
	}
	r.byRun[runID] = a
}

// remove unregisters a handler; removing one twice (or one never added) does nothing.
func (r *runRegistry) remove(a *attempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !a.linked {
		return
	}
	a.linked = false
	if a.next != nil {
		a.next.prev = a.prev
	}
	switch {
	case a.prev != nil:
		a.prev.next = a.next
	case a.next != nil:
		r.byRun[a.runID] = a.next
	default:
		delete(r.byRun, a.runID)
	}
	a.prev, a.next = nil, nil
}

// cancel cancels the running handlers of runID and remembers the run for cancelMemory.
func (r *runRegistry) cancel(runID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for id, at := range r.cancelled {
		if now.Sub(at) >= cancelMemory {
			delete(r.cancelled, id)
		}
	}
	r.cancelled[runID] = now
	n := 0
	for a := r.byRun[runID]; a != nil; a = a.next {
		a.cancelRun(&taskrun.RunCancelledError{RunID: runID})
		n++
	}
	return n
}
