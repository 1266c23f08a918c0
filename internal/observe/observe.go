// Package observe carries the engine's events (polls, claims, handler runs, outcomes, stale results) to the sinks
// that want them, off the engine's paths: one goroutine delivers queued events in order, a full queue drops new
// events instead of slowing the worker down, and a panicking sink is recovered and logged. Package pgflow turns
// its public Hooks into sinks.
package observe

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/pgflow-go/pgflow/internal/taskrun"
)

// Outcome is what became of a started task, as recorded (or not) in the database.
type Outcome string

// Outcomes; package pgflow exports them as TaskOutcome values with the same text.
const (
	Completed   Outcome = "completed"    // the handler's output was recorded
	Retried     Outcome = "retried"      // the failure was recorded and the task queued for another attempt
	Failed      Outcome = "failed"       // the failure was recorded and the task has no attempts left (or was permanent)
	NotRecorded Outcome = "not_recorded" // the task was no longer running (its run failed or its step finished)
	Unreported  Outcome = "unreported"   // the database could not be reached; stalled-task recovery requeues the task
	Stale       Outcome = "stale"        // another attempt of the task is current: nothing recorded
	Released    Outcome = "released"     // a shutdown put the task back in its queue without spending the attempt
	Cancelled   Outcome = "cancelled"    // the task's run was cancelled (pgflow.cancel_run): the result changes nothing
)

// Reasons of a stale result.
const (
	StaleSuperseded = "superseded" // the database fenced the report: another attempt is current
	StaleTimedOut   = "timed_out"  // the handler returned after its step timeout had failed the attempt
)

// Poll is one read of a queue and the claim of what was read.
type Poll struct {
	FlowSlug, QueueName, WorkerID string
	Time                          time.Time
	Duration                      time.Duration
	Messages, Claimed             int
	Err                           error
}

// Task identifies the task attempt an event is about and when the event happened.
type Task struct {
	taskrun.Meta
	Time time.Time
}

// Handler is a handler that returned.
type Handler struct {
	Task
	Duration time.Duration
	Err      error
}

// Finished is the end of a started task.
type Finished struct {
	Task
	Outcome  Outcome
	Duration time.Duration
}

// StaleResult is a result dropped because its attempt is no longer current.
type StaleResult struct {
	Task
	Reason         string
	Err            error
	CurrentAttempt int
}

// Sink receives events. TaskStarted is called synchronously on the task's goroutine and returns the handler's
// context; the other methods are called on the delivery goroutine.
type Sink interface {
	PollDone(ctx context.Context, e Poll)
	TaskClaimed(ctx context.Context, e Task)
	TaskStarted(ctx context.Context, e Task) context.Context
	HandlerDone(ctx context.Context, e Handler)
	TaskFinished(ctx context.Context, e Finished)
	StaleResult(ctx context.Context, e StaleResult)
}

const (
	queueSize        = 4096             // events waiting for delivery before new ones are dropped
	flushTimeout     = 5 * time.Second  // how long a stopping worker waits for queued events to be delivered
	dropWarnInterval = 10 * time.Second // least time between two warnings about dropped events
)

type kind uint8

const (
	kindPoll kind = iota + 1
	kindClaimed
	kindHandler
	kindFinished
	kindStale
)

type call struct {
	kind     kind
	ctx      context.Context
	poll     Poll
	task     Task
	handler  Handler
	finished Finished
	stale    StaleResult
}

// Observer delivers events to sinks. A nil *Observer (no sinks) does nothing and costs nothing.
type Observer struct {
	sinks   []Sink
	log     *slog.Logger
	base    context.Context
	queue   chan call
	quit    chan struct{}
	done    chan struct{}
	stopped atomic.Bool
	dropped atomic.Int64
}

// New returns an Observer for sinks, or nil when there is none.
func New(sinks []Sink, log *slog.Logger) *Observer {
	if len(sinks) == 0 {
		return nil
	}
	return &Observer{sinks: sinks, log: log, base: context.Background()}
}

// Start begins delivering events; the returned function stops delivery after flushing the queued events (waiting
// at most a few seconds). Events after the stop are dropped.
func (o *Observer) Start(ctx context.Context) (stop func()) {
	if o == nil {
		return func() {}
	}
	o.base = context.WithoutCancel(ctx)
	o.queue = make(chan call, queueSize)
	o.quit = make(chan struct{})
	o.done = make(chan struct{})
	go o.deliver()
	return func() {
		if o.stopped.Swap(true) {
			return
		}
		close(o.quit)
		t := time.NewTimer(flushTimeout)
		defer t.Stop()
		select {
		case <-o.done:
		case <-t.C:
			o.log.Error("observability hooks did not finish delivering events; the worker stops without waiting for them",
				"waited", flushTimeout)
		}
		if n := o.dropped.Swap(0); n > 0 {
			o.log.Warn("observability hooks were too slow: events were dropped", "dropped", n)
		}
	}
}

func (o *Observer) deliver() {
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
		if o.dropped.Load() > 0 && time.Since(lastWarn) >= dropWarnInterval {
			lastWarn = time.Now()
			o.log.Warn("observability hooks are too slow: events were dropped", "dropped", o.dropped.Swap(0))
		}
	}
}

func (o *Observer) enqueue(c call) {
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

func (o *Observer) call(c call) {
	for _, s := range o.sinks {
		switch c.kind {
		case kindPoll:
			o.guard(s, "PollDone", func() { s.PollDone(c.ctx, c.poll) })
		case kindClaimed:
			o.guard(s, "TaskClaimed", func() { s.TaskClaimed(c.ctx, c.task) })
		case kindHandler:
			o.guard(s, "HandlerDone", func() { s.HandlerDone(c.ctx, c.handler) })
		case kindFinished:
			o.guard(s, "TaskFinished", func() { s.TaskFinished(c.ctx, c.finished) })
		case kindStale:
			o.guard(s, "StaleResult", func() { s.StaleResult(c.ctx, c.stale) })
		}
	}
}

// guard runs fn, recovering and logging a panic of sink s. A sink that implements fmt.Stringer names itself
// (package pgflow's adapter names the user's Hooks type).
func (o *Observer) guard(s Sink, method string, fn func()) {
	defer func() {
		if v := recover(); v != nil {
			name := fmt.Sprintf("%T", s)
			if st, ok := s.(fmt.Stringer); ok {
				name = st.String()
			}
			o.log.Error("observability hook panicked; the event is skipped for this hook",
				"hook", name, "method", method, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}()
	fn()
}

// Polled reports a poll that began at start; err is the read's error.
func (o *Observer) Polled(flow, queue, workerID string, start time.Time, messages, claimed int, err error) {
	if o == nil {
		return
	}
	o.enqueue(call{kind: kindPoll, ctx: o.base, poll: Poll{
		FlowSlug: flow, QueueName: queue, WorkerID: workerID,
		Time: start, Duration: time.Since(start), Messages: messages, Claimed: claimed, Err: err,
	}})
}

// TaskClaimed reports a claimed task.
func (o *Observer) TaskClaimed(meta taskrun.Meta) {
	if o == nil {
		return
	}
	o.enqueue(call{kind: kindClaimed, ctx: o.base, task: Task{Meta: meta, Time: time.Now()}})
}

// TaskStarted calls every sink's TaskStarted synchronously and returns the handler's context, which also carries
// the start time for TaskFinished.
func (o *Observer) TaskStarted(ctx context.Context, meta taskrun.Meta) context.Context {
	if o == nil {
		return ctx
	}
	now := time.Now()
	e := Task{Meta: meta, Time: now}
	for _, s := range o.sinks {
		o.guard(s, "TaskStarted", func() {
			if c := s.TaskStarted(ctx, e); c != nil {
				ctx = c
			}
		})
	}
	return context.WithValue(ctx, startKey{}, now)
}

// HandlerDone reports a handler that returned after d.
func (o *Observer) HandlerDone(ctx context.Context, meta taskrun.Meta, d time.Duration, err error) {
	if o == nil {
		return
	}
	o.enqueue(call{kind: kindHandler, ctx: context.WithoutCancel(ctx), handler: Handler{
		Task: Task{Meta: meta, Time: time.Now()}, Duration: d, Err: err,
	}})
}

// TaskFinished reports what became of a started task; ctx is the one TaskStarted returned.
func (o *Observer) TaskFinished(ctx context.Context, meta taskrun.Meta, outcome Outcome) {
	if o == nil {
		return
	}
	now := time.Now()
	var d time.Duration
	if start, ok := ctx.Value(startKey{}).(time.Time); ok {
		d = now.Sub(start)
	}
	o.enqueue(call{kind: kindFinished, ctx: context.WithoutCancel(ctx), finished: Finished{
		Task: Task{Meta: meta, Time: now}, Outcome: outcome, Duration: d,
	}})
}

// Stale reports a dropped stale result.
func (o *Observer) Stale(meta taskrun.Meta, reason string, err error, current int) {
	if o == nil {
		return
	}
	o.enqueue(call{kind: kindStale, ctx: o.base, stale: StaleResult{
		Task: Task{Meta: meta, Time: time.Now()}, Reason: reason, Err: err, CurrentAttempt: current,
	}})
}

type startKey struct{}
