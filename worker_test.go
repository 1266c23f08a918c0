package pgflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgerr"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

type chainInput struct {
	N     int `json:"n"`
	Bonus int `json:"bonus"`
}

func TestWorkerChainWithLazyFlowInput(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[chainInput]("chain")
	var metas sync.Map
	a := Step(f, "a", func(ctx context.Context, tk *Task[chainInput]) (int, error) {
		metas.Store(tk.StepSlug, tk.TaskMeta)
		in, err := tk.FlowInput(ctx)
		return in.N + 1, err
	})
	b := Step(f, "b", func(ctx context.Context, tk *Task[chainInput]) (int, error) {
		metas.Store(tk.StepSlug, tk.TaskMeta)
		av, err := a.Output(tk)
		if err != nil {
			return 0, err
		}
		in, err := tk.FlowInput(ctx) // not in the task row: loaded from pgflow.runs
		return av*2 + in.Bonus, err
	}, DependsOn(a))
	Step(f, "c", func(ctx context.Context, tk *Task[chainInput]) (string, error) {
		metas.Store(tk.StepSlug, tk.TaskMeta)
		bv, err := b.Output(tk)
		return fmt.Sprintf("b=%d", bv), err
	}, DependsOn(b))

	cfg, _ := testConfig(t)
	rw := startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "chain", chainInput{N: 4, Bonus: 100})
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"c": "b=110"}`, string(res.Output))
	require.JSONEq(t, `5`, string(stepState(t, db.Pool, runID, "a").Output))

	for _, step := range []string{"a", "b", "c"} {
		v, ok := metas.Load(step)
		require.True(t, ok, step)
		m := v.(TaskMeta)
		require.Equal(t, runID, m.RunID)
		require.Equal(t, "chain", m.FlowSlug)
		require.Equal(t, "chain", m.QueueName)
		require.Equal(t, step, m.StepSlug)
		require.Equal(t, 0, m.TaskIndex)
		require.Equal(t, 1, m.Attempt)
		require.Equal(t, rw.w.ID(), m.WorkerID)
		require.NotZero(t, m.MessageID)
	}
	require.NoError(t, rw.stop(t))
	_, stopped := workerRow(t, db.Pool, rw.w.ID())
	require.True(t, stopped)
}

func TestWorkerDiamondAndFalsyOutputs(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("diamond")
	top := Step(f, "top", func(ctx context.Context, tk *Task[int]) (int, error) {
		in, err := tk.FlowInput(ctx)
		return in, err
	})
	left := Step(f, "left", func(ctx context.Context, tk *Task[int]) (int, error) {
		v, err := top.Output(tk)
		return v * 10, err
	}, DependsOn(top))
	right := Step(f, "right", func(ctx context.Context, tk *Task[int]) (int, error) {
		v, err := top.Output(tk)
		return v + 1, err
	}, DependsOn(top))
	Step(f, "join", func(ctx context.Context, tk *Task[int]) (int, error) {
		l, err := left.Output(tk)
		if err != nil {
			return 0, err
		}
		r, err := right.Output(tk)
		return l + r, err
	}, DependsOn(left, right))
	Step(f, "zero", func(ctx context.Context, tk *Task[int]) (int, error) { return 0, nil })
	Step(f, "no", func(ctx context.Context, tk *Task[int]) (bool, error) { return false, nil })
	Step(f, "empty", func(ctx context.Context, tk *Task[int]) (string, error) { return "", nil })
	Step(f, "nothing", func(ctx context.Context, tk *Task[int]) (*int, error) { return nil, nil })

	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "diamond", 3)
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"join": 34, "zero": 0, "no": false, "empty": "", "nothing": null}`, string(res.Output))
}

func TestWorkerRootMapDependentMapAndEmptyMaps(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	f := NewFlow[[]int]("maps")
	var indexes sync.Map
	double := MapInput(f, "double", func(ctx context.Context, tk *Task[[]int], item int) (int, error) {
		indexes.Store(item, tk.TaskIndex)
		return item * 2, nil
	})
	words := Step(f, "words", func(ctx context.Context, tk *Task[[]int]) ([]string, error) {
		in, err := tk.FlowInput(ctx) // a root single step: the input comes with the task
		out := make([]string, len(in))
		for i, n := range in {
			out[i] = strings.Repeat("x", n)
		}
		return out, err
	})
	lens := Map(f, "lens", words, func(ctx context.Context, tk *Task[[]int], w string) (int, error) {
		in, err := tk.FlowInput(ctx) // a map task: loaded lazily
		return len(w) + len(in), err
	})
	Step(f, "total", func(ctx context.Context, tk *Task[[]int]) (int, error) {
		d, err := double.Output(tk)
		if err != nil {
			return 0, err
		}
		l, err := lens.Output(tk)
		sum := 0
		for _, v := range append(d, l...) {
			sum += v
		}
		return sum, err
	}, DependsOn(double, lens))

	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)

	runID := startRun(t, db.Pool, "maps", []int{1, 2, 3})
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `[2, 4, 6]`, string(stepState(t, db.Pool, runID, "double").Output))
	require.JSONEq(t, `[4, 5, 6]`, string(stepState(t, db.Pool, runID, "lens").Output))
	require.JSONEq(t, `{"total": 27}`, string(res.Output))
	for item, want := range map[int]int{1: 0, 2: 1, 3: 2} {
		got, ok := indexes.Load(item)
		require.True(t, ok)
		require.Equal(t, want, got)
	}

	empty := startRun(t, db.Pool, "maps", []int{})
	res = waitRun(t, db.Pool, empty)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `[]`, string(stepState(t, db.Pool, empty, "double").Output))
	require.JSONEq(t, `[]`, string(stepState(t, db.Pool, empty, "words").Output))
	require.JSONEq(t, `[]`, string(stepState(t, db.Pool, empty, "lens").Output))
	require.JSONEq(t, `{"total": 0}`, string(res.Output))
}

type gateInput struct {
	Go bool `json:"go"`
}

func TestWorkerConditionsSkipAndSkipCascade(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[gateInput]("conditions")
	var calls sync.Map
	count := func(slug string) {
		v, _ := calls.LoadOrStore(slug, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
	}
	called := func(slug string) int32 {
		v, ok := calls.Load(slug)
		if !ok {
			return 0
		}
		return v.(*atomic.Int32).Load()
	}
	gated := Step(f, "gated", func(ctx context.Context, tk *Task[gateInput]) (string, error) {
		count("gated")
		return "ran", nil
	}, If(map[string]any{"go": true}), WhenUnmet(Skip))
	Step(f, "after", func(ctx context.Context, tk *Task[gateInput]) (string, error) {
		count("after")
		_, err := gated.Output(tk)
		if errors.Is(err, ErrDependencySkipped) {
			return "gated was skipped", nil
		}
		return "gated ran", err
	}, DependsOn(gated))
	cgate := Step(f, "cgate", func(ctx context.Context, tk *Task[gateInput]) (int, error) {
		count("cgate")
		return 1, nil
	}, If(map[string]any{"go": true}), WhenUnmet(SkipCascade))
	Step(f, "cascaded", func(ctx context.Context, tk *Task[gateInput]) (int, error) {
		count("cascaded")
		return 2, nil
	}, DependsOn(cgate))
	Step(f, "always", func(ctx context.Context, tk *Task[gateInput]) (int, error) {
		count("always")
		return 3, nil
	})

	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "conditions", gateInput{Go: false})
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"after": "gated was skipped", "always": 3}`, string(res.Output))

	g := stepState(t, db.Pool, runID, "gated")
	require.Equal(t, "skipped", g.Status)
	require.Equal(t, "condition_unmet", *g.SkipReason)
	c := stepState(t, db.Pool, runID, "cascaded")
	require.Equal(t, "skipped", c.Status)
	require.Equal(t, "dependency_skipped", *c.SkipReason)
	require.Zero(t, called("gated"))
	require.Zero(t, called("cgate"))
	require.Zero(t, called("cascaded"))
	require.EqualValues(t, 1, called("after"))
	require.EqualValues(t, 1, called("always"))

	// The condition met: everything runs.
	runID = startRun(t, db.Pool, "conditions", gateInput{Go: true})
	res = waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"after": "gated ran", "cascaded": 2, "always": 3}`, string(res.Output))
}

func TestWorkerConditionUnmetFailsRun(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[gateInput]("unmet_fail")
	var ran atomic.Bool
	Step(f, "strict", func(ctx context.Context, tk *Task[gateInput]) (int, error) {
		ran.Store(true)
		return 1, nil
	}, If(map[string]any{"go": true}), WhenUnmet(Fail))
	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "unmet_fail", gateInput{Go: false})
	require.Equal(t, "failed", waitRun(t, db.Pool, runID).Status)
	require.False(t, ran.Load())
}

// nudgeRetries makes every task of run that waits for a retry visible at once, so retry tests do not wait for
// the database's retry delay (2 × BaseDelay and more). It stops at the end of the test.
func nudgeRetries(t *testing.T, pool *pgxpool.Pool, flowSlug, runID string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = pool.Exec(ctx, `select pgmq.set_vt($1, t.message_id, 0)
			                         from pgflow.step_tasks as t
			                        where t.run_id = $2 and t.status = 'queued' and t.attempts_count > 0`, flowSlug, runID)
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

func TestWorkerRetriesThenSucceeds(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("retries")
	var mu sync.Mutex
	var attempts []int
	Step(f, "flaky", func(ctx context.Context, tk *Task[int]) (string, error) {
		mu.Lock()
		attempts = append(attempts, tk.Attempt)
		mu.Unlock()
		if tk.Attempt < 3 {
			return "", fmt.Errorf("transient failure on attempt %d", tk.Attempt)
		}
		return "ok", nil
	}, MaxAttempts(3), BaseDelay(time.Second))

	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "retries", 1)
	nudgeRetries(t, db.Pool, "retries", runID)
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"flaky": "ok"}`, string(res.Output))
	mu.Lock()
	require.Equal(t, []int{1, 2, 3}, attempts)
	mu.Unlock()
	require.Equal(t, 3, taskRow(t, db.Pool, runID, "flaky", 0).Attempts)
}

func TestWorkerRetryWaitsForTheDatabaseDelay(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("retry_delay")
	var calls atomic.Int32
	Step(f, "once_bad", func(ctx context.Context, tk *Task[int]) (int, error) {
		if calls.Add(1) == 1 {
			return 0, errors.New("first attempt fails")
		}
		return tk.Attempt, nil
	}, MaxAttempts(2), BaseDelay(time.Second))
	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "retry_delay", 1)
	res := waitRun(t, db.Pool, runID) // the retry becomes visible after 2 s on its own
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"once_bad": 2}`, string(res.Output))
	tk := taskRow(t, db.Pool, runID, "once_bad", 0)
	require.Equal(t, 2, tk.Attempts)
}

func TestWorkerExhaustionFailsRun(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("exhaust_fail")
	Step(f, "bad", func(ctx context.Context, tk *Task[int]) (int, error) {
		return 0, errors.New("the remote service said no")
	}, MaxAttempts(1), WhenExhausted(Fail))
	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "exhaust_fail", 1)
	require.Equal(t, "failed", waitRun(t, db.Pool, runID).Status)
	tk := taskRow(t, db.Pool, runID, "bad", 0)
	require.Equal(t, "failed", tk.Status)
	require.Equal(t, "the remote service said no", *tk.Error)
	require.Equal(t, "failed", stepState(t, db.Pool, runID, "bad").Status)
}

func TestWorkerExhaustionSkipsStep(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("exhaust_skip")
	bad := Step(f, "bad", func(ctx context.Context, tk *Task[int]) (int, error) {
		return 0, errors.New("optional enrichment failed")
	}, MaxAttempts(1), WhenExhausted(Skip))
	Step(f, "next", func(ctx context.Context, tk *Task[int]) (string, error) {
		_, err := bad.Output(tk)
		if errors.Is(err, ErrDependencySkipped) {
			return "without enrichment", nil
		}
		return "with enrichment", err
	}, DependsOn(bad))
	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "exhaust_skip", 1)
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"next": "without enrichment"}`, string(res.Output))
	s := stepState(t, db.Pool, runID, "bad")
	require.Equal(t, "skipped", s.Status)
	require.Equal(t, "handler_failed", *s.SkipReason)
	require.Equal(t, "optional enrichment failed", *taskRow(t, db.Pool, runID, "bad", 0).Error)
}

func TestWorkerPanicFailsTaskWithPanicMessage(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("panics")
	Step(f, "boom", func(ctx context.Context, tk *Task[int]) (int, error) {
		panic("kaboom: nil map")
	}, MaxAttempts(1))
	cfg, logs := testConfig(t)
	rw := startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "panics", 1)
	require.Equal(t, "failed", waitRun(t, db.Pool, runID).Status)
	tk := taskRow(t, db.Pool, runID, "boom", 0)
	require.Equal(t, "failed", tk.Status)
	require.Contains(t, *tk.Error, `panic in handler of step "boom"`)
	require.Contains(t, *tk.Error, "kaboom: nil map")
	require.NotContains(t, *tk.Error, "goroutine", "the stack goes to the log, not to the database")

	// The worker survives the panic and keeps working.
	require.NoError(t, rw.stop(t))
	require.Contains(t, logs.String(), "handler panicked")
	require.Contains(t, logs.String(), "goroutine", "the stack is logged")
}

func TestWorkerOutputRejectedByDatabaseFailsTask(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("nul_output")
	Step(f, "nul", func(ctx context.Context, tk *Task[int]) (string, error) {
		return "a\x00b", nil // jsonb cannot store \u0000
	}, MaxAttempts(1))
	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "nul_output", 1)
	require.Equal(t, "failed", waitRun(t, db.Pool, runID).Status)
	tk := taskRow(t, db.Pool, runID, "nul", 0)
	require.Equal(t, "failed", tk.Status)
	require.Contains(t, *tk.Error, `flow "nul_output", step "nul": the database refused the handler's output: unsupported Unicode escape sequence`)
	require.Contains(t, *tk.Error, "SQLSTATE 22P05")
}

func TestWorkerShutdownMidTaskFinishesAndReports(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("graceful")
	started := make(chan struct{}, 2)
	release := make(chan struct{})
	var ctxErrAtRelease atomic.Value
	Step(f, "slow", func(ctx context.Context, tk *Task[int]) (int, error) {
		started <- struct{}{}
		<-release
		ctxErrAtRelease.Store(fmt.Sprint(ctx.Err()))
		return 42, nil
	})
	cfg, _ := testConfig(t)
	cfg.MaxConcurrent = 1
	var logs *logBuffer
	cfg.Logger, logs = newTestLogger(t)
	rw := startWorker(t, db.Pool, f, cfg)
	first := startRun(t, db.Pool, "graceful", 1)
	<-started
	second := startRun(t, db.Pool, "graceful", 2) // no free slot: stays queued

	rw.cancel()
	waitFor(t, "shutdown to begin", func() bool { return strings.Contains(logs.String(), "stopped reading messages") })
	close(release)
	require.NoError(t, rw.wait(t))

	require.Equal(t, "<nil>", ctxErrAtRelease.Load(), "the handler's context is not cancelled during a graceful shutdown")
	res := waitRun(t, db.Pool, first)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"slow": 42}`, string(res.Output))
	tk := taskRow(t, db.Pool, second, "slow", 0)
	require.Equal(t, "queued", tk.Status, "no task is started after shutdown began")
	require.Zero(t, tk.Attempts)
	_, stopped := workerRow(t, db.Pool, rw.w.ID())
	require.True(t, stopped)
	require.Len(t, started, 0)
}

// A handler still running at the hard stop of a shutdown has its context cancelled; the task goes back to the
// queue without spending the attempt (pgflow.release_tasks), so a deploy never fails a run with MaxAttempts(1).
// Before, the interrupted attempt was recorded as failed and the run failed.
func TestWorkerHardStopReleasesInterruptedTask(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("hard_stop")
	started := make(chan struct{})
	var calls atomic.Int32
	Step(f, "stubborn", func(ctx context.Context, tk *Task[int]) (int, error) {
		if calls.Add(1) > 1 {
			return 7, nil // the next worker's run of the task
		}
		close(started)
		<-ctx.Done()
		return 0, fmt.Errorf("upload interrupted: %w", ctx.Err())
	}, MaxAttempts(1))
	hooks := &recordingHooks{}
	cfg, logs := testConfig(t)
	cfg.ShutdownTimeout = 200 * time.Millisecond
	cfg.Hooks = hooks
	rw := startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "hard_stop", 1)
	waitClosed(t, "handler start", started)
	require.NoError(t, rw.stop(t))

	tk := taskRow(t, db.Pool, runID, "stubborn", 0)
	require.Equal(t, "queued", tk.Status, "the interrupted task went back to the queue")
	require.Zero(t, tk.Attempts, "the interrupted attempt is not counted")
	require.Nil(t, tk.Error)
	var run string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `select status from pgflow.runs where run_id = $1`, runID).Scan(&run))
	require.Equal(t, "started", run)
	require.Contains(t, logs.String(), "task put back in the queue without spending its attempt")
	require.Equal(t, []TaskOutcome{OutcomeReleased}, hooks.outcomes())
	_, stopped := workerRow(t, db.Pool, rw.w.ID())
	require.True(t, stopped)

	// Its message is visible at once: the next worker runs the task as attempt 1 and the run completes.
	cfg2, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg2)
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.Equal(t, 1, taskRow(t, db.Pool, runID, "stubborn", 0).Attempts)
}

// A handler that ignores the cancellation of its context is given up after the abandon grace; its task is put
// back in the queue without spending the attempt instead of staying started until stalled-task recovery.
func TestWorkerAbandonsHandlersThatIgnoreCancellation(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("abandon")
	started := make(chan struct{})
	release := make(chan struct{})
	Step(f, "deaf", func(ctx context.Context, tk *Task[int]) (int, error) {
		close(started)
		<-release // ignores ctx
		return 1, nil
	})
	t.Cleanup(func() { close(release) })
	cfg, logs := testConfig(t)
	rw := startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "abandon", 1)
	waitClosed(t, "handler start", started)
	// A Stop whose context ends gives up on the handler at once (instead of ShutdownTimeout + the grace period).
	stopCtx, cancelStop := context.WithCancel(context.Background())
	stopErr := make(chan error, 1)
	go func() { stopErr <- rw.w.Stop(stopCtx) }()
	waitFor(t, "shutdown to begin", func() bool { return strings.Contains(logs.String(), "stopped reading messages") })
	cancelStop()
	require.ErrorIs(t, <-stopErr, context.Canceled)
	require.NoError(t, rw.stop(t))
	_, stopped := workerRow(t, db.Pool, rw.w.ID())
	require.True(t, stopped)
	tk := taskRow(t, db.Pool, runID, "deaf", 0)
	require.Equal(t, "queued", tk.Status)
	require.Zero(t, tk.Attempts)
}

// shapeFlow returns a flow named slug with the given root step slugs.
func shapeFlow(slug string, steps ...string) *Flow[int] {
	f := NewFlow[int](slug)
	for _, s := range steps {
		Step(f, s, func(ctx context.Context, tk *Task[int]) (string, error) { return tk.StepSlug, nil }, MaxAttempts(1))
	}
	return f
}

func compileFlow(t *testing.T, pool *pgxpool.Pool, f AnyFlow) {
	t.Helper()
	shape, err := f.Shape()
	require.NoError(t, err)
	res, err := sqlapi.EnsureFlowCompiled(context.Background(), pool, f.Slug(), shape, sqlapi.FlowDeployment{}, false)
	require.NoError(t, err)
	require.Equal(t, "compiled", res.Status)
}

func TestWorkerShapeMismatchInProduction(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	v1 := shapeFlow("shapes", "a", "b")
	compileFlow(t, db.Pool, v1)
	oldRun := startRun(t, db.Pool, "shapes", 1)
	before := storedShape(t, db.Pool, "shapes")

	v2 := shapeFlow("shapes", "a", "c")
	cfg, _ := testConfig(t)
	w, err := newWorkerFor(t, db.Pool, v2, cfg)
	require.NoError(t, err)
	err = w.Run(context.Background())
	require.ErrorIs(t, err, ErrShapeMismatch)
	var sm *ShapeMismatchError
	require.ErrorAs(t, err, &sm)
	require.Equal(t, "shapes", sm.Flow)
	require.NotEmpty(t, sm.Differences)
	for _, d := range sm.Differences {
		require.Contains(t, err.Error(), d)
	}
	require.Contains(t, err.Error(), "AllowDataLoss")

	require.Equal(t, before, storedShape(t, db.Pool, "shapes"), "nothing changed")
	var runs int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `select count(*) from pgflow.runs where run_id = $1`, oldRun).Scan(&runs))
	require.Equal(t, 1, runs)
	exists, _ := workerRow(t, db.Pool, w.ID())
	require.False(t, exists, "a worker that did not start is not registered")
}

func TestWorkerAllowDataLossRecompiles(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	v1 := shapeFlow("recompile", "a", "b")
	compileFlow(t, db.Pool, v1)
	oldRun := startRun(t, db.Pool, "recompile", 1)

	v2 := shapeFlow("recompile", "a", "c")
	cfg, logs := testConfig(t)
	cfg.AllowDataLoss = true
	startWorker(t, db.Pool, v2, cfg)
	require.Equal(t, []string{"a", "c"}, storedSteps(t, db.Pool, "recompile"))
	var runs int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `select count(*) from pgflow.runs where run_id = $1`, oldRun).Scan(&runs))
	require.Zero(t, runs, "recompiling deletes the flow's runs")
	require.Contains(t, logs.String(), "recompiled")

	runID := startRun(t, db.Pool, "recompile", 1)
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"a": "a", "c": "c"}`, string(res.Output))
}

func TestWorkerLocalEnvironmentRecompiles(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	v1 := shapeFlow("local_dev", "a")
	compileFlow(t, db.Pool, v1)

	pcfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	pcfg.ConnConfig.RuntimeParams["pgflow.environment"] = "local"
	pcfg.ConnConfig.RuntimeParams["search_path"] = ""
	local, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	require.NoError(t, err)
	t.Cleanup(local.Close)

	v2 := shapeFlow("local_dev", "a", "b")
	cfg, _ := testConfig(t)
	rw := startWorker(t, local, v2, cfg)
	require.Equal(t, []string{"a", "b"}, storedSteps(t, db.Pool, "local_dev"))
	runID := startRun(t, db.Pool, "local_dev", 1)
	require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)
	require.NoError(t, rw.stop(t))
}

func TestWorkerHeartbeatWhileHandlerRuns(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("heartbeat")
	started := make(chan struct{})
	release := make(chan struct{})
	Step(f, "long", func(ctx context.Context, tk *Task[int]) (int, error) {
		close(started)
		<-release
		return 1, nil
	})
	cfg, _ := testConfig(t)
	cfg.MaxConcurrent = 1
	cfg.HeartbeatInterval = 50 * time.Millisecond
	rw := startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "heartbeat", 1)
	waitClosed(t, "handler start", started)

	heartbeat := func() time.Time {
		var at time.Time
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`select last_heartbeat_at from pgflow.workers where worker_id = $1`, rw.w.ID()).Scan(&at))
		return at
	}
	first := heartbeat()
	for range 3 { // several heartbeats while the only slot is busy
		waitFor(t, "a newer heartbeat", func() bool { return heartbeat().After(first) })
		first = heartbeat()
	}
	close(release)
	require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)
}

func TestWorkerHeartbeatRegistersAgainWhenRowIsMissing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := shapeFlow("reregister", "a")
	cfg, _ := testConfig(t)
	cfg.HeartbeatInterval = 50 * time.Millisecond
	rw := startWorker(t, db.Pool, f, cfg)
	_, err := db.Pool.Exec(context.Background(), `delete from pgflow.workers where worker_id = $1`, rw.w.ID())
	require.NoError(t, err)
	waitFor(t, "the worker to register again", func() bool {
		exists, _ := workerRow(t, db.Pool, rw.w.ID())
		return exists
	})
	runID := startRun(t, db.Pool, "reregister", 1)
	require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)
}

func TestWorkerDeprecationStopsWorker(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("deprecate")
	started := make(chan struct{})
	release := make(chan struct{})
	Step(f, "job", func(ctx context.Context, tk *Task[int]) (int, error) {
		select {
		case <-started:
		default:
			close(started)
		}
		<-release
		return 7, nil
	})
	cfg, _ := testConfig(t)
	cfg.HeartbeatInterval = 50 * time.Millisecond
	cfg.MaxConcurrent = 1
	var logs *logBuffer
	cfg.Logger, logs = newTestLogger(t)
	rw := startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "deprecate", 1)
	waitClosed(t, "handler start", started)
	_, err := db.Pool.Exec(context.Background(), `update pgflow.workers set deprecated_at = now() where worker_id = $1`, rw.w.ID())
	require.NoError(t, err)
	waitFor(t, "shutdown after deprecation", func() bool { return strings.Contains(logs.String(), "stopped reading messages") })
	close(release)
	require.NoError(t, rw.wait(t), "Run returns on its own after deprecation")
	require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status, "the in-flight task finished and was reported")
	_, stopped := workerRow(t, db.Pool, rw.w.ID())
	require.True(t, stopped)
}

func TestWorkerRefillsSlotsBeforeBatchDrains(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[[]int]("refill")
	release := make(chan struct{})
	MapInput(f, "work", func(ctx context.Context, tk *Task[[]int], item int) (int, error) {
		if item == 0 {
			<-release
		}
		return item, nil
	})
	cfg, _ := testConfig(t)
	cfg.MaxConcurrent = 2
	cfg.BatchSize = 2
	startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "refill", []int{0, 1, 2, 3, 4, 5, 6, 7})

	completed := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`select count(*) from pgflow.step_tasks where run_id = $1 and status = 'completed'`, runID).Scan(&n))
		return n
	}
	// The long task (element 0, in the first batch) holds one of two slots; the other seven complete meanwhile.
	waitFor(t, "the seven short tasks to complete while the long one runs", func() bool { return completed() == 7 })
	require.Equal(t, "started", taskRow(t, db.Pool, runID, "work", 0).Status)
	close(release)
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"work": [0, 1, 2, 3, 4, 5, 6, 7]}`, string(res.Output))
}

func TestWorkerTwoWorkersHandleEachTaskOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[[]int]("shared")
	var mu sync.Mutex
	calls := map[int]int{}
	byWorker := map[string]int{}
	MapInput(f, "work", func(ctx context.Context, tk *Task[[]int], item int) (int, error) {
		mu.Lock()
		calls[item]++
		byWorker[tk.WorkerID]++
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		return item * item, nil
	})
	cfg, _ := testConfig(t)
	cfg.MaxConcurrent = 3
	cfg.BatchSize = 3
	cfg2 := cfg
	w1 := startWorker(t, db.Pool, f, cfg)
	w2 := startWorker(t, db.Pool, f, cfg2)
	require.NotEqual(t, w1.w.ID(), w2.w.ID())

	input := make([]int, 60)
	for i := range input {
		input[i] = i
	}
	runID := startRun(t, db.Pool, "shared", input)
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, 60)
	for item, n := range calls {
		require.Equal(t, 1, n, "item %d handled %d times", item, n)
	}
	total := 0
	for id, n := range byWorker {
		require.Contains(t, []string{w1.w.ID(), w2.w.ID()}, id)
		total += n
	}
	require.Equal(t, 60, total)
}

func TestWorkerMaintenanceRequeuesStalledTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	f := NewFlow[int]("stalled")
	var attempts sync.Map
	Step(f, "job", func(ctx context.Context, tk *Task[int]) (int, error) {
		attempts.Store(tk.Attempt, true)
		return tk.Attempt, nil
	})
	compileFlow(t, db.Pool, f)
	runID := startRun(t, db.Pool, "stalled", 1)

	// A worker that died: it claimed the task and never reported.
	const ghost = "99999999-9999-4999-8999-999999999999"
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, ghost, "stalled", "pgflow-go"))
	msgs, err := sqlapi.ReadWithPoll(ctx, db.Pool, sqlapi.ReadParams{Queue: "stalled", VisibilitySeconds: 5, Qty: 1, MaxPollSeconds: 1, PollIntervalMs: 10})
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	claimed, err := sqlapi.StartTasks(ctx, db.Pool, "stalled", "stalled", []int64{msgs[0].ID}, ghost)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	_, err = db.Pool.Exec(ctx, `update pgflow.step_tasks
	                               set queued_at = now() - interval '10 minutes', started_at = now() - interval '5 minutes'
	                             where run_id = $1`, runID)
	require.NoError(t, err)

	cfg, logs := testConfig(t)
	cfg.MaintenanceInterval = 50 * time.Millisecond
	startWorker(t, db.Pool, f, cfg)
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"job": 2}`, string(res.Output))
	tk := taskRow(t, db.Pool, runID, "job", 0)
	require.Equal(t, 1, tk.Requeued)
	require.Equal(t, 2, tk.Attempts)
	require.Contains(t, logs.String(), "requeued stalled tasks")
}

func TestWorkerFailsTasksOfUnknownSteps(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	compileFlow(t, db.Pool, shapeFlow("partial", "a", "b"))
	partial := shapeFlow("partial", "a", "b")
	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, partial, cfg, forgetStep("b")) // this worker runs code that knows only step a
	runID := startRun(t, db.Pool, "partial", 1)
	require.Equal(t, "failed", waitRun(t, db.Pool, runID).Status)
	tk := taskRow(t, db.Pool, runID, "b", 0)
	require.Equal(t, "failed", tk.Status)
	require.Contains(t, *tk.Error, `has no step "b"`)
}

// blockedBackend waits until a backend runs a statement containing fragment and waits for a lock, and returns
// its pid.
func blockedBackend(t *testing.T, pool *pgxpool.Pool, fragment string) int {
	t.Helper()
	var pid int
	waitFor(t, "a backend blocked in "+fragment, func() bool {
		err := pool.QueryRow(context.Background(),
			`select pid from pg_stat_activity
			  where datname = current_database() and wait_event_type = 'Lock' and strpos(query, $1) > 0
			  limit 1`, fragment).Scan(&pid)
		return err == nil
	})
	return pid
}

func TestWorkerRetriesReportingWithoutCostingAnAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	f := NewFlow[int]("report_retry")
	var calls atomic.Int32
	locked := make(chan struct{})
	Step(f, "job", func(ctx context.Context, tk *Task[int]) (int, error) {
		calls.Add(1)
		<-locked
		return 5, nil
	})
	cfg, logs := testConfig(t)
	startWorker(t, db.Pool, f, cfg)

	// Hold the run's row lock so complete_task blocks, then kill the blocked backend: a lost connection.
	runID := startRun(t, db.Pool, "report_retry", 1)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `select 1 from pgflow.runs where run_id = $1 for update`, runID)
	require.NoError(t, err)
	close(locked)
	pid := blockedBackend(t, db.Pool, "pgflow.complete_task")
	_, err = db.Pool.Exec(ctx, `select pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	waitFor(t, "the worker to log the failed report", func() bool {
		return strings.Contains(logs.String(), "reporting the task's result failed, retrying")
	})
	require.NoError(t, tx.Rollback(ctx))

	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"job": 5}`, string(res.Output))
	require.EqualValues(t, 1, calls.Load(), "the handler ran once")
	require.Equal(t, 1, taskRow(t, db.Pool, runID, "job", 0).Attempts, "the failed report cost no attempt")
}

func TestWorkerRecoversFromPollingErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	f := shapeFlow("poll_errors", "a")
	cfg, logs := testConfig(t)
	cfg.MaxPollWait = 30 * time.Second // the poll waits long enough to be found and killed
	cfg.PollOnly = true                // waiting inside pgmq.read_with_poll
	startWorker(t, db.Pool, f, cfg)
	var pid int
	waitFor(t, "the polling backend", func() bool {
		err := db.Pool.QueryRow(ctx,
			`select pid from pg_stat_activity
			  where datname = current_database() and pid <> pg_backend_pid() and state = 'active' and strpos(query, 'pgmq.read_with_poll') > 0
			  limit 1`).Scan(&pid)
		return err == nil
	})
	_, err := db.Pool.Exec(ctx, `select pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	waitFor(t, "the worker to log the polling error", func() bool {
		return strings.Contains(logs.String(), "polling the queue failed, retrying")
	})
	runID := startRun(t, db.Pool, "poll_errors", 1)
	require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)
}

func TestWorkerStartupRetriesUntilCancelled(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: every connection attempt fails, which is a transient error.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg, logs := testConfig(t)
	rw := launchWorker(t, pool, shapeFlow("unreachable", "a"), cfg)
	waitFor(t, "two startup retries", func() bool {
		return strings.Count(logs.String(), "worker startup: database error, retrying") >= 2
	})
	require.NoError(t, rw.stop(t), "a shutdown during startup is not an error")
}

func TestWorkerStartupFailsWithoutSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.NewWithPGMQ(t)
	cfg, _ := testConfig(t)
	w, err := newWorkerFor(t, db.Pool, shapeFlow("no_schema", "a"), cfg)
	require.NoError(t, err)
	err = w.Run(context.Background())
	require.Error(t, err)
	require.Contains(t, err.Error(), "pgflow migrate up")
	require.Contains(t, err.Error(), w.ID())
}

func TestWorkerRunsOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg, _ := testConfig(t)
	rw := startWorker(t, db.Pool, shapeFlow("once", "a"), cfg)
	require.NoError(t, rw.stop(t))
	err := rw.w.Run(context.Background())
	require.ErrorContains(t, err, "Start was already called")
}

func TestWorkerConfigDefaults(t *testing.T) {
	t.Parallel()
	rc, err := WorkerConfig{Flows: []WorkerFlow{{Flow: shapeFlow("cfg", "a")}}}.resolve()
	require.NoError(t, err)
	require.Equal(t, DefaultMaxConcurrent, rc.MaxConcurrent)
	require.Equal(t, DefaultBatchSize, rc.BatchSize)
	require.Equal(t, 5, rc.vtSeconds)
	require.Equal(t, 5, rc.maxPollSeconds)
	require.Equal(t, 100, rc.pollIntervalMs)
	require.Equal(t, DefaultHeartbeatInterval, rc.HeartbeatInterval)
	require.Equal(t, DefaultShutdownTimeout, rc.ShutdownTimeout)
	require.Equal(t, DefaultMaintenanceInterval, rc.MaintenanceInterval)
	require.False(t, rc.maintenanceOff)
	require.False(t, rc.AllowDataLoss)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, rc.WorkerID)
	require.NotNil(t, rc.Logger)
	require.Same(t, slog.Default(), rc.Logger, "the one default logger policy: slog.Default()")

	other, err := WorkerConfig{Flows: []WorkerFlow{{Flow: shapeFlow("cfg", "a")}}}.resolve()
	require.NoError(t, err)
	require.NotEqual(t, rc.WorkerID, other.WorkerID, "every worker gets its own id")
}

func TestWorkerConfigRoundsAndKeepsValues(t *testing.T) {
	t.Parallel()
	rc, err := WorkerConfig{
		Flows:               []WorkerFlow{{Flow: shapeFlow("cfg", "a")}},
		MaxConcurrent:       3,
		BatchSize:           50,
		VisibilityTimeout:   1500 * time.Millisecond,
		MaxPollWait:         time.Millisecond,
		PollInterval:        1500 * time.Microsecond,
		MaintenanceInterval: -time.Second,
		WorkerID:            "0F8FAD5B-D9CB-469F-A165-70867728950E",
	}.resolve()
	require.NoError(t, err)
	require.Equal(t, 3, rc.MaxConcurrent)
	require.Equal(t, 50, rc.BatchSize)
	require.Equal(t, 2, rc.vtSeconds)
	require.Equal(t, 1, rc.maxPollSeconds)
	require.Equal(t, 2, rc.pollIntervalMs)
	require.True(t, rc.maintenanceOff)
	require.Equal(t, "0f8fad5b-d9cb-469f-a165-70867728950e", rc.WorkerID)
}

func TestWorkerConfigValidationNamesFieldAndValue(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cfg  WorkerConfig
		want []string
	}{
		{WorkerConfig{MaxConcurrent: -1}, []string{"WorkerConfig.MaxConcurrent = -1", "default, 10"}},
		{WorkerConfig{BatchSize: -5}, []string{"WorkerConfig.BatchSize = -5"}},
		{WorkerConfig{VisibilityTimeout: -time.Second}, []string{"WorkerConfig.VisibilityTimeout = -1s", "default, 5s"}},
		{WorkerConfig{MaxPollWait: -time.Millisecond}, []string{"WorkerConfig.MaxPollWait = -1ms"}},
		{WorkerConfig{PollInterval: -1}, []string{"WorkerConfig.PollInterval = -1ns"}},
		{WorkerConfig{HeartbeatInterval: -time.Minute}, []string{"WorkerConfig.HeartbeatInterval = -1m0s"}},
		{WorkerConfig{ShutdownTimeout: -time.Second}, []string{"WorkerConfig.ShutdownTimeout = -1s"}},
		{WorkerConfig{VisibilityTimeout: 1 << 62}, []string{"WorkerConfig.VisibilityTimeout = ", "at most"}},
		{WorkerConfig{WorkerID: "worker-1"}, []string{`WorkerConfig.WorkerID = "worker-1"`, "must be a UUID"}},
		{WorkerConfig{MaxConcurrent: -1, WorkerID: "x"}, []string{"MaxConcurrent = -1", `WorkerID = "x"`}},
	}
	for _, c := range cases {
		_, err := c.cfg.resolve()
		require.Error(t, err, "%+v", c.cfg)
		for _, w := range c.want {
			require.Contains(t, err.Error(), w)
		}
	}
}

func TestNewWorkerErrors(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	_, err := NewWorker(nil, &WorkerConfig{})
	require.ErrorContains(t, err, "client is nil")
	_, err = NewWorker(newClient(t, db.Pool, nil), nil)
	require.ErrorContains(t, err, "config is nil")
	_, err = NewWorker(newClient(t, db.Pool, nil), &WorkerConfig{})
	require.ErrorContains(t, err, "WorkerConfig.Flows = []: give at least one flow")
	_, err = newWorkerFor(t, db.Pool, nil, WorkerConfig{})
	require.ErrorContains(t, err, "WorkerConfig.Flows[0].Flow = nil: create flows with NewFlow")
	var nilFlow *Flow[int]
	_, err = newWorkerFor(t, db.Pool, nilFlow, WorkerConfig{})
	require.ErrorContains(t, err, "WorkerConfig.Flows[0].Flow = nil")
	twice := shapeFlow("twice", "a")
	_, err = newWorkerFor(t, db.Pool, twice, WorkerConfig{Flows: []WorkerFlow{{Flow: twice}}})
	require.ErrorContains(t, err, `WorkerConfig.Flows[1] = flow "twice": is already served by Flows[0]`)
	_, err = newWorkerFor(t, db.Pool, twice, WorkerConfig{Flows: []WorkerFlow{{Flow: twice, Steps: []string{"a"}}}})
	require.ErrorContains(t, err, `WorkerConfig.Flows[1].Steps = ["a"]: flow "twice" has one queue for all its steps; to serve chosen steps, define it with pgflow.QueuePerStep()`)
	perStep := NewFlow[int]("per_step", QueuePerStep())
	a := Step(perStep, "a", func(context.Context, *Task[int]) (int, error) { return 1, nil })
	Step(perStep, "b", func(context.Context, *Task[int]) (int, error) { return 1, nil }, DependsOn(a))
	_, err = NewWorker(newClient(t, db.Pool, nil), &WorkerConfig{Flows: []WorkerFlow{
		{Flow: perStep, Steps: []string{"a"}}, {Flow: perStep, Steps: []string{"a", "c"}}, {Flow: perStep}, {Flow: perStep, BatchSize: -1}}})
	require.ErrorContains(t, err, `WorkerConfig.Flows[1] = step "a" of flow "per_step": is already served by Flows[0]`)
	require.ErrorContains(t, err, `WorkerConfig.Flows[1].Steps = "c": flow "per_step" has no such step`)
	require.ErrorContains(t, err, `WorkerConfig.Flows[2] = flow "per_step": has steps already served by Flows[0]; list the remaining steps in Steps`)
	require.ErrorContains(t, err, `WorkerConfig.Flows[3].BatchSize = -1`)
	_, err = NewWorker(newClient(t, db.Pool, nil), &WorkerConfig{Flows: []WorkerFlow{{Flow: perStep}, {Flow: perStep, Steps: []string{"b"}}}})
	require.ErrorContains(t, err, `WorkerConfig.Flows[1].Steps = "b": is already served by Flows[0], which serves the whole flow "per_step"`)
	split, err := NewWorker(newClient(t, db.Pool, nil), &WorkerConfig{WorkerID: "6ba7b810-9dad-41d1-80b4-00c04fd430c8",
		Flows: []WorkerFlow{{Flow: perStep, Steps: []string{"b"}}, {Flow: perStep, Steps: []string{"a"}, MaxConcurrent: 2}}})
	require.NoError(t, err)
	ids := split.WorkerIDs()
	require.Equal(t, []string{"per_step__a", "per_step__b"}, slices.Sorted(maps.Keys(ids)), "one row per step queue")
	require.Equal(t, "6ba7b810-9dad-41d1-80b4-00c04fd430c8", ids["per_step__b"], "the first entry's first queue has WorkerID")
	empty, err := NewWorker(newClient(t, db.Pool, nil), &WorkerConfig{WorkerID: "6ba7b810-9dad-41d1-80b4-00c04fd430c8",
		Flows: []WorkerFlow{{Flow: NewFlow[int]("no_steps", QueuePerStep())}}})
	require.NoError(t, err)
	require.Empty(t, empty.WorkerIDs(), "a flow with per-step queues and no steps has no queue to read")
	require.Equal(t, "6ba7b810-9dad-41d1-80b4-00c04fd430c8", empty.ID())
	_, err = newWorkerFor(t, db.Pool, shapeFlow("g", "a"), WorkerConfig{Flows: []WorkerFlow{{Flow: shapeFlow("h", "a"), MaxConcurrent: -2}}})
	require.ErrorContains(t, err, "WorkerConfig.Flows[1].MaxConcurrent = -2")
	_, err = newWorkerFor(t, db.Pool, shapeFlow("f", "a"), WorkerConfig{BatchSize: -1})
	require.ErrorContains(t, err, "BatchSize = -1")

	bad := shapeFlow("broken", "a", "a")
	_, err = newWorkerFor(t, db.Pool, bad, WorkerConfig{})
	require.ErrorIs(t, err, ErrDuplicateStep)
	require.ErrorContains(t, err, `flow "broken"`)

	// NewWorker freezes the flow: a step added later is a definition error.
	f := shapeFlow("frozen_by_worker", "a")
	w, err := newWorkerFor(t, db.Pool, f, WorkerConfig{WorkerID: "7c9e6679-7425-40de-944b-e07fc1f90ae7"})
	require.NoError(t, err)
	require.Equal(t, "7c9e6679-7425-40de-944b-e07fc1f90ae7", w.ID())
	Step(f, "late", func(ctx context.Context, tk *Task[int]) (int, error) { return 0, nil })
	require.ErrorIs(t, f.Err(), ErrFlowFrozen)
}

func TestShapeMismatchErrorMessage(t *testing.T) {
	t.Parallel()
	err := error(&ShapeMismatchError{Flow: "orders", Differences: []string{"Step count differs: 2 vs 1", "Step at index 1: missing"}})
	require.ErrorIs(t, err, ErrShapeMismatch)
	msg := err.Error()
	require.Contains(t, msg, `flow "orders"`)
	require.Contains(t, msg, "(2 differences; each names the code's side first, then the database's)")
	require.Contains(t, msg, "\n  - Step count differs: 2 vs 1\n  - Step at index 1: missing\n")
	require.Contains(t, (&ShapeMismatchError{Flow: "x", Differences: []string{"d"}}).Error(), "(1 difference;")
}

// The worker and the client classify database errors alike (internal/pgerr): before, 57014, 55P03 and XX000
// aborted WaitRun but were retried by the worker, and class 54 was retried by the worker forever.
func TestWorkerAndClientClassifyDatabaseErrorsAlike(t *testing.T) {
	t.Parallel()
	wrap := func(code string) error { return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code}) }
	for _, code := range []string{"42883", "42P01", "42501", "3F000", "22P05", "23505", "P0001", "28P01", "3D000", "54000", "54001", "XX000"} {
		require.False(t, pgerr.Transient(wrap(code)), "worker retries %s", code)
		require.False(t, retryRead(wrap(code)), "client retries %s", code)
	}
	for _, code := range []string{"08006", "40001", "40P01", "53300", "57P01", "57014", "55P03"} {
		require.True(t, pgerr.Transient(wrap(code)), "worker gives up on %s", code)
		require.True(t, retryRead(wrap(code)), "client gives up on %s", code)
	}
	require.True(t, retryRead(errors.New("dial tcp 127.0.0.1:1: connection refused")))
	require.Equal(t, pgerr.KindCanceled, pgerr.Classify(context.DeadlineExceeded))
}
