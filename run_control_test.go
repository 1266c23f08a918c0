package pgflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

type ctlInput struct {
	Key string `json:"key"`
}

// outcomeHooks records the outcome of every finished task by run id.
type outcomeHooks struct {
	NoopHooks
	mu       sync.Mutex
	outcomes map[string][]TaskOutcome
	changed  chan struct{}
}

func newOutcomeHooks() *outcomeHooks {
	return &outcomeHooks{outcomes: map[string][]TaskOutcome{}, changed: make(chan struct{}, 1)}
}

func (h *outcomeHooks) TaskFinished(_ context.Context, e TaskFinishedEvent) {
	h.mu.Lock()
	h.outcomes[e.RunID] = append(h.outcomes[e.RunID], e.Outcome)
	h.mu.Unlock()
}

func (h *outcomeHooks) of(runID string) []TaskOutcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.outcomes[runID])
}

// A running handler of a cancelled run sees its context cancelled with a *RunCancelledError as the cause; what it
// returns afterwards changes nothing; the run stays cancelled and another run of the same flow goes on.
func TestCancelRunCancelsRunningHandler(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[ctlInput]("ctl_cancel")
	started := make(chan string, 4)
	causes := make(chan error, 4)
	lateRelease := make(chan struct{})
	releaseOthers := make(chan struct{})
	Step(f, "work", func(ctx context.Context, tk *Task[ctlInput]) (string, error) {
		started <- tk.RunID
		select {
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			<-lateRelease
			return "late result", nil // ignores the cancellation: the database must fence it
		case <-releaseOthers:
			return "done", nil
		}
	}, Timeout(30*time.Second))

	hooks := newOutcomeHooks()
	cfg, logs := testConfig(t)
	cfg.MaxConcurrent = 4
	cfg.Hooks = hooks
	startWorker(t, db.Pool, f, cfg)
	c := newClient(t, db.Pool, nil)
	ctx := context.Background()

	victim, err := StartRun(ctx, c, f, ctlInput{Key: "victim"}, nil)
	require.NoError(t, err)
	other, err := StartRun(ctx, c, f, ctlInput{Key: "other"}, nil)
	require.NoError(t, err)
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case id := <-started:
			seen[id] = true
		case <-time.After(waitTimeout):
			t.Fatal("handlers did not start")
		}
	}

	run, err := c.CancelRun(ctx, victim.ID, &CancelRunOpts{Reason: "wrong input"})
	require.NoError(t, err)
	require.Equal(t, RunCancelled, run.Status)
	require.Equal(t, "wrong input", run.CancelReason)
	require.NotNil(t, run.CancelledAt)

	var cause error
	select {
	case cause = <-causes:
	case <-time.After(waitTimeout):
		t.Fatal("the handler's context was not cancelled")
	}
	require.ErrorIs(t, cause, ErrRunCancelled)
	require.ErrorIs(t, cause, context.Canceled)
	var rce *RunCancelledError
	require.ErrorAs(t, cause, &rce)
	require.Equal(t, victim.ID, rce.RunID)

	close(lateRelease)
	waitFor(t, "the late result of the cancelled run to be reported", func() bool {
		return slices.Contains(hooks.of(victim.ID), OutcomeCancelled)
	})
	require.Contains(t, logs.String(), "run cancelled")

	run, err = c.GetRun(ctx, victim.ID)
	require.NoError(t, err)
	require.Equal(t, RunCancelled, run.Status, "the late result changed the run")
	st := run.Step("work")
	require.Equal(t, StepSkipped, st.Status)
	require.Equal(t, "run_cancelled", st.SkipReason)
	require.Nil(t, st.Output)
	require.ErrorIs(t, run.Err(), ErrRunCancelled)
	require.Equal(t, "cancelled", taskRow(t, db.Pool, victim.ID, "work", 0).Status)

	// The other run was not touched and completes.
	select {
	case cause = <-causes:
		t.Fatalf("another handler was cancelled too: %v", cause)
	default:
	}
	close(releaseOthers)
	wctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	done, err := c.WaitRun(wctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, RunCompleted, done.Status)

	// WaitRun on the cancelled run returns it; Err says why.
	got, err := c.WaitRun(wctx, victim.ID)
	require.NoError(t, err)
	require.Equal(t, RunCancelled, got.Status)
	require.ErrorAs(t, got.Err(), &rce)
	require.Equal(t, "wrong input", rce.Reason)
	require.Contains(t, got.Err().Error(), victim.ID)
	_, err = RunOutput[map[string]any](got)
	require.ErrorIs(t, err, ErrRunCancelled)

	// ListRuns filters by the new status.
	list, err := c.ListRuns(ctx, &ListRunsOpts{Status: RunCancelled})
	require.NoError(t, err)
	require.Len(t, list.Runs, 1)
	require.Equal(t, victim.ID, list.Runs[0].ID)
	require.NotNil(t, list.Runs[0].CancelledAt)
}

// Cancelling a finished or unknown run is a clear error and changes nothing.
func TestCancelRunErrors(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[ctlInput]("ctl_cancel_err")
	Step(f, "work", func(ctx context.Context, tk *Task[ctlInput]) (string, error) { return "ok", nil })
	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	c := newClient(t, db.Pool, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	r, err := StartRun(ctx, c, f, ctlInput{Key: "a"}, nil)
	require.NoError(t, err)
	r, err = c.WaitRun(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, RunCompleted, r.Status)

	_, err = c.CancelRun(ctx, r.ID, nil)
	require.ErrorIs(t, err, ErrRunFinished)
	require.Contains(t, err.Error(), r.ID)
	require.Contains(t, err.Error(), "completed")
	again, err := c.GetRun(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, RunCompleted, again.Status)

	_, err = c.RetryRun(ctx, r.ID, nil)
	require.ErrorIs(t, err, ErrRunFinished, "a completed run cannot be resumed")

	missing := "00000000-0000-4000-8000-000000000001"
	_, err = c.CancelRun(ctx, missing, nil)
	require.ErrorIs(t, err, ErrRunNotFound)
	require.Contains(t, err.Error(), missing)
	_, err = c.RetryRun(ctx, missing, nil)
	require.ErrorIs(t, err, ErrRunNotFound)
	_, err = c.CancelRun(ctx, "not-a-uuid", nil)
	require.ErrorIs(t, err, ErrInvalidRunID)
}

type ctlOut struct {
	Nonce int64 `json:"nonce"`
}

// Resuming a failed run in place does not run its completed steps again: their dependents see the stored
// outputs, and the run completes. Two concurrent retries resume it once. A fresh retry starts a linked new run.
func TestRetryRunResumesWithoutRerunningCompletedSteps(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[ctlInput]("ctl_retry")
	var calls sync.Map // step slug → *atomic.Int64
	count := func(step string) int64 {
		v, _ := calls.LoadOrStore(step, new(atomic.Int64))
		return v.(*atomic.Int64).Load()
	}
	called := func(step string) {
		v, _ := calls.LoadOrStore(step, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	var broken atomic.Bool
	broken.Store(true)
	var nonce atomic.Int64
	a := Step(f, "a", func(ctx context.Context, tk *Task[ctlInput]) (ctlOut, error) {
		called("a")
		return ctlOut{Nonce: nonce.Add(1) * 1000}, nil
	})
	b := Step(f, "b", func(ctx context.Context, tk *Task[ctlInput]) (ctlOut, error) {
		called("b")
		av, err := a.Output(tk)
		if err != nil {
			return ctlOut{}, err
		}
		if broken.Load() {
			return ctlOut{}, Permanent(errors.New("bug in b"))
		}
		return ctlOut{Nonce: av.Nonce + 1}, nil
	}, DependsOn(a))
	Step(f, "c", func(ctx context.Context, tk *Task[ctlInput]) (ctlOut, error) {
		called("c")
		bv, err := b.Output(tk)
		return ctlOut{Nonce: bv.Nonce + 1}, err
	}, DependsOn(b))

	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	c := newClient(t, db.Pool, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	r, err := StartRun(ctx, c, f, ctlInput{Key: "k"}, nil)
	require.NoError(t, err)
	r, err = c.WaitRun(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, RunFailed, r.Status)
	require.Equal(t, StepSkipped, r.Step("c").Status)
	require.Equal(t, "run_failed", r.Step("c").SkipReason)
	storedA, err := StepOutput(r, a)
	require.NoError(t, err)
	require.EqualValues(t, 1, count("a"))
	require.EqualValues(t, 1, count("b"))
	require.EqualValues(t, 0, count("c"))

	// The bug is fixed. A fresh retry starts a new run with the same input, linked to the failed one, which it
	// leaves as it is.
	broken.Store(false)
	fresh, err := c.RetryRun(ctx, r.ID, &RetryRunOpts{Fresh: true})
	require.NoError(t, err)
	require.NotEqual(t, r.ID, fresh.ID)
	require.Equal(t, r.ID, fresh.RetryOf)
	require.JSONEq(t, `{"key":"k"}`, string(fresh.Input))
	fresh, err = c.WaitRun(ctx, fresh.ID)
	require.NoError(t, err)
	require.Equal(t, RunCompleted, fresh.Status)
	require.EqualValues(t, 2, count("a"), "the fresh run runs every step")
	require.EqualValues(t, 2, count("b"))
	require.EqualValues(t, 1, count("c"))
	orig, err := c.GetRun(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, RunFailed, orig.Status)
	require.Empty(t, orig.RetryOf)

	// Two retries in place race: one resumes the run, the other is told it is no longer failed.
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { _, errs[i] = c.RetryRun(ctx, r.ID, nil) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		} else {
			require.ErrorIs(t, err, ErrRunFinished)
			require.Contains(t, err.Error(), r.ID)
		}
	}
	require.Equal(t, 1, ok, "exactly one concurrent retry resumes the run: %v", errs)

	done, err := c.WaitRun(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, RunCompleted, done.Status, "%v", done.Err())
	require.EqualValues(t, 2, count("a"), "the completed step ran again")
	require.EqualValues(t, 3, count("b"))
	require.EqualValues(t, 2, count("c"))
	gotA, err := StepOutput(done, a)
	require.NoError(t, err)
	require.Equal(t, storedA, gotA)
	gotB, err := StepOutput(done, b)
	require.NoError(t, err)
	require.Equal(t, storedA.Nonce+1, gotB.Nonce, "b saw a's stored output")
	require.JSONEq(t, fmt.Sprintf(`{"c":{"nonce":%d}}`, storedA.Nonce+2), string(done.Output))

	// A completed run cannot be retried.
	_, err = c.RetryRun(ctx, r.ID, &RetryRunOpts{Fresh: true})
	require.ErrorIs(t, err, ErrRunFinished)
}

// A cancelled run without a worker: WaitRun returns it with ErrRunCancelled, and it can be resumed.
func TestWaitRunOnCancelledRunAndResume(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[ctlInput]("ctl_wait_cancel")
	Step(f, "work", func(ctx context.Context, tk *Task[ctlInput]) (string, error) {
		in, err := tk.FlowInput(ctx)
		return in.Key, err
	})
	c := newClient(t, db.Pool, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, c.EnsureFlow(ctx, f, nil))
	r, err := StartRun(ctx, c, f, ctlInput{Key: "x"}, nil)
	require.NoError(t, err)

	events, err := c.Subscribe(ctx, r.ID)
	require.NoError(t, err)
	waited := make(chan *Run, 1)
	go func() {
		got, err := c.WaitRun(ctx, r.ID)
		if err != nil {
			t.Errorf("WaitRun: %v", err)
		}
		waited <- got
	}()
	_, err = c.CancelRun(ctx, r.ID, nil)
	require.NoError(t, err)

	var last Event
	for ev := range events { // closed after the terminal event
		last = ev
	}
	require.Equal(t, EventRunCancelled, last.Type)
	require.True(t, last.IsTerminal())
	got := <-waited
	require.NotNil(t, got)
	require.Equal(t, RunCancelled, got.Status)
	require.ErrorIs(t, got.Err(), ErrRunCancelled)

	// A worker comes; the cancelled run is resumed and completes.
	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	resumed, err := c.RetryRun(ctx, r.ID, nil)
	require.NoError(t, err)
	require.Equal(t, RunStarted, resumed.Status)
	done, err := c.WaitRun(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, RunCompleted, done.Status)
	require.JSONEq(t, `{"work":"x"}`, string(done.Output))
}

// RunHealth names a queue without an alive worker, and WaitRun warns about it (once).
func TestRunHealthWithoutWorker(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[ctlInput]("ctl_health")
	Step(f, "work", func(ctx context.Context, tk *Task[ctlInput]) (string, error) { return "ok", nil })
	logger, logs := newTestLogger(t)
	c := newClient(t, db.Pool, &ClientConfig{Logger: logger, PollInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, c.EnsureFlow(ctx, f, nil))
	r, err := StartRun(ctx, c, f, ctlInput{Key: "x"}, nil)
	require.NoError(t, err)

	h, err := c.RunHealth(ctx, r.ID, nil)
	require.NoError(t, err)
	require.Equal(t, RunStarted, h.Status)
	require.False(t, h.OK())
	waiting := h.WaitingWithoutWorkers()
	require.Len(t, waiting, 1)
	require.Equal(t, "ctl_health", waiting[0].Name)
	require.Equal(t, 1, waiting[0].QueuedTasks)
	require.Nil(t, waiting[0].LastHeartbeatAt)
	require.Contains(t, h.Problems()[0], "no alive worker")

	wctx, wcancel := context.WithCancel(ctx)
	waitDone := make(chan error, 1)
	go func() { _, err := c.WaitRun(wctx, r.ID); waitDone <- err }()
	waitFor(t, "WaitRun to warn that no worker serves the queue", func() bool {
		return strings.Contains(logs.String(), "no alive worker serves it")
	})

	// A worker starts: the run completes and WaitRun returns it; the warning was logged once.
	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	h, err = c.RunHealth(ctx, r.ID, nil)
	require.NoError(t, err)
	if h.Status == RunStarted {
		require.Empty(t, h.WaitingWithoutWorkers())
	}
	select {
	case err := <-waitDone:
		require.NoError(t, err)
	case <-time.After(waitTimeout):
		t.Fatal("WaitRun did not return")
	}
	wcancel()
	require.Equal(t, 1, strings.Count(logs.String(), "no alive worker serves it"))

	_, err = c.RunHealth(ctx, "00000000-0000-4000-8000-000000000002", nil)
	require.ErrorIs(t, err, ErrRunNotFound)
}

// RunHealth reports a task that outlived its step timeout and waits for stalled-task recovery.
func TestRunHealthStalledTask(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[ctlInput]("ctl_stalled")
	Step(f, "work", func(ctx context.Context, tk *Task[ctlInput]) (string, error) { return "ok", nil }, Timeout(10*time.Second))
	c := newClient(t, db.Pool, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, c.EnsureFlow(ctx, f, nil))
	r, err := StartRun(ctx, c, f, ctlInput{Key: "x"}, nil)
	require.NoError(t, err)
	// A worker claimed the task a minute ago and died.
	_, err = db.Pool.Exec(ctx, `update pgflow.step_tasks set status = 'started', attempts_count = 1, queued_at = now() - interval '2 minutes',
	  started_at = now() - interval '1 minute' where run_id = $1`, r.ID)
	require.NoError(t, err)

	h, err := c.RunHealth(ctx, r.ID, nil)
	require.NoError(t, err)
	require.Len(t, h.StalledTasks, 1)
	st := h.StalledTasks[0]
	require.Equal(t, "work", st.StepSlug)
	require.Equal(t, 1, st.Attempt)
	require.Equal(t, 10*time.Second, st.Timeout)
	require.Equal(t, st.StartedAt.Add(40*time.Second), st.RecoveryAt)
	require.False(t, h.OK())
	var found bool
	for _, p := range h.Problems() {
		found = found || strings.Contains(p, "stalled-task recovery")
	}
	require.True(t, found, "%v", h.Problems())

	// A started task within its timeout is not stalled.
	_, err = db.Pool.Exec(ctx, `update pgflow.step_tasks set started_at = now() where run_id = $1`, r.ID)
	require.NoError(t, err)
	h, err = c.RunHealth(ctx, r.ID, nil)
	require.NoError(t, err)
	require.Empty(t, h.StalledTasks)
}

// TestCancelRunDelay measures the time from cancel_run's commit (the return of the call) to the handler's
// ctx.Done() at light load, with a listening worker. It logs the samples and their median; it asserts nothing
// about time.
func TestCancelRunDelay(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[ctlInput]("ctl_delay")
	started := make(chan struct{}, 1)
	cancelledAt := make(chan time.Time, 1)
	Step(f, "work", func(ctx context.Context, tk *Task[ctlInput]) (string, error) {
		started <- struct{}{}
		<-ctx.Done()
		cancelledAt <- time.Now()
		return "", context.Cause(ctx)
	}, Timeout(60*time.Second))
	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	c := newClient(t, db.Pool, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*waitTimeout)
	defer cancel()

	const n = 9
	var delays, calls []time.Duration
	for i := range n {
		r, err := StartRun(ctx, c, f, ctlInput{Key: fmt.Sprint(i)}, nil)
		require.NoError(t, err)
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("handler did not start")
		}
		before := time.Now()
		_, err = sqlapi.CancelRun(ctx, db.Pool, r.ID, "")
		committed := time.Now()
		require.NoError(t, err)
		select {
		case at := <-cancelledAt:
			delays = append(delays, max(at.Sub(committed), 0))
			calls = append(calls, committed.Sub(before))
		case <-ctx.Done():
			t.Fatal("the handler's context was not cancelled")
		}
	}
	slices.Sort(delays)
	slices.Sort(calls)
	t.Logf("cancel delay (cancel_run returned → handler ctx.Done), %d runs: median %s, min %s, max %s; samples %v; cancel_run call median %s",
		n, delays[n/2], delays[0], delays[n-1], delays, calls[n/2])
}
