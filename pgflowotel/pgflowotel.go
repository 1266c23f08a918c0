// Package pgflowotel traces and measures pgflow workers with OpenTelemetry.
//
// Hooks implements pgflow.Hooks: set it as WorkerConfig.Hooks. Every task execution becomes a span (kind
// consumer) from the moment the worker starts the task until its result is recorded, named
// "pgflow.task <flow>.<step>" and carrying the task's identity as attributes:
//
//	pgflow.flow, pgflow.run_id, pgflow.step, pgflow.task_index (int), pgflow.attempt (int), pgflow.queue,
//	pgflow.msg_id (string: PGMQ ids are 64-bit), pgflow.worker_id, pgflow.outcome (set at the end)
//
// plus messaging.system = "pgmq", messaging.operation.type = "process", messaging.destination.name and
// messaging.message.id. The handler runs with the span in its context, so spans the handler starts (database
// calls, HTTP requests) are its children. A handler error is recorded on the span; a task that is retried,
// fails or cannot be reported ends with status Error.
//
// Metrics go through the OTel meter (instrumentation scope ScopeName):
//
//	pgflow.poll.duration     histogram, s  {pgflow.flow, pgflow.queue, pgflow.poll.outcome}
//	pgflow.messages.read     counter       {pgflow.flow, pgflow.queue}
//	pgflow.task.claimed      counter       {pgflow.flow, pgflow.step, pgflow.queue}
//	pgflow.task.active       up-down       {pgflow.flow, pgflow.step, pgflow.queue}
//	pgflow.handler.duration  histogram, s  {pgflow.flow, pgflow.step, pgflow.queue, pgflow.handler.outcome}
//	pgflow.task.finished     counter       {pgflow.flow, pgflow.step, pgflow.queue, pgflow.outcome}
//	pgflow.task.duration     histogram, s  {pgflow.flow, pgflow.step, pgflow.queue, pgflow.outcome}
//	pgflow.task.stale        counter       {pgflow.flow, pgflow.step, pgflow.queue, pgflow.stale.reason}
//
// pgflow.task.stale counts results not recorded because their attempt was no longer the task's current one
// (Hooks.StaleResult); a task whose report was fenced also ends its span with outcome "stale" and status Error.
//
// The package lives apart from pgflow so that programs that do not use OpenTelemetry do not depend on it.
package pgflowotel

import (
	"context"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgflow-go/pgflow"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/pgflow-go/pgflow/pgflowotel"

// Attribute keys.
const (
	AttrFlow           = attribute.Key("pgflow.flow")
	AttrRunID          = attribute.Key("pgflow.run_id")
	AttrStep           = attribute.Key("pgflow.step")
	AttrTaskIndex      = attribute.Key("pgflow.task_index")
	AttrAttempt        = attribute.Key("pgflow.attempt")
	AttrQueue          = attribute.Key("pgflow.queue")
	AttrMsgID          = attribute.Key("pgflow.msg_id")
	AttrWorkerID       = attribute.Key("pgflow.worker_id")
	AttrOutcome        = attribute.Key("pgflow.outcome")         // task outcome: completed, retried, failed, ...
	AttrHandlerOutcome = attribute.Key("pgflow.handler.outcome") // ok, error, panic
	AttrPollOutcome    = attribute.Key("pgflow.poll.outcome")    // claimed, empty, unclaimed, error
	AttrStaleReason    = attribute.Key("pgflow.stale.reason")    // superseded, timed_out
)

// Options configures Hooks. The zero value uses the global providers.
type Options struct {
	// TracerProvider creates the task spans. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider creates the instruments. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// Hooks implements pgflow.Hooks with OpenTelemetry spans and metrics. One Hooks may serve any number of
// workers. Create it with New.
type Hooks struct {
	tracer trace.Tracer

	pollDuration    metric.Float64Histogram
	messagesRead    metric.Int64Counter
	claimed         metric.Int64Counter
	active          metric.Int64UpDownCounter
	handlerDuration metric.Float64Histogram
	finished        metric.Int64Counter
	taskDuration    metric.Float64Histogram
	stale           metric.Int64Counter
}

var _ pgflow.Hooks = (*Hooks)(nil)

// New returns Hooks using the providers of opts. It fails only when the meter rejects an instrument.
func New(opts Options) (*Hooks, error) {
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	mp := opts.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(ScopeName)
	h := &Hooks{tracer: tp.Tracer(ScopeName)}
	var err error
	fail := func(name string, e error) error { return fmt.Errorf("pgflowotel: instrument %s: %w", name, e) }
	if h.pollDuration, err = meter.Float64Histogram("pgflow.poll.duration", metric.WithUnit("s"),
		metric.WithDescription("Round trip of one poll of a flow's queue (read + claim), including the wait on an empty queue.")); err != nil {
		return nil, fail("pgflow.poll.duration", err)
	}
	if h.messagesRead, err = meter.Int64Counter("pgflow.messages.read", metric.WithUnit("{message}"),
		metric.WithDescription("Messages read from a flow's queue.")); err != nil {
		return nil, fail("pgflow.messages.read", err)
	}
	if h.claimed, err = meter.Int64Counter("pgflow.task.claimed", metric.WithUnit("{task}"),
		metric.WithDescription("Tasks claimed with pgflow.start_tasks.")); err != nil {
		return nil, fail("pgflow.task.claimed", err)
	}
	if h.active, err = meter.Int64UpDownCounter("pgflow.task.active", metric.WithUnit("{task}"),
		metric.WithDescription("Tasks started and not finished yet.")); err != nil {
		return nil, fail("pgflow.task.active", err)
	}
	if h.handlerDuration, err = meter.Float64Histogram("pgflow.handler.duration", metric.WithUnit("s"),
		metric.WithDescription("Run time of step handlers.")); err != nil {
		return nil, fail("pgflow.handler.duration", err)
	}
	if h.finished, err = meter.Int64Counter("pgflow.task.finished", metric.WithUnit("{task}"),
		metric.WithDescription("Finished tasks by outcome: completed, retried, failed, not_recorded, stale, released, cancelled, unreported.")); err != nil {
		return nil, fail("pgflow.task.finished", err)
	}
	if h.taskDuration, err = meter.Float64Histogram("pgflow.task.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a task's start until its result is recorded.")); err != nil {
		return nil, fail("pgflow.task.duration", err)
	}
	if h.stale, err = meter.Int64Counter("pgflow.task.stale", metric.WithUnit("{result}"),
		metric.WithDescription("Handler results not recorded because their attempt was no longer current (superseded, timed_out).")); err != nil {
		return nil, fail("pgflow.task.stale", err)
	}
	return h, nil
}

// spanKey is the context key of the task span this Hooks started; it is per Hooks, so that several Hooks in one
// chain each end their own span.
type spanKey struct{ h *Hooks }

func taskAttrs(m pgflow.TaskMeta, extra ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(append([]attribute.KeyValue{
		AttrFlow.String(m.FlowSlug), AttrStep.String(m.StepSlug), AttrQueue.String(m.QueueName),
	}, extra...)...)
}

// PollDone implements pgflow.Hooks.
func (h *Hooks) PollDone(ctx context.Context, e pgflow.PollEvent) {
	flowQueue := []attribute.KeyValue{AttrFlow.String(e.FlowSlug), AttrQueue.String(e.QueueName)}
	h.pollDuration.Record(ctx, e.Duration.Seconds(),
		metric.WithAttributes(append(flowQueue, AttrPollOutcome.String(string(e.Outcome())))...))
	if e.Messages > 0 {
		h.messagesRead.Add(ctx, int64(e.Messages), metric.WithAttributes(flowQueue...))
	}
}

// TaskClaimed implements pgflow.Hooks.
func (h *Hooks) TaskClaimed(ctx context.Context, e pgflow.TaskEvent) {
	h.claimed.Add(ctx, 1, taskAttrs(e.TaskMeta))
}

// TaskStarted implements pgflow.Hooks: it starts the task's span and returns a context holding it.
func (h *Hooks) TaskStarted(ctx context.Context, e pgflow.TaskEvent) context.Context {
	m := e.TaskMeta
	msgID := strconv.FormatInt(m.MessageID, 10)
	ctx, span := h.tracer.Start(ctx, "pgflow.task "+m.FlowSlug+"."+m.StepSlug,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(e.Time),
		trace.WithAttributes(
			AttrFlow.String(m.FlowSlug),
			AttrRunID.String(m.RunID),
			AttrStep.String(m.StepSlug),
			AttrTaskIndex.Int(m.TaskIndex),
			AttrAttempt.Int(m.Attempt),
			AttrQueue.String(m.QueueName),
			AttrMsgID.String(msgID),
			AttrWorkerID.String(m.WorkerID),
			attribute.String("messaging.system", "pgmq"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", m.QueueName),
			attribute.String("messaging.message.id", msgID),
		))
	h.active.Add(ctx, 1, taskAttrs(m))
	return context.WithValue(ctx, spanKey{h}, span)
}

// span returns the task span this Hooks started in ctx, or nil.
func (h *Hooks) span(ctx context.Context) trace.Span {
	s, _ := ctx.Value(spanKey{h}).(trace.Span)
	return s
}

// HandlerDone implements pgflow.Hooks.
func (h *Hooks) HandlerDone(ctx context.Context, e pgflow.HandlerEvent) {
	outcome := string(e.Outcome())
	h.handlerDuration.Record(ctx, e.Duration.Seconds(), taskAttrs(e.TaskMeta, AttrHandlerOutcome.String(outcome)))
	if span := h.span(ctx); span != nil {
		span.SetAttributes(AttrHandlerOutcome.String(outcome))
		if e.Err != nil {
			span.RecordError(e.Err, trace.WithTimestamp(e.Time))
		}
	}
}

// TaskFinished implements pgflow.Hooks: it ends the task's span.
func (h *Hooks) TaskFinished(ctx context.Context, e pgflow.TaskFinishedEvent) {
	outcome := string(e.Outcome)
	attrs := taskAttrs(e.TaskMeta, AttrOutcome.String(outcome))
	h.active.Add(ctx, -1, taskAttrs(e.TaskMeta))
	h.finished.Add(ctx, 1, attrs)
	h.taskDuration.Record(ctx, e.Duration.Seconds(), attrs)
	span := h.span(ctx)
	if span == nil {
		return
	}
	span.SetAttributes(AttrOutcome.String(outcome))
	switch e.Outcome {
	case pgflow.OutcomeRetried:
		span.SetStatus(codes.Error, "task failed; it will be retried")
	case pgflow.OutcomeFailed:
		span.SetStatus(codes.Error, "task failed; no attempts left")
	case pgflow.OutcomeUnreported:
		span.SetStatus(codes.Error, "the task's result could not be reported")
	case pgflow.OutcomeStale:
		span.SetStatus(codes.Error, "the result was not recorded: another attempt of the task is current")
	}
	span.End(trace.WithTimestamp(e.Time))
}

// StaleResult implements pgflow.Hooks: it counts the stale result.
func (h *Hooks) StaleResult(ctx context.Context, e pgflow.StaleResultEvent) {
	h.stale.Add(ctx, 1, taskAttrs(e.TaskMeta, AttrStaleReason.String(string(e.Reason))))
}
