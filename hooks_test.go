package pgflow

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/build"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/observe"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/taskrun"
)

// recordedEvent is one call a recordingHooks received.
type recordedEvent struct {
	method   string
	task     TaskEvent
	poll     PollEvent
	handler  HandlerEvent
	finished TaskFinishedEvent
	stale    StaleResultEvent
	ctxMark  any // the value of markKey in the context the hook received
}

type markKey struct{}

// recordingHooks records every call; TaskStarted puts a mark into the handler's context.
type recordingHooks struct {
	mu     sync.Mutex
	events []recordedEvent
}

func (h *recordingHooks) add(ctx context.Context, e recordedEvent) {
	e.ctxMark = ctx.Value(markKey{})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

func (h *recordingHooks) PollDone(ctx context.Context, e PollEvent) {
	h.add(ctx, recordedEvent{method: "PollDone", poll: e})
}

func (h *recordingHooks) TaskClaimed(ctx context.Context, e TaskEvent) {
	h.add(ctx, recordedEvent{method: "TaskClaimed", task: e})
}

func (h *recordingHooks) TaskStarted(ctx context.Context, e TaskEvent) context.Context {
	h.add(ctx, recordedEvent{method: "TaskStarted", task: e})
	return context.WithValue(ctx, markKey{}, fmt.Sprintf("%s/%d/%d", e.StepSlug, e.TaskIndex, e.Attempt))
}

func (h *recordingHooks) HandlerDone(ctx context.Context, e HandlerEvent) {
	h.add(ctx, recordedEvent{method: "HandlerDone", task: e.TaskEvent, handler: e})
}

func (h *recordingHooks) TaskFinished(ctx context.Context, e TaskFinishedEvent) {
	h.add(ctx, recordedEvent{method: "TaskFinished", task: e.TaskEvent, finished: e})
}

func (h *recordingHooks) StaleResult(ctx context.Context, e StaleResultEvent) {
	h.add(ctx, recordedEvent{method: "StaleResult", task: e.TaskEvent, stale: e})
}

func (h *recordingHooks) snapshot() []recordedEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]recordedEvent(nil), h.events...)
}

// outcomes returns the outcomes of the TaskFinished events, in order.
func (h *recordingHooks) outcomes() []TaskOutcome {
	var out []TaskOutcome
	for _, e := range h.snapshot() {
		if e.method == "TaskFinished" {
			out = append(out, e.finished.Outcome)
		}
	}
	return out
}

// staleResults returns the StaleResult events, in order.
func (h *recordingHooks) staleResults() []StaleResultEvent {
	var out []StaleResultEvent
	for _, e := range h.snapshot() {
		if e.method == "StaleResult" {
			out = append(out, e.stale)
		}
	}
	return out
}

func (h *recordingHooks) count(method string) int {
	n := 0
	for _, e := range h.snapshot() {
		if e.method == method {
			n++
		}
	}
	return n
}

// taskEvents returns the events about one task attempt, in delivery order.
func (h *recordingHooks) taskEvents(step string, index, attempt int) []recordedEvent {
	var out []recordedEvent
	for _, e := range h.snapshot() {
		if e.method != "PollDone" && e.task.StepSlug == step && e.task.TaskIndex == index && e.task.Attempt == attempt {
			out = append(out, e)
		}
	}
	return out
}

func TestHooksSeeEveryTaskOfARunWithItsIdentity(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("observed")
	var handlerMarks sync.Map
	flaky := Step(f, "flaky", func(ctx context.Context, tk *Task[int]) (int, error) {
		handlerMarks.Store(fmt.Sprintf("flaky/%d", tk.Attempt), ctx.Value(markKey{}))
		if tk.Attempt == 1 {
			return 0, errors.New("first attempt fails")
		}
		return 21, nil
	}, MaxAttempts(2), BaseDelay(time.Second))
	Step(f, "double", func(ctx context.Context, tk *Task[int]) (int, error) {
		handlerMarks.Store("double/1", ctx.Value(markKey{}))
		v, err := flaky.Output(tk)
		return 2 * v, err
	}, DependsOn(flaky))

	hooks := &recordingHooks{}
	cfg, _ := testConfig(t)
	cfg.Hooks = hooks
	rw := startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "observed", 1)
	nudgeRetries(t, db.Pool, "observed", runID)
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.NoError(t, rw.stop(t)) // flushes the hook events

	// Each attempt: claimed, started, handler done, finished — started before the other two, which follow in
	// order; the claim is delivered asynchronously, so it is only required to be there.
	type attempt struct {
		step    string
		attempt int
		handler HandlerOutcome
		outcome TaskOutcome
	}
	var msgIDs = map[string]int64{}
	rows, err := db.Pool.Query(context.Background(),
		`select step_slug, message_id from pgflow.step_tasks where run_id = $1`, runID)
	require.NoError(t, err)
	for rows.Next() {
		var step string
		var id int64
		require.NoError(t, rows.Scan(&step, &id))
		msgIDs[step] = id
	}
	require.NoError(t, rows.Err())

	for _, want := range []attempt{
		{step: "flaky", attempt: 1, handler: HandlerError, outcome: OutcomeRetried},
		{step: "flaky", attempt: 2, handler: HandlerOK, outcome: OutcomeCompleted},
		{step: "double", attempt: 1, handler: HandlerOK, outcome: OutcomeCompleted},
	} {
		evs := hooks.taskEvents(want.step, 0, want.attempt)
		var methods []string
		for _, e := range evs {
			methods = append(methods, e.method)
			require.Equal(t, runID, e.task.RunID, "%s of %s attempt %d", e.method, want.step, want.attempt)
			require.Equal(t, "observed", e.task.FlowSlug)
			require.Equal(t, "observed", e.task.QueueName)
			require.Equal(t, rw.w.ID(), e.task.WorkerID)
			require.False(t, e.task.Time.IsZero())
		}
		require.ElementsMatch(t, []string{"TaskClaimed", "TaskStarted", "HandlerDone", "TaskFinished"}, methods,
			"events of %s attempt %d", want.step, want.attempt)
		var order []string
		for _, m := range methods {
			if m != "TaskClaimed" {
				order = append(order, m)
			}
		}
		require.Equal(t, []string{"TaskStarted", "HandlerDone", "TaskFinished"}, order)

		mark := fmt.Sprintf("%s/0/%d", want.step, want.attempt)
		got, _ := handlerMarks.Load(fmt.Sprintf("%s/%d", want.step, want.attempt))
		require.Equal(t, mark, got, "the handler runs with the context TaskStarted returned")
		for _, e := range evs {
			switch e.method {
			case "HandlerDone":
				require.Equal(t, want.handler, e.handler.Outcome())
				require.GreaterOrEqual(t, e.handler.Duration, time.Duration(0))
				require.Equal(t, mark, e.ctxMark)
			case "TaskFinished":
				require.Equal(t, want.outcome, e.finished.Outcome)
				require.GreaterOrEqual(t, e.finished.Duration, time.Duration(0))
				require.Equal(t, mark, e.ctxMark, "TaskFinished gets the context TaskStarted returned")
			case "TaskStarted", "TaskClaimed":
				require.Nil(t, e.ctxMark)
			}
		}
		if want.step == "double" {
			require.Equal(t, msgIDs["double"], evs[0].task.MessageID)
		}
	}
	require.Equal(t, 3, hooks.count("TaskClaimed"))
	require.Equal(t, 3, hooks.count("TaskFinished"))

	// Polls: every poll reports its queue and worker; the ones that claimed add up to the claimed tasks.
	claimed := 0
	for _, e := range hooks.snapshot() {
		if e.method != "PollDone" {
			continue
		}
		require.Equal(t, "observed", e.poll.FlowSlug)
		require.Equal(t, "observed", e.poll.QueueName)
		require.Equal(t, rw.w.ID(), e.poll.WorkerID)
		require.GreaterOrEqual(t, e.poll.Duration, time.Duration(0))
		require.NoError(t, e.poll.Err)
		require.GreaterOrEqual(t, e.poll.Messages, e.poll.Claimed)
		claimed += e.poll.Claimed
	}
	require.Equal(t, 3, claimed)
}

func TestHooksReportPanicsFailuresAndUnknownSteps(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("half_known") // the worker will know step a only (forgetStep below); it panics
	Step(f, "a", func(ctx context.Context, tk *Task[int]) (int, error) {
		panic("handler bug")
	}, MaxAttempts(1), WhenExhausted(Skip))
	Step(f, "b", func(ctx context.Context, tk *Task[int]) (int, error) { return 0, nil })

	hooks := &recordingHooks{}
	cfg, _ := testConfig(t)
	cfg.Hooks = hooks
	rw := startWorker(t, db.Pool, f, cfg, forgetStep("b"))
	runID := startRun(t, db.Pool, "half_known", 1)
	waitRun(t, db.Pool, runID)
	require.NoError(t, rw.stop(t))

	a := hooks.taskEvents("a", 0, 1)
	require.Len(t, a, 4)
	for _, e := range a {
		switch e.method {
		case "HandlerDone":
			require.Equal(t, HandlerPanic, e.handler.Outcome())
			var pe *PanicError
			require.ErrorAs(t, e.handler.Err, &pe)
			require.Equal(t, "handler bug", pe.Value)
		case "TaskFinished":
			require.Equal(t, OutcomeFailed, e.finished.Outcome)
		}
	}
	// The unknown step's task is started and finished (failed by the worker) without a handler.
	var methods []string
	for _, e := range hooks.taskEvents("b", 0, 1) {
		methods = append(methods, e.method)
		if e.method == "TaskFinished" {
			require.Contains(t, []TaskOutcome{OutcomeFailed, OutcomeRetried, OutcomeNotRecorded}, e.finished.Outcome)
		}
	}
	require.ElementsMatch(t, []string{"TaskClaimed", "TaskStarted", "TaskFinished"}, methods)
}

// panickyHooks panics in every method.
type panickyHooks struct{}

func (panickyHooks) PollDone(context.Context, PollEvent)    { panic("poll hook bug") }
func (panickyHooks) TaskClaimed(context.Context, TaskEvent) { panic("claim hook bug") }
func (panickyHooks) TaskStarted(context.Context, TaskEvent) context.Context {
	panic("start hook bug")
}
func (panickyHooks) HandlerDone(context.Context, HandlerEvent)       { panic("handler hook bug") }
func (panickyHooks) TaskFinished(context.Context, TaskFinishedEvent) { panic("finish hook bug") }
func (panickyHooks) StaleResult(context.Context, StaleResultEvent)   { panic("stale hook bug") }

func TestHooksPanicsAreRecoveredAndLogged(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("panicky_hooks")
	Step(f, "one", func(ctx context.Context, tk *Task[int]) (int, error) {
		return tk.Attempt, nil
	})
	hooks := &recordingHooks{}
	cfg, logs := testConfig(t)
	cfg.Hooks = MultiHooks(panickyHooks{}, hooks) // the recorder comes after the panicking hook
	rw := startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "panicky_hooks", 1)
	require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)
	require.NoError(t, rw.stop(t))

	evs := hooks.taskEvents("one", 0, 1)
	require.Len(t, evs, 4, "the hook after the panicking one still gets every event")
	out := logs.String()
	for _, method := range []string{"PollDone", "TaskClaimed", "TaskStarted", "HandlerDone", "TaskFinished"} {
		require.Contains(t, out, "method="+method, "a panic in %s is logged", method)
	}
	require.Contains(t, out, "observability hook panicked")
	require.Contains(t, out, "hook=pgflow.panickyHooks")
	require.Contains(t, out, `panic="finish hook bug"`)
}

// blockingHooks blocks every asynchronous method until release is closed.
type blockingHooks struct {
	NoopHooks
	release chan struct{}
	calls   atomic.Int64
}

func (h *blockingHooks) PollDone(context.Context, PollEvent) {
	h.calls.Add(1)
	<-h.release
}

func (h *blockingHooks) TaskFinished(context.Context, TaskFinishedEvent) {
	h.calls.Add(1)
	<-h.release
}

func TestHooksThatBlockDoNotBlockTheWorker(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[[]int]("blocked_hooks")
	sq := MapInput(f, "square", func(ctx context.Context, tk *Task[[]int], n int) (int, error) { return n * n, nil })
	Step(f, "sum", func(ctx context.Context, tk *Task[[]int]) (int, error) {
		xs, err := sq.Output(tk)
		s := 0
		for _, x := range xs {
			s += x
		}
		return s, err
	}, DependsOn(sq))

	blocker := &blockingHooks{release: make(chan struct{})}
	recorder := &recordingHooks{}
	cfg, _ := testConfig(t)
	cfg.Hooks = MultiHooks(blocker, recorder)
	rw := startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "blocked_hooks", []int{1, 2, 3, 4})
	res := waitRun(t, db.Pool, runID) // the whole run finishes while the hook is stuck in its first call
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"sum": 30}`, string(res.Output))
	require.Equal(t, int64(1), blocker.calls.Load(), "the hook is still stuck in its first call")
	require.Equal(t, 5, recorder.count("TaskStarted"), "TaskStarted is synchronous and not held up by the stuck hook")

	close(blocker.release)
	require.NoError(t, rw.stop(t))
	require.Equal(t, 5, recorder.count("TaskFinished"), "queued events are delivered once the hook moves again")
}

// The observer's drop bound (internal/observe) applied to real Hooks: what cannot be queued is dropped and
// counted, never waited for.
func TestObserverDropsEventsWhenHooksFallBehind(t *testing.T) {
	t.Parallel()
	blocker := &blockingHooks{release: make(chan struct{})}
	logs := &logBuffer{}
	o := observe.New(sinksOf(blocker), slog.New(slog.NewTextHandler(logs, nil)))
	stop := o.Start(context.Background())
	const total = 4096 + 50
	for range total {
		o.Polled("f", "f", "w", time.Now(), 0, 0, nil)
	}
	close(blocker.release)
	stop()
	delivered := blocker.calls.Load()
	require.Less(t, delivered, int64(total), "events beyond the queue were dropped, not waited for")
	require.GreaterOrEqual(t, delivered, int64(4096))
	require.Contains(t, logs.String(), "events were dropped")
	require.Contains(t, logs.String(), "dropped="+strconv.FormatInt(total-delivered, 10))
}

// ctxHooks adds its name to a context list in TaskStarted.
type ctxHooks struct {
	NoopHooks
	name string
}

type chainKey struct{}

func (h ctxHooks) TaskStarted(ctx context.Context, _ TaskEvent) context.Context {
	prev, _ := ctx.Value(chainKey{}).(string)
	return context.WithValue(ctx, chainKey{}, prev+h.name)
}

// nilCtxHooks returns a nil context, which the chain ignores.
type nilCtxHooks struct{ NoopHooks }

func (nilCtxHooks) TaskStarted(context.Context, TaskEvent) context.Context { return nil }

func TestMultiHooks(t *testing.T) {
	t.Parallel()
	require.Equal(t, NoopHooks{}, MultiHooks())
	require.Equal(t, NoopHooks{}, MultiHooks(nil, NoopHooks{}, &NoopHooks{}))
	a := ctxHooks{name: "a"}
	require.Equal(t, a, MultiHooks(nil, a), "a single hook is returned as it is")

	m := MultiHooks(a, MultiHooks(ctxHooks{name: "b"}, nilCtxHooks{}), nil, ctxHooks{name: "c"})
	require.Len(t, m, 4, "nested MultiHooks are flattened")
	ctx := m.TaskStarted(context.Background(), TaskEvent{})
	require.Equal(t, "abc", ctx.Value(chainKey{}), "contexts chain in order; a nil context is ignored")

	require.Empty(t, sinksOf(nil))
	require.Empty(t, sinksOf(MultiHooks(NoopHooks{})))
	require.Nil(t, observe.New(sinksOf(nil), slog.Default()), "no hooks: no observer")
	var o *observe.Observer // no hooks: every call is a no-op
	bg := context.Background()
	require.Equal(t, bg, o.TaskStarted(bg, taskrun.Meta{}))
	o.TaskFinished(bg, taskrun.Meta{}, observe.Completed)
	o.Start(bg)()
}

func TestEventOutcomes(t *testing.T) {
	t.Parallel()
	require.Equal(t, PollError, PollEvent{Err: errors.New("x"), Messages: 1, Claimed: 1}.Outcome())
	require.Equal(t, PollClaimed, PollEvent{Messages: 2, Claimed: 1}.Outcome())
	require.Equal(t, PollEmpty, PollEvent{}.Outcome())
	require.Equal(t, PollUnclaimed, PollEvent{Messages: 2}.Outcome())
	require.Equal(t, HandlerOK, HandlerEvent{}.Outcome())
	require.Equal(t, HandlerError, HandlerEvent{Err: errors.New("x")}.Outcome())
	require.Equal(t, HandlerPanic, HandlerEvent{Err: fmt.Errorf("wrapped: %w", &PanicError{Value: 1})}.Outcome())
}

// TestWorkerJSONLogsCarryIdentifiersAsStrings checks that a worker logging JSON writes run, worker and message ids
// as JSON strings (message ids are 64-bit and would lose precision as JSON numbers in many consumers).
func TestWorkerJSONLogsCarryIdentifiersAsStrings(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("json_logs")
	Step(f, "fails_once", func(ctx context.Context, tk *Task[int]) (int, error) {
		tk.Logger.Info("inside the handler")
		if tk.Attempt == 1 {
			return 0, errors.New("try again")
		}
		return 1, nil
	}, MaxAttempts(2), BaseDelay(time.Second))
	logs := &logBuffer{}
	cfg, _ := testConfig(t)
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rw := startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "json_logs", 1)
	nudgeRetries(t, db.Pool, "json_logs", runID)
	require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)
	require.NoError(t, rw.stop(t))

	var msgID int64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`select message_id from pgflow.step_tasks where run_id = $1`, runID).Scan(&msgID))

	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), "line %q", sc.Text())
		if wid, ok := rec["worker_id"]; ok {
			require.IsType(t, "", wid, "worker_id in %q", sc.Text())
			require.Regexp(t, uuid, wid)
			require.Equal(t, rw.w.ID(), wid)
		}
		msg, _ := rec["msg"].(string)
		switch msg {
		case "task started", "inside the handler", "task completed", "task failed", "task will be retried":
			seen[msg] = true
			require.Equal(t, runID, rec["run_id"], "run_id is the run's UUID as a string in %q", sc.Text())
			require.Equal(t, strconv.FormatInt(msgID, 10), rec["msg_id"], "msg_id is a string in %q", sc.Text())
			require.Equal(t, "json_logs", rec["flow"])
			require.Equal(t, "fails_once", rec["step"])
			require.Equal(t, "json_logs", rec["queue"])
			require.IsType(t, float64(0), rec["attempt"], "attempt is a number")
			require.IsType(t, float64(0), rec["task_index"], "task_index is a number")
		}
	}
	require.NoError(t, sc.Err())
	for _, msg := range []string{"task started", "inside the handler", "task completed", "task failed", "task will be retried"} {
		require.True(t, seen[msg], "a %q line was logged", msg)
	}
}

// TestRootPackageDoesNotImportMetricsLibraries keeps the core dependency-light: neither the root package nor any
// package of this module it imports (transitively) may import Prometheus or OpenTelemetry; the adapters live in
// pgflowprom and pgflowotel.
func TestRootPackageDoesNotImportMetricsLibraries(t *testing.T) {
	t.Parallel()
	const module = "github.com/pgflow-go/pgflow"
	seen := map[string]bool{}
	var visit func(dir, path string)
	visit = func(dir, path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		pkg, err := build.ImportDir(dir, 0)
		require.NoError(t, err, "package %s", path)
		for _, imp := range pkg.Imports {
			require.False(t, strings.HasPrefix(imp, "github.com/prometheus/") || strings.HasPrefix(imp, "go.opentelemetry.io/"),
				"%s imports %s", path, imp)
			if imp == module || strings.HasPrefix(imp, module+"/") {
				visit(filepath.Join(".", strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")), imp)
			}
		}
	}
	visit(".", module)
	require.True(t, seen[module+"/internal/sqlapi"], "the walk follows the module's own imports")
}

// The public outcome and reason values are the engine's, so metrics labels and hooks never disagree with logs.
func TestPublicOutcomesMatchTheEngine(t *testing.T) {
	t.Parallel()
	pairs := map[TaskOutcome]observe.Outcome{
		OutcomeCompleted: observe.Completed, OutcomeRetried: observe.Retried, OutcomeFailed: observe.Failed,
		OutcomeNotRecorded: observe.NotRecorded, OutcomeUnreported: observe.Unreported, OutcomeStale: observe.Stale,
		OutcomeReleased: observe.Released, OutcomeCancelled: observe.Cancelled,
	}
	for public, engine := range pairs {
		require.Equal(t, string(engine), string(public))
	}
	require.Equal(t, observe.StaleSuperseded, string(StaleSuperseded))
	require.Equal(t, observe.StaleTimedOut, string(StaleTimedOut))
}
