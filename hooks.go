package pgflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgflow-go/pgflow/internal/observe"
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

// StaleReason says why a result was stale.
type StaleReason string

// Reasons of a stale result, as in StaleResultEvent.Reason.
const (
	// StaleSuperseded: the database refused the report because another attempt of the task is current (the task
	// was recovered after its timeout and claimed again, possibly by another worker).
	StaleSuperseded StaleReason = "superseded"
	// StaleTimedOut: the handler returned after its step timeout, when the worker had already failed the attempt.
	StaleTimedOut StaleReason = "timed_out"
)

// StaleResultEvent is a result dropped because its attempt is no longer current. It carries the task's identity
// (Attempt is the stale attempt), never the output.
type StaleResultEvent struct {
	TaskEvent
	Reason         StaleReason // StaleSuperseded or StaleTimedOut
	Err            error       // the handler's error when the stale result was a failure; nil for a success
	CurrentAttempt int         // the task's current attempt when the database reported it; 0 when unknown
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

// PollOutcome classifies a poll.
type PollOutcome string

// Poll outcomes, as returned by PollEvent.Outcome.
const (
	PollClaimed   PollOutcome = "claimed"   // at least one task was claimed
	PollEmpty     PollOutcome = "empty"     // the queue had no visible message before the wait ended
	PollUnclaimed PollOutcome = "unclaimed" // messages were read but none of their tasks could be claimed
	PollError     PollOutcome = "error"     // the read failed
)

// Outcome classifies the poll for metric labels: PollClaimed, PollEmpty, PollUnclaimed or PollError.
func (e PollEvent) Outcome() PollOutcome {
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

// HandlerOutcome classifies a handler's return.
type HandlerOutcome string

// Handler outcomes, as returned by HandlerEvent.Outcome.
const (
	HandlerOK    HandlerOutcome = "ok"
	HandlerError HandlerOutcome = "error"
	HandlerPanic HandlerOutcome = "panic"
)

// Outcome classifies the handler's return for metric labels: HandlerOK, HandlerError or HandlerPanic.
func (e HandlerEvent) Outcome() HandlerOutcome {
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
	// OutcomeCancelled: the task's run was cancelled while the handler ran (Client.CancelRun); the database fenced
	// the result, so it changed nothing. The handler's context was cancelled with a *RunCancelledError as its
	// cause when the worker listens for notifications.
	OutcomeCancelled TaskOutcome = "cancelled"
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

// hooksSink delivers the engine's events to one Hooks value, in the public types.
type hooksSink struct{ h Hooks }

// String names the user's Hooks type in the log line of a panicking hook.
func (s hooksSink) String() string { return fmt.Sprintf("%T", s.h) }

func taskEvent(e observe.Task) TaskEvent { return TaskEvent{TaskMeta: TaskMeta(e.Meta), Time: e.Time} }

func (s hooksSink) PollDone(ctx context.Context, e observe.Poll) {
	s.h.PollDone(ctx, PollEvent{FlowSlug: e.FlowSlug, QueueName: e.QueueName, WorkerID: e.WorkerID, Time: e.Time,
		Duration: e.Duration, Messages: e.Messages, Claimed: e.Claimed, Err: e.Err})
}

func (s hooksSink) TaskClaimed(ctx context.Context, e observe.Task) {
	s.h.TaskClaimed(ctx, taskEvent(e))
}

func (s hooksSink) TaskStarted(ctx context.Context, e observe.Task) context.Context {
	return s.h.TaskStarted(ctx, taskEvent(e))
}

func (s hooksSink) HandlerDone(ctx context.Context, e observe.Handler) {
	s.h.HandlerDone(ctx, HandlerEvent{TaskEvent: taskEvent(e.Task), Duration: e.Duration, Err: e.Err})
}

func (s hooksSink) TaskFinished(ctx context.Context, e observe.Finished) {
	s.h.TaskFinished(ctx, TaskFinishedEvent{TaskEvent: taskEvent(e.Task), Outcome: TaskOutcome(e.Outcome), Duration: e.Duration})
}

func (s hooksSink) StaleResult(ctx context.Context, e observe.StaleResult) {
	s.h.StaleResult(ctx, StaleResultEvent{TaskEvent: taskEvent(e.Task), Reason: StaleReason(e.Reason), Err: e.Err,
		CurrentAttempt: e.CurrentAttempt})
}

// sinksOf turns h (possibly a MultiHooks) into the engine's sinks, one per Hooks value.
func sinksOf(h Hooks) []observe.Sink {
	hooks := flattenHooks(nil, []Hooks{h})
	sinks := make([]observe.Sink, len(hooks))
	for i, h := range hooks {
		sinks[i] = hooksSink{h}
	}
	return sinks
}
