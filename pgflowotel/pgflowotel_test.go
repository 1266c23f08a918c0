package pgflowotel_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/testutil"
	"github.com/pgflow-go/pgflow/pgflowotel"
)

const waitTimeout = testutil.WaitTimeout

// runWorker runs a worker until the returned stop is called; stop returns once the worker has stopped.
func runWorker(t *testing.T, pool *pgxpool.Pool, flow pgflow.AnyFlow, hooks pgflow.Hooks) (*pgflow.Worker, func()) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	client, err := pgflow.NewClient(pool, &pgflow.ClientConfig{Logger: logger})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	w, err := pgflow.NewWorker(client, &pgflow.WorkerConfig{
		Flows:       []pgflow.WorkerFlow{{Flow: flow}},
		MaxPollWait: time.Second, PollInterval: 20 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond,
		MaintenanceInterval: -1, Hooks: hooks, Logger: logger,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, w.Start(ctx)) // returns once the worker is registered and running
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	}
	t.Cleanup(stop)
	return w, stop
}

func startRun(t *testing.T, pool *pgxpool.Pool, flow, input string) string {
	t.Helper()
	return testutil.StartRun(t, pool, flow, json.RawMessage(input))
}

func waitRun(t *testing.T, pool *pgxpool.Pool, runID string) string {
	t.Helper()
	return testutil.WaitRun(t, pool, runID).Status
}

func nudgeRetries(t *testing.T, pool *pgxpool.Pool, flow, runID string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = pool.Exec(ctx, `select pgmq.set_vt($1, t.message_id, 0) from pgflow.step_tasks as t
			                        where t.run_id = $2 and t.status = 'queued' and t.attempts_count > 0`, flow, runID)
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		out[kv.Key] = kv.Value
	}
	return out
}

func TestSpansAndMetricsOfARealWorker(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	hooks, err := pgflowotel.New(pgflowotel.Options{TracerProvider: tp, MeterProvider: mp})
	require.NoError(t, err)

	handlerTracer := tp.Tracer("handler-code")
	f := pgflow.NewFlow[int]("otel_flow")
	flaky := pgflow.Step(f, "flaky", func(ctx context.Context, tk *pgflow.Task[int]) (int, error) {
		_, child := handlerTracer.Start(ctx, "call the remote service")
		child.End()
		if tk.Attempt == 1 {
			return 0, errors.New("remote service unavailable")
		}
		return 20, nil
	}, pgflow.MaxAttempts(2), pgflow.BaseDelay(time.Second))
	pgflow.Step(f, "inc", func(ctx context.Context, tk *pgflow.Task[int]) (int, error) {
		v, err := flaky.Output(tk)
		return v + 1, err
	}, pgflow.DependsOn(flaky))

	w, stop := runWorker(t, db.Pool, f, hooks)
	runID := startRun(t, db.Pool, "otel_flow", `1`)
	nudgeRetries(t, db.Pool, "otel_flow", runID)
	require.Equal(t, "completed", waitRun(t, db.Pool, runID))
	stop() // delivers the pending events: every task span has ended

	msgIDs := map[string]int64{}
	rows, err := db.Pool.Query(context.Background(), `select step_slug, message_id from pgflow.step_tasks where run_id = $1`, runID)
	require.NoError(t, err)
	for rows.Next() {
		var step string
		var id int64
		require.NoError(t, rows.Scan(&step, &id))
		msgIDs[step] = id
	}
	require.NoError(t, rows.Err())

	type taskKey struct {
		step    string
		attempt int64
	}
	tasks := map[taskKey]tracetest.SpanStub{}
	var children []tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if s.Name == "call the remote service" {
			children = append(children, s)
			continue
		}
		a := attrs(s.Attributes)
		require.Equal(t, "pgflow.task otel_flow."+a[pgflowotel.AttrStep].AsString(), s.Name)
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind)
		require.Equal(t, "otel_flow", a[pgflowotel.AttrFlow].AsString())
		require.Equal(t, runID, a[pgflowotel.AttrRunID].AsString())
		require.Equal(t, "otel_flow", a[pgflowotel.AttrQueue].AsString())
		require.Equal(t, w.ID(), a[pgflowotel.AttrWorkerID].AsString())
		require.Equal(t, attribute.INT64, a[pgflowotel.AttrTaskIndex].Type())
		require.Equal(t, int64(0), a[pgflowotel.AttrTaskIndex].AsInt64())
		require.Equal(t, attribute.STRING, a[pgflowotel.AttrMsgID].Type(), "msg_id is a string attribute")
		require.Equal(t, "pgmq", a["messaging.system"].AsString())
		require.Equal(t, a[pgflowotel.AttrMsgID], a["messaging.message.id"])
		require.False(t, s.EndTime.Before(s.StartTime))
		tasks[taskKey{a[pgflowotel.AttrStep].AsString(), a[pgflowotel.AttrAttempt].AsInt64()}] = s
	}
	require.Len(t, tasks, 3, "one span per task execution")

	first := tasks[taskKey{"flaky", 1}]
	a := attrs(first.Attributes)
	require.Equal(t, "retried", a[pgflowotel.AttrOutcome].AsString())
	require.Equal(t, "error", a[pgflowotel.AttrHandlerOutcome].AsString())
	require.Equal(t, codes.Error, first.Status.Code)
	require.Len(t, first.Events, 1)
	require.Equal(t, "exception", first.Events[0].Name)
	require.Contains(t, attrs(first.Events[0].Attributes)["exception.message"].AsString(), "remote service unavailable")

	second := tasks[taskKey{"flaky", 2}]
	require.Equal(t, "completed", attrs(second.Attributes)[pgflowotel.AttrOutcome].AsString())
	require.Equal(t, codes.Unset, second.Status.Code)
	require.NotEqual(t, first.SpanContext.TraceID(), second.SpanContext.TraceID(), "each execution is its own trace")

	inc := tasks[taskKey{"inc", 1}]
	require.Equal(t, strconv.FormatInt(msgIDs["inc"], 10), attrs(inc.Attributes)[pgflowotel.AttrMsgID].AsString())
	require.Equal(t, "completed", attrs(inc.Attributes)[pgflowotel.AttrOutcome].AsString())

	// The handler's own spans are children of the task span.
	require.Len(t, children, 2)
	parents := map[trace.SpanID]bool{first.SpanContext.SpanID(): true, second.SpanContext.SpanID(): true}
	for _, c := range children {
		require.True(t, parents[c.Parent.SpanID()], "child span %s has the task span as parent", c.Name)
	}

	// Metrics.
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	require.Equal(t, pgflowotel.ScopeName, rm.ScopeMetrics[0].Scope.Name)
	metrics := map[string]metricdata.Metrics{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		metrics[m.Name] = m
	}
	sumOf := func(name string, want map[attribute.Key]string) int64 {
		t.Helper()
		m, ok := metrics[name]
		require.True(t, ok, "metric %s", name)
		data, ok := m.Data.(metricdata.Sum[int64])
		require.True(t, ok, "%s is an int64 sum", name)
		var total int64
	points:
		for _, dp := range data.DataPoints {
			for k, v := range want {
				got, ok := dp.Attributes.Value(k)
				if !ok || got.AsString() != v {
					continue points
				}
			}
			total += dp.Value
		}
		return total
	}
	histCount := func(name string, want map[attribute.Key]string) uint64 {
		t.Helper()
		m, ok := metrics[name]
		require.True(t, ok, "metric %s", name)
		require.Equal(t, "s", m.Unit)
		data, ok := m.Data.(metricdata.Histogram[float64])
		require.True(t, ok, "%s is a float64 histogram", name)
		var total uint64
	points:
		for _, dp := range data.DataPoints {
			for k, v := range want {
				got, ok := dp.Attributes.Value(k)
				if !ok || got.AsString() != v {
					continue points
				}
			}
			total += dp.Count
		}
		return total
	}
	flakyStep := map[attribute.Key]string{pgflowotel.AttrFlow: "otel_flow", pgflowotel.AttrStep: "flaky", pgflowotel.AttrQueue: "otel_flow"}
	with := func(base map[attribute.Key]string, k attribute.Key, v string) map[attribute.Key]string {
		out := map[attribute.Key]string{k: v}
		for bk, bv := range base {
			out[bk] = bv
		}
		return out
	}
	require.Equal(t, int64(2), sumOf("pgflow.task.claimed", flakyStep))
	require.Equal(t, int64(1), sumOf("pgflow.task.finished", with(flakyStep, pgflowotel.AttrOutcome, "retried")))
	require.Equal(t, int64(1), sumOf("pgflow.task.finished", with(flakyStep, pgflowotel.AttrOutcome, "completed")))
	require.Equal(t, int64(3), sumOf("pgflow.task.finished", map[attribute.Key]string{pgflowotel.AttrFlow: "otel_flow"}))
	require.Equal(t, int64(0), sumOf("pgflow.task.active", map[attribute.Key]string{pgflowotel.AttrFlow: "otel_flow"}))
	require.Equal(t, uint64(1), histCount("pgflow.handler.duration", with(flakyStep, pgflowotel.AttrHandlerOutcome, "error")))
	require.Equal(t, uint64(1), histCount("pgflow.handler.duration", with(flakyStep, pgflowotel.AttrHandlerOutcome, "ok")))
	require.Equal(t, uint64(3), histCount("pgflow.task.duration", map[attribute.Key]string{pgflowotel.AttrFlow: "otel_flow"}))
	require.GreaterOrEqual(t, histCount("pgflow.poll.duration",
		map[attribute.Key]string{pgflowotel.AttrFlow: "otel_flow", pgflowotel.AttrPollOutcome: "claimed"}), uint64(1))
	require.GreaterOrEqual(t, sumOf("pgflow.messages.read", map[attribute.Key]string{pgflowotel.AttrQueue: "otel_flow"}), int64(3))
}

// TestTwoHooksEndTheirOwnSpans chains two Hooks (e.g. two tracer providers): each ends the span it started.
func TestTwoHooksEndTheirOwnSpans(t *testing.T) {
	t.Parallel()
	expA, expB := tracetest.NewInMemoryExporter(), tracetest.NewInMemoryExporter()
	tpA := sdktrace.NewTracerProvider(sdktrace.WithSyncer(expA))
	tpB := sdktrace.NewTracerProvider(sdktrace.WithSyncer(expB))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	a, err := pgflowotel.New(pgflowotel.Options{TracerProvider: tpA, MeterProvider: mp})
	require.NoError(t, err)
	b, err := pgflowotel.New(pgflowotel.Options{TracerProvider: tpB, MeterProvider: mp})
	require.NoError(t, err)
	hooks := pgflow.MultiHooks(a, b)

	ev := pgflow.TaskEvent{TaskMeta: pgflow.TaskMeta{FlowSlug: "f", StepSlug: "s", RunID: "r", MessageID: 1 << 60}, Time: time.Now()}
	ctx := hooks.TaskStarted(context.Background(), ev)
	require.Empty(t, expA.GetSpans(), "not ended yet")
	hooks.TaskFinished(ctx, pgflow.TaskFinishedEvent{TaskEvent: ev, Outcome: pgflow.OutcomeFailed})
	require.Len(t, expA.GetSpans(), 1)
	require.Len(t, expB.GetSpans(), 1)
	sa, sb := expA.GetSpans()[0], expB.GetSpans()[0]
	require.Equal(t, sa.SpanContext.SpanID(), sb.Parent.SpanID(), "b's span is a child of a's")
	require.Equal(t, codes.Error, sa.Status.Code)
	require.Equal(t, strconv.FormatInt(1<<60, 10), attrs(sa.Attributes)[pgflowotel.AttrMsgID].AsString(), "64-bit ids keep every digit")

	// A stale result is counted by reason.
	hooks.StaleResult(context.Background(), pgflow.StaleResultEvent{TaskEvent: ev, Reason: pgflow.StaleTimedOut})
	var rm metricdata.ResourceMetrics
	require.NoError(t, mp.ForceFlush(context.Background()))
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var stale int64
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "pgflow.task.stale" {
			continue
		}
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			if r, _ := dp.Attributes.Value(pgflowotel.AttrStaleReason); r.AsString() == string(pgflow.StaleTimedOut) {
				stale += dp.Value
			}
		}
	}
	require.EqualValues(t, 2, stale, "one per Hooks of the chain")

	// A finish without a started span (e.g. hooks added to a chain later) records metrics and does not panic.
	hooks.TaskFinished(context.Background(), pgflow.TaskFinishedEvent{TaskEvent: ev, Outcome: pgflow.OutcomeCompleted})
	require.Len(t, expA.GetSpans(), 1)
}
