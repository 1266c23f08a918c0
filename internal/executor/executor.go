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
	"strconv"
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

// handlerResult is what a handler returned, and when.
type handlerResult struct {
	out      json.RawMessage
	err      error
	finished time.Time
}

// Run runs t's handler and reports its result; it returns once the outcome is known (a handler that outlives its
// timeout is not waited for).
func (e *Executor) Run(t Task) {
	meta := t.Meta()
	log := taskLogger(e.cfg.Logger, slog.String("flow", t.FlowSlug), slog.String("worker_id", t.WorkerID),
		slog.String("queue", t.QueueName), slog.String("run_id", t.RunID), slog.String("step", t.StepSlug),
		slog.Int("task_index", t.TaskIndex), slog.String("msg_id", strconv.FormatInt(t.MsgID, 10)),
		slog.Int("attempt", t.Attempt))
	ctx := e.cfg.Observer.TaskStarted(e.cfg.Handlers, meta) // the handler's context, before its deadline
	finish := func(o observe.Outcome) { e.cfg.Observer.TaskFinished(ctx, meta, o) }

	var step *taskrun.Step
	if f := e.cfg.Flows[t.FlowSlug]; f != nil {
		step = f.Steps[t.StepSlug]
	}
	if step == nil {
		msg := fmt.Sprintf("flow %q has no step %q in the code of worker %s (the worker runs a different version of the flow)",
			t.FlowSlug, t.StepSlug, t.WorkerID)
		log.Error("claimed a task of an unknown step; failing it", "error", msg)
		finish(e.cfg.Completer.Fail(log, meta, msg, false))
		return
	}
	if t.FlowInput != nil {
		e.inputs.put(t.RunID, t.FlowInput)
	}
	env := &taskrun.Env{
		Meta:      meta,
		Input:     t.Input,
		FlowInput: t.FlowInput,
		LoadFlowInput: func(ctx context.Context) (json.RawMessage, error) {
			return e.inputs.get(ctx, t.RunID, func(ctx context.Context) (json.RawMessage, error) {
				return sqlapi.RunInput(ctx, e.cfg.DB, t.RunID)
			})
		},
		Logger: log,
	}
	timeout := t.timeout()
	deadline := t.ClaimedAt.Add(timeout)
	timedOut := &taskrun.TimeoutError{Step: t.StepSlug, TaskIndex: t.TaskIndex, MapStep: step.Map,
		Timeout: timeout, Attempt: t.Attempt, MaxAttempts: t.MaxAttempts}
	// hctx carries the deadline and is what the executor watches; the handler's handlerCtx may also be cancelled
	// on its own when the task's run is cancelled (the handler is then waited for, up to its deadline).
	hctx, cancel := context.WithDeadlineCause(ctx, deadline, timedOut)
	defer cancel()
	handlerCtx, cancelRun := context.WithCancelCause(hctx)
	defer cancelRun(nil)
	defer e.running.add(t.RunID, cancelRun)()

	log.Debug("task started", "timeout", timeout)
	start := time.Now()
	done := make(chan handlerResult, 1)
	go func() {
		out, err := step.Run(handlerCtx, env)
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
				e.timeoutWithoutHandler(ctx, log, meta, timedOut, start, done, finish)
				return
			}
			break
		}
		// The hard stop of a shutdown: wait for the handler, until the worker gives up on it.
		select {
		case res = <-done:
		case <-e.cfg.GiveUp:
			e.cfg.Observer.HandlerDone(ctx, meta, time.Since(start), context.Cause(hctx))
			finish(e.cfg.Completer.Release(log, meta, "its handler ignored the cancellation of its context"))
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
			e.cfg.Completer.Stale(log, meta, observe.StaleTimedOut, nil, 0)
		} else {
			log.Debug("the handler of a timed-out attempt returned an error", "error", err)
		}
		err = timedOut
	}
	e.cfg.Observer.HandlerDone(ctx, meta, elapsed, err)
	if err == nil {
		log.Debug("task completed", "duration", elapsed)
		finish(e.cfg.Completer.Complete(log, meta, res.out))
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
		finish(e.cfg.Completer.Release(log, meta, "the worker shut down while its handler ran"))
		return
	}
	if retryAfter {
		finish(e.cfg.Completer.FailRetryAfter(log, meta, err.Error(), retryDelay))
		return
	}
	finish(e.cfg.Completer.Fail(log, meta, err.Error(), permanent))
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

// timeoutWithoutHandler fails an attempt whose handler is still running at its step's deadline, without waiting
// for it, and watches for what the handler returns later: a stale result, dropped.
func (e *Executor) timeoutWithoutHandler(ctx context.Context, log *slog.Logger, meta taskrun.Meta,
	timedOut *taskrun.TimeoutError, start time.Time, done <-chan handlerResult, finish func(observe.Outcome)) {
	log.Warn("task timed out: its handler is still running; failing the attempt without waiting for it "+
		"(whatever it returns later is dropped)", "error", timedOut.Error(), "timeout", timedOut.Timeout)
	e.cfg.Observer.HandlerDone(ctx, meta, time.Since(start), timedOut)
	finish(e.cfg.Completer.Fail(log, meta, timedOut.Error(), false))
	go func() {
		res := <-done
		if res.err != nil && (errors.Is(res.err, context.DeadlineExceeded) || errors.Is(res.err, context.Canceled)) {
			log.Debug("the handler of a timed-out attempt returned its context's error", "error", res.err)
			return
		}
		e.cfg.Completer.Stale(log, meta, observe.StaleTimedOut, res.err, 0)
	}()
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

// cancelMemory is how long a cancelled run id is remembered, so a handler of that run that starts just after the
// notification (its claim raced the cancel) is cancelled too.
const cancelMemory = time.Minute

// runRegistry maps run ids to the cancel functions of their running handlers.
type runRegistry struct {
	mu        sync.Mutex
	next      uint64
	byRun     map[string]map[uint64]context.CancelCauseFunc
	cancelled map[string]time.Time // recently cancelled runs, by when
}

func newRunRegistry() *runRegistry {
	return &runRegistry{byRun: map[string]map[uint64]context.CancelCauseFunc{}, cancelled: map[string]time.Time{}}
}

// add registers a running handler of runID and returns the function that removes it. A handler of a run
// cancelled within cancelMemory is cancelled at once.
func (r *runRegistry) add(runID string, cancel context.CancelCauseFunc) (remove func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at, ok := r.cancelled[runID]; ok && time.Since(at) < cancelMemory {
		cancel(&taskrun.RunCancelledError{RunID: runID})
	}
	r.next++
	id := r.next
	set := r.byRun[runID]
	if set == nil {
		set = map[uint64]context.CancelCauseFunc{}
		r.byRun[runID] = set
	}
	set[id] = cancel
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		cur := r.byRun[runID]
		delete(cur, id)
		if len(cur) == 0 {
			delete(r.byRun, runID)
		}
	}
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
	set := r.byRun[runID]
	for _, cancel := range set {
		cancel(&taskrun.RunCancelledError{RunID: runID})
	}
	return len(set)
}
