package pgflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// Hooks observes a worker: polls, claimed tasks, handler runs and the results recorded in the database. Set
// WorkerConfig.Hooks to use one; combine several with MultiHooks. Ready adapters live in their own packages
// (pgflowprom for Prometheus, pgflowotel for OpenTelemetry), so this package depends on neither.
//
// Hooks cannot stall or crash the worker:
//   - TaskStarted is called synchronously on the task's goroutine just before its handler runs, because the
//     context it returns becomes the handler's context (an OpenTelemetry adapter puts the task's span there). It
//     should return promptly: while it runs, only that task waits.
//   - Every other method is called on one goroutine of the worker that delivers events in the order they
//     happened, off the worker's paths. When the hooks fall behind by more than a buffer of events, new events
//     are dropped (and the worker logs how many) rather than slowing the worker down. Every event carries the
//     time it happened, so delivery delay does not distort durations or span times.
//   - A panic in a hook is recovered and logged with the hook's type and method; the event is skipped for that
//     hook only.
//
// The context passed to TaskStarted is the handler's context before the hooks; the context passed to
// HandlerDone and TaskFinished of a task is the one TaskStarted returned (never cancelled). TaskClaimed and
// PollDone get the context Run was called with, without its cancellation.
//
// Embed NoopHooks in an implementation to pick only the methods it needs and keep compiling when methods are
// added.
type Hooks interface {
	// PollDone reports one read of the queue and the claim of the messages read (pgmq.read_with_poll, then
	// pgflow.start_tasks): its round-trip latency, which includes read_with_poll's wait for messages on an
	// empty queue (up to WorkerConfig.MaxPollWait).
	PollDone(ctx context.Context, e PollEvent)
	// TaskClaimed reports a task claimed by pgflow.start_tasks; its handler starts next.
	TaskClaimed(ctx context.Context, e TaskEvent)
	// TaskStarted reports that the worker began executing a claimed task and returns the context for its
	// handler, which must be ctx or derived from it. Every TaskStarted is followed by exactly one TaskFinished
	// for the same task (and, when the handler ran, one HandlerDone before it).
	TaskStarted(ctx context.Context, e TaskEvent) context.Context
	// HandlerDone reports that a task's handler returned (or panicked), with how long it ran.
	HandlerDone(ctx context.Context, e HandlerEvent)
	// TaskFinished reports what became of a started task: completed, retried, failed, not recorded (the task
	// was no longer running), stale (another attempt of the task is current), released (put back in the queue by
	// a shutdown) or unreported (the database could not be reached).
	TaskFinished(ctx context.Context, e TaskFinishedEvent)
	// StaleResult reports a handler result that was not recorded because the attempt that produced it is no
	// longer the task's current attempt: the task was recovered after its timeout and claimed again, so the
	// database fenced the report (Reason StaleSuperseded; that task's TaskFinished has OutcomeStale), or the
	// handler returned after its step timeout had already failed the attempt (StaleTimedOut; reported after the
	// task's TaskFinished). Nothing was changed in the database. ctx is the context Run was called with, without
	// its cancellation.
	StaleResult(ctx context.Context, e StaleResultEvent)
}

// Reasons of a stale result, as in StaleResultEvent.Reason.
const (
	// StaleSuperseded: the database refused the report because another attempt of the task is current (the task
	// was recovered after its timeout and claimed again, possibly by another worker).
	StaleSuperseded = "superseded"
	// StaleTimedOut: the handler returned after its step timeout, when the worker had already failed the attempt.
	StaleTimedOut = "timed_out"
)

// StaleResultEvent is a result dropped because its attempt is no longer current. It carries the task's identity
// (Attempt is the stale attempt), never the output.
type StaleResultEvent struct {
	TaskEvent
	Reason         string // StaleSuperseded or StaleTimedOut
	Err            error  // the handler's error when the stale result was a failure; nil for a success
	CurrentAttempt int    // the task's current attempt when the database reported it; 0 when unknown
}

// TaskEvent identifies the task attempt an event is about and when the event happened.
type TaskEvent struct {
	TaskMeta
	Time time.Time
}

// PollEvent is one poll of the worker's queue: a read and the claim of what was read.
type PollEvent struct {
	FlowSlug  string
	QueueName string
	WorkerID  string
	Time      time.Time     // when the read began
	Duration  time.Duration // read + claim round trip, including read_with_poll's wait on an empty queue
	Messages  int           // messages read
	Claimed   int           // tasks claimed from them
	Err       error         // the read failed (Messages and Claimed are 0); the worker retries with backoff
}

// Poll outcomes, as returned by PollEvent.Outcome.
const (
	PollClaimed   = "claimed"   // at least one task was claimed
	PollEmpty     = "empty"     // the queue had no visible message before the wait ended
	PollUnclaimed = "unclaimed" // messages were read but none of their tasks could be claimed
	PollError     = "error"     // the read failed
)

// Outcome classifies the poll for metric labels: PollClaimed, PollEmpty, PollUnclaimed or PollError.
func (e PollEvent) Outcome() string {
	switch {
	case e.Err != nil:
		return PollError
	case e.Claimed > 0:
		return PollClaimed
	case e.Messages == 0:
		return PollEmpty
	default:
		return PollUnclaimed
	}
}

// HandlerEvent reports a handler that returned. Time is when it returned.
type HandlerEvent struct {
	TaskEvent
	Duration time.Duration // how long the handler ran
	Err      error         // nil on success; a *PanicError when the handler panicked
}

// Handler outcomes, as returned by HandlerEvent.Outcome.
const (
	HandlerOK    = "ok"
	HandlerError = "error"
	HandlerPanic = "panic"
)

// Outcome classifies the handler's return for metric labels: HandlerOK, HandlerError or HandlerPanic.
func (e HandlerEvent) Outcome() string {
	if e.Err == nil {
		return HandlerOK
	}
	if pe := (*PanicError)(nil); errors.As(e.Err, &pe) {
		return HandlerPanic
	}
	return HandlerError
}

// TaskOutcome is what became of a started task, as recorded (or not) in the database.
type TaskOutcome string

// Task outcomes.
const (
	// OutcomeCompleted: pgflow.complete_task recorded the handler's output.
	OutcomeCompleted TaskOutcome = "completed"
	// OutcomeRetried: pgflow.fail_task recorded the failure and queued the task for another attempt.
	OutcomeRetried TaskOutcome = "retried"
	// OutcomeFailed: pgflow.fail_task recorded the failure and the task has no attempts left.
	OutcomeFailed TaskOutcome = "failed"
	// OutcomeNotRecorded: the database ignored the result because the task was no longer running (its run
	// failed or its step finished meanwhile).
	OutcomeNotRecorded TaskOutcome = "not_recorded"
	// OutcomeUnreported: the worker could not report the result; stalled-task recovery will requeue the task.
	OutcomeUnreported TaskOutcome = "unreported"
	// OutcomeStale: the result was not recorded because another attempt of the task is current (the task was
	// recovered after its timeout and claimed again); see Hooks.StaleResult.
	OutcomeStale TaskOutcome = "stale"
	// OutcomeReleased: the worker shut down while the handler ran; the task went back to its queue without
	// spending the attempt.
	OutcomeReleased TaskOutcome = "released"
)

// TaskFinishedEvent reports the end of a started task. Time is when its result was reported.
type TaskFinishedEvent struct {
	TaskEvent
	Outcome  TaskOutcome
	Duration time.Duration // from TaskStarted to now: the handler plus reporting its result
}

// NoopHooks implements Hooks and does nothing; embed it to implement only some methods.
type NoopHooks struct{}

// PollDone does nothing.
func (NoopHooks) PollDone(context.Context, PollEvent) {}

// TaskClaimed does nothing.
func (NoopHooks) TaskClaimed(context.Context, TaskEvent) {}

// TaskStarted returns ctx.
func (NoopHooks) TaskStarted(ctx context.Context, _ TaskEvent) context.Context { return ctx }

// HandlerDone does nothing.
func (NoopHooks) HandlerDone(context.Context, HandlerEvent) {}

// TaskFinished does nothing.
func (NoopHooks) TaskFinished(context.Context, TaskFinishedEvent) {}

// StaleResult does nothing.
func (NoopHooks) StaleResult(context.Context, StaleResultEvent) {}

// MultiHooks returns Hooks that passes every event to each of hooks in order (nil entries are ignored).
// TaskStarted chains the contexts: each hook receives the context returned by the one before it. A worker
// recovers a panic of each hook separately; called directly, a panic propagates.
func MultiHooks(hooks ...Hooks) Hooks {
	flat := flattenHooks(nil, hooks)
	switch len(flat) {
	case 0:
		return NoopHooks{}
	case 1:
		return flat[0]
	}
	return multiHooks(flat)
}

func flattenHooks(dst []Hooks, hooks []Hooks) []Hooks {
	for _, h := range hooks {
		switch h := h.(type) {
		case nil, NoopHooks, *NoopHooks:
		case multiHooks:
			dst = flattenHooks(dst, h)
		default:
			dst = append(dst, h)
		}
	}
	return dst
}

type multiHooks []Hooks

func (m multiHooks) PollDone(ctx context.Context, e PollEvent) {
	for _, h := range m {
		h.PollDone(ctx, e)
	}
}

func (m multiHooks) TaskClaimed(ctx context.Context, e TaskEvent) {
	for _, h := range m {
		h.TaskClaimed(ctx, e)
	}
}

func (m multiHooks) TaskStarted(ctx context.Context, e TaskEvent) context.Context {
	for _, h := range m {
		if c := h.TaskStarted(ctx, e); c != nil {
			ctx = c
		}
	}
	return ctx
}

func (m multiHooks) HandlerDone(ctx context.Context, e HandlerEvent) {
	for _, h := range m {
		h.HandlerDone(ctx, e)
	}
}

func (m multiHooks) TaskFinished(ctx context.Context, e TaskFinishedEvent) {
	for _, h := range m {
		h.TaskFinished(ctx, e)
	}
}

func (m multiHooks) StaleResult(ctx context.Context, e StaleResultEvent) {
	for _, h := range m {
		h.StaleResult(ctx, e)
	}
}

const (
	hookQueueSize        = 4096             // events waiting for delivery before new ones are dropped
	hookFlushTimeout     = 5 * time.Second  // how long a stopping worker waits for queued events to be delivered
	hookDropWarnInterval = 10 * time.Second // least time between two warnings about dropped events
)

type hookKind uint8

const (
	hookPoll hookKind = iota + 1
	hookClaimed
	hookHandler
	hookFinished
	hookStale
)

// hookCall is one queued event.
type hookCall struct {
	kind     hookKind
	ctx      context.Context
	poll     PollEvent
	task     TaskEvent
	handler  HandlerEvent
	finished TaskFinishedEvent
	stale    StaleResultEvent
}

// observer delivers a worker's events to its hooks (see Hooks for the guarantees). A nil *observer (no hooks
// configured) does nothing and costs nothing.
type observer struct {
	hooks   []Hooks
	log     *slog.Logger
	base    context.Context
	queue   chan hookCall
	quit    chan struct{}
	done    chan struct{}
	stopped atomic.Bool
	dropped atomic.Int64
}

// newObserver returns nil when h has nothing to call.
func newObserver(h Hooks, log *slog.Logger) *observer {
	hooks := flattenHooks(nil, []Hooks{h})
	if len(hooks) == 0 {
		return nil
	}
	return &observer{hooks: hooks, log: log, base: context.Background()}
}

// start begins delivering events; the returned function stops delivery after flushing the queued events (waiting
// at most hookFlushTimeout). Events after the stop are dropped.
func (o *observer) start(ctx context.Context) (stop func()) {
	if o == nil {
		return func() {}
	}
	o.base = context.WithoutCancel(ctx)
	o.queue = make(chan hookCall, hookQueueSize)
	o.quit = make(chan struct{})
	o.done = make(chan struct{})
	go o.deliver()
	return func() {
		if o.stopped.Swap(true) {
			return
		}
		close(o.quit)
		t := time.NewTimer(hookFlushTimeout)
		defer t.Stop()
		select {
		case <-o.done:
		case <-t.C:
			o.log.Error("observability hooks did not finish delivering events; the worker stops without waiting for them",
				"waited", hookFlushTimeout)
		}
		if n := o.dropped.Swap(0); n > 0 {
			o.log.Warn("observability hooks were too slow: events were dropped", "dropped", n)
		}
	}
}

func (o *observer) deliver() {
	defer close(o.done)
	var lastWarn time.Time
	for {
		select {
		case c := <-o.queue:
			o.call(c)
		case <-o.quit:
			for {
				select {
				case c := <-o.queue:
					o.call(c)
				default:
					return
				}
			}
		}
		if o.dropped.Load() > 0 && time.Since(lastWarn) >= hookDropWarnInterval {
			lastWarn = time.Now()
			o.log.Warn("observability hooks are too slow: events were dropped", "dropped", o.dropped.Swap(0))
		}
	}
}

func (o *observer) enqueue(c hookCall) {
	if o.stopped.Load() || o.queue == nil {
		o.dropped.Add(1)
		return
	}
	select {
	case o.queue <- c:
	default:
		o.dropped.Add(1)
	}
}

func (o *observer) call(c hookCall) {
	for _, h := range o.hooks {
		switch c.kind {
		case hookPoll:
			o.guard(h, "PollDone", func() { h.PollDone(c.ctx, c.poll) })
		case hookClaimed:
			o.guard(h, "TaskClaimed", func() { h.TaskClaimed(c.ctx, c.task) })
		case hookHandler:
			o.guard(h, "HandlerDone", func() { h.HandlerDone(c.ctx, c.handler) })
		case hookFinished:
			o.guard(h, "TaskFinished", func() { h.TaskFinished(c.ctx, c.finished) })
		case hookStale:
			o.guard(h, "StaleResult", func() { h.StaleResult(c.ctx, c.stale) })
		}
	}
}

// guard runs fn, recovering and logging a panic of hook h.
func (o *observer) guard(h Hooks, method string, fn func()) {
	defer func() {
		if v := recover(); v != nil {
			o.log.Error("observability hook panicked; the event is skipped for this hook",
				"hook", fmt.Sprintf("%T", h), "method", method, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}()
	fn()
}

// polled reports a poll that began at start; err is the read's error.
func (o *observer) polled(w *Worker, start time.Time, messages, claimed int, err error) {
	if o == nil {
		return
	}
	now := time.Now()
	o.enqueue(hookCall{kind: hookPoll, ctx: o.base, poll: PollEvent{
		FlowSlug: w.slug, QueueName: w.queue, WorkerID: w.cfg.WorkerID,
		Time: start, Duration: now.Sub(start), Messages: messages, Claimed: claimed, Err: err,
	}})
}

func (o *observer) taskClaimed(meta TaskMeta) {
	if o == nil {
		return
	}
	o.enqueue(hookCall{kind: hookClaimed, ctx: o.base, task: TaskEvent{TaskMeta: meta, Time: time.Now()}})
}

// taskStarted calls every hook's TaskStarted synchronously and returns the handler's context. The returned
// context also carries the start time for taskFinished.
func (o *observer) taskStarted(ctx context.Context, meta TaskMeta) context.Context {
	if o == nil {
		return ctx
	}
	now := time.Now()
	e := TaskEvent{TaskMeta: meta, Time: now}
	for _, h := range o.hooks {
		o.guard(h, "TaskStarted", func() {
			if c := h.TaskStarted(ctx, e); c != nil {
				ctx = c
			}
		})
	}
	return context.WithValue(ctx, taskStartKey{}, now)
}

func (o *observer) handlerDone(ctx context.Context, meta TaskMeta, d time.Duration, err error) {
	if o == nil {
		return
	}
	o.enqueue(hookCall{kind: hookHandler, ctx: context.WithoutCancel(ctx), handler: HandlerEvent{
		TaskEvent: TaskEvent{TaskMeta: meta, Time: time.Now()}, Duration: d, Err: err,
	}})
}

func (o *observer) taskFinished(ctx context.Context, meta TaskMeta, outcome TaskOutcome) {
	if o == nil {
		return
	}
	now := time.Now()
	var d time.Duration
	if start, ok := ctx.Value(taskStartKey{}).(time.Time); ok {
		d = now.Sub(start)
	}
	o.enqueue(hookCall{kind: hookFinished, ctx: context.WithoutCancel(ctx), finished: TaskFinishedEvent{
		TaskEvent: TaskEvent{TaskMeta: meta, Time: now}, Outcome: outcome, Duration: d,
	}})
}

func (o *observer) staleResult(meta TaskMeta, reason string, err error, current int) {
	if o == nil {
		return
	}
	o.enqueue(hookCall{kind: hookStale, ctx: o.base, stale: StaleResultEvent{
		TaskEvent: TaskEvent{TaskMeta: meta, Time: time.Now()}, Reason: reason, Err: err, CurrentAttempt: current,
	}})
}

// taskStartKey is the context key of the time TaskStarted was called.
type taskStartKey struct{}

// taskMeta is the identity of a claimed task as handlers and hooks see it.
func (r *workerRun) taskMeta(t sqlapi.ClaimedTask) TaskMeta {
	return TaskMeta{
		RunID: t.RunID, FlowSlug: r.w.slug, StepSlug: t.StepSlug, TaskIndex: t.TaskIndex, Attempt: t.Attempt,
		MessageID: t.MsgID, WorkerID: r.cfg.WorkerID, QueueName: r.w.queue,
	}
}
