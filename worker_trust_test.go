package pgflow

// Issue 12, "Trust at the edges": attempt fencing, step timeouts, shutdown without spending attempts, permanent
// errors. Every test drives the worker through real PostgreSQL; recovery is driven in SQL (the task made stalled,
// pgflow.requeue_stalled_tasks called), handlers block on channels the test closes, and waits are for states,
// never sleeps.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// recoverStalledTask makes the started task look stalled and runs stalled-task recovery, which puts it back in
// the queue (visible at once) while its handler still runs.
func recoverStalledTask(t *testing.T, pool *pgxpool.Pool, runID, step string) {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `update pgflow.step_tasks
	                             set queued_at = now() - interval '2 hours', started_at = now() - interval '1 hour'
	                           where run_id = $1 and step_slug = $2 and status = 'started'`, runID, step)
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `select pgflow.requeue_stalled_tasks()`).Scan(&n))
	require.Equal(t, 1, n, "the task was requeued")
}

// staleScenario runs one task whose attempt 1 is recovered and claimed again (attempt 2) while it still runs.
// Each attempt's handler blocks until the test releases it; attempt 1 then returns firstErr (or "attempt 1").
type staleScenario struct {
	db      *pgtest.DB
	runID   string
	hooks   *recordingHooks
	logs    *logBuffer
	started [3]chan struct{}
	release [3]chan struct{}
}

func newStaleScenario(t *testing.T, slug string, firstErr error, opts ...StepOption) *staleScenario {
	t.Helper()
	s := &staleScenario{db: pgtest.New(t), hooks: &recordingHooks{}}
	for i := range s.started {
		s.started[i], s.release[i] = make(chan struct{}), make(chan struct{})
	}
	f := NewFlow[int](slug)
	Step(f, "work", func(ctx context.Context, tk *Task[int]) (string, error) {
		a := tk.Attempt
		if a < 1 || a > 2 {
			return "", fmt.Errorf("unexpected attempt %d", a)
		}
		close(s.started[a])
		<-s.release[a]
		if a == 1 && firstErr != nil {
			return "", firstErr
		}
		return fmt.Sprintf("attempt %d", a), nil
	}, opts...)
	cfg, logs := testConfig(t)
	cfg.Hooks = s.hooks
	s.logs = logs
	startWorker(t, s.db.Pool, f, cfg)
	s.runID = startRun(t, s.db.Pool, slug, 1)
	waitClosed(t, "attempt 1 to start", s.started[1])
	recoverStalledTask(t, s.db.Pool, s.runID, "work")
	waitClosed(t, "attempt 2 to start (the recovered task claimed again)", s.started[2])
	return s
}

// finishStaleAttempt lets attempt 1 return and waits until the worker has reported its result as stale.
func (s *staleScenario) finishStaleAttempt(t *testing.T) StaleResultEvent {
	t.Helper()
	close(s.release[1])
	waitFor(t, "attempt 1's result to be reported stale", func() bool { return len(s.hooks.staleResults()) > 0 })
	stale := s.hooks.staleResults()
	require.Len(t, stale, 1)
	require.Equal(t, StaleSuperseded, stale[0].Reason)
	require.Equal(t, 1, stale[0].Attempt)
	require.Equal(t, s.runID, stale[0].RunID)
	require.Contains(t, s.logs.String(), "stale result not recorded")
	// The current attempt is untouched.
	tk := taskRow(t, s.db.Pool, s.runID, "work", 0)
	require.Equal(t, "started", tk.Status)
	require.Equal(t, 2, tk.Attempts)
	require.Nil(t, tk.Error)
	require.Equal(t, "started", waitRunStatus(t, s.db.Pool, s.runID))
	return stale[0]
}

// finishCurrentAttempt lets attempt 2 return and checks that its result is the run's.
func (s *staleScenario) finishCurrentAttempt(t *testing.T) {
	t.Helper()
	close(s.release[2])
	res := waitRun(t, s.db.Pool, s.runID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"work": "attempt 2"}`, string(res.Output))
	waitFor(t, "both outcomes", func() bool { return len(s.hooks.outcomes()) == 2 })
	require.Equal(t, []TaskOutcome{OutcomeStale, OutcomeCompleted}, s.hooks.outcomes())
}

func waitRunStatus(t *testing.T, pool *pgxpool.Pool, runID string) string {
	t.Helper()
	var status string
	require.NoError(t, pool.QueryRow(context.Background(), `select status from pgflow.runs where run_id = $1`, runID).Scan(&status))
	return status
}

// (a) A success of an attempt that was recovered and claimed again is not stored; the current attempt's is.
// Before, the first report won: the run completed with attempt 1's output while attempt 2 still ran.
func TestWorkerStaleSuccessAfterRecoveryIsNotRecorded(t *testing.T) {
	t.Parallel()
	s := newStaleScenario(t, "stale_success", nil)
	s.finishStaleAttempt(t)
	s.finishCurrentAttempt(t)
}

// (b) A stale error with no attempts left does not fail the run. Before, attempt 1's failure found the task at
// attempts_count 2 >= MaxAttempts(1) and failed the task and its run while attempt 2 was running.
func TestWorkerStaleErrorWithNoAttemptsLeftDoesNotFailRun(t *testing.T) {
	t.Parallel()
	s := newStaleScenario(t, "stale_exhausted", errors.New("upstream timeout"), MaxAttempts(1))
	ev := s.finishStaleAttempt(t)
	require.EqualError(t, ev.Err, "upstream timeout")
	require.Equal(t, 2, ev.CurrentAttempt)
	s.finishCurrentAttempt(t)
}

// (c) A stale error with attempts left does not requeue the task while the current attempt runs. Before, the
// task went back to 'queued' under the running attempt 2 (and a third attempt could start beside it).
func TestWorkerStaleErrorWithAttemptsLeftDoesNotRequeue(t *testing.T) {
	t.Parallel()
	s := newStaleScenario(t, "stale_retry", errors.New("upstream timeout"), MaxAttempts(3))
	s.finishStaleAttempt(t)
	s.finishCurrentAttempt(t)
}

// setStepTimeout sets a step's timeout in the database; the Timeout option accepts 3 s at least, the table 1 s.
func setStepTimeout(t *testing.T, pool *pgxpool.Pool, flow, step string, seconds int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `update pgflow.steps set opt_timeout = $3 where flow_slug = $1 and step_slug = $2`,
		flow, step, seconds)
	require.NoError(t, err)
}

// The handler's context carries the step's timeout as its deadline; when it passes, the attempt fails with an
// error naming the step and the timeout, and the step's retry policy applies. Before, the context had no deadline:
// this handler would have waited forever and the task stayed started.
func TestWorkerStepTimeoutIsTheHandlersDeadline(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("timeouts")
	causes := make(chan error, 1)
	Step(f, "charge", func(ctx context.Context, tk *Task[int]) (int, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return 0, ctx.Err()
	}, MaxAttempts(2), BaseDelay(time.Minute))
	hooks := &recordingHooks{}
	cfg, _ := testConfig(t)
	cfg.Hooks = hooks
	rw := startWorker(t, db.Pool, f, cfg)
	setStepTimeout(t, db.Pool, "timeouts", "charge", 1)
	runID := startRun(t, db.Pool, "timeouts", 1)

	var cause error
	select {
	case cause = <-causes:
	case <-time.After(waitTimeout):
		t.Fatal("the handler's context never ended")
	}
	require.ErrorIs(t, cause, ErrStepTimeout)
	require.ErrorIs(t, cause, context.DeadlineExceeded)
	waitFor(t, "the timed-out attempt to be recorded", func() bool {
		return taskRow(t, db.Pool, runID, "charge", 0).Error != nil
	})
	tk := taskRow(t, db.Pool, runID, "charge", 0)
	require.Equal(t, "queued", tk.Status, "retried per the step's policy")
	require.Equal(t, 1, tk.Attempts)
	require.Equal(t, `step "charge" timed out after 1s (attempt 1 of 2)`, *tk.Error)
	require.NoError(t, rw.stop(t))
	require.Equal(t, []TaskOutcome{OutcomeRetried}, hooks.outcomes())
	require.Empty(t, hooks.staleResults(), "a handler that honours its context leaves no stale result")
}

// A handler that ignores its context is reported as timed out when the deadline passes, without waiting for it;
// what it returns later is dropped and counted as stale, and the retry's result is the run's. Before, the worker
// waited for the handler and completed the task with its late output.
func TestWorkerStepTimeoutDoesNotWaitForHandlersThatIgnoreIt(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("deaf_timeouts")
	release := make(chan struct{})
	Step(f, "charge", func(ctx context.Context, tk *Task[int]) (string, error) {
		if tk.Attempt == 1 {
			<-release // ignores ctx
			return "late-output-7f3a", nil
		}
		return "retry", nil
	}, MaxAttempts(2), BaseDelay(time.Second))
	hooks := &recordingHooks{}
	cfg, logs := testConfig(t)
	cfg.Hooks = hooks
	startWorker(t, db.Pool, f, cfg)
	setStepTimeout(t, db.Pool, "deaf_timeouts", "charge", 1)
	runID := startRun(t, db.Pool, "deaf_timeouts", 1)

	waitFor(t, "the timed-out attempt to be recorded while its handler still runs", func() bool {
		return taskRow(t, db.Pool, runID, "charge", 0).Error != nil
	})
	require.Equal(t, `step "charge" timed out after 1s (attempt 1 of 2)`, *taskRow(t, db.Pool, runID, "charge", 0).Error)
	close(release)
	waitFor(t, "the late result to be dropped", func() bool { return len(hooks.staleResults()) == 1 })
	stale := hooks.staleResults()[0]
	require.Equal(t, StaleTimedOut, stale.Reason)
	require.Equal(t, 1, stale.Attempt)
	require.NoError(t, stale.Err)
	res := waitRun(t, db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `{"charge": "retry"}`, string(res.Output))
	require.Equal(t, 2, taskRow(t, db.Pool, runID, "charge", 0).Attempts)
	require.Contains(t, logs.String(), "stale result dropped: the handler returned after its step timeout")
	require.NotContains(t, logs.String(), "late-output-7f3a", "outputs are never logged")
}

type permInput struct {
	Card string `json:"card"`
}

var errCardDeclined = errors.New("card declined")

// pgflow.Permanent, an input that cannot be decoded and reading a handle that is not a dependency fail the task
// at once, whatever attempts remain (here each step's WhenExhausted(Skip) lets the run go on). Before, each was
// retried with backoff until MaxAttempts.
func TestWorkerPermanentErrorsAreNotRetried(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[permInput]("permanent")
	opts := []StepOption{MaxAttempts(3), BaseDelay(time.Second), WhenExhausted(Skip)}
	declined := Step(f, "declined", func(ctx context.Context, tk *Task[permInput]) (int, error) {
		return 0, fmt.Errorf("charge: %w", Permanent(fmt.Errorf("order 7: %w", errCardDeclined)))
	}, opts...)
	Step(f, "decode", func(ctx context.Context, tk *Task[permInput]) (int, error) {
		_, err := tk.FlowInput(ctx)
		return 0, err
	}, opts...)
	Step(f, "notdep", func(ctx context.Context, tk *Task[permInput]) (int, error) {
		return declined.Output(tk)
	}, opts...)
	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "permanent", "not an object")
	require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)

	want := map[string]string{
		"declined": "charge: order 7: card declined",
		"decode":   `pgflow: flow "permanent", run ` + runID + `, step "decode": cannot decode the flow input into pgflow.permInput`,
		"notdep":   `pgflow: flow "permanent", step "notdep" reads the output of step "declined", which is not among its dependencies`,
	}
	for step, msg := range want {
		tk := taskRow(t, db.Pool, runID, step, 0)
		require.Equal(t, "failed", tk.Status, step)
		require.Equal(t, 1, tk.Attempts, "%s: not retried", step)
		require.Contains(t, *tk.Error, msg, step)
		require.Equal(t, "skipped", stepState(t, db.Pool, runID, step).Status, step)
	}
}

func TestPermanentWrapsForErrorsIsAndAs(t *testing.T) {
	t.Parallel()
	require.NoError(t, Permanent(nil))
	err := fmt.Errorf("step: %w", Permanent(errCardDeclined))
	require.ErrorIs(t, err, ErrPermanent)
	require.ErrorIs(t, err, errCardDeclined)
	var pe *PermanentError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, errCardDeclined, pe.Err)
	require.Equal(t, "step: card declined", err.Error())
	require.NotErrorIs(t, errCardDeclined, ErrPermanent)
}

// A graceful Stop whose context ends (what a second SIGINT/SIGTERM does in the CLI and the examples) stops the
// worker at once: Stop returns while the handler (which ignores its context) still runs, and its task is back in
// the queue with its attempt unspent. Before, a second signal did nothing: the worker waited ShutdownTimeout plus
// the abandon grace and spent the attempt.
func TestStopWhoseContextEndsStopsAtOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := NewFlow[int]("second_signal")
	started := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	Step(f, "deaf", func(ctx context.Context, tk *Task[int]) (int, error) {
		close(started)
		<-release // ignores ctx
		return 1, nil
	}, MaxAttempts(1))
	cfg, logs := testConfig(t)
	cfg.ShutdownTimeout = time.Hour
	rw := startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "second_signal", 1)
	waitClosed(t, "handler start", started)

	stopCtx, secondSignal := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rw.w.Stop(stopCtx) }()
	waitFor(t, "the graceful shutdown", func() bool { return strings.Contains(logs.String(), "worker shutting down") })
	secondSignal()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(waitTimeout):
		t.Fatal("the ended context did not stop the worker")
	}
	tk := taskRow(t, db.Pool, runID, "deaf", 0)
	require.Equal(t, "queued", tk.Status)
	require.Zero(t, tk.Attempts)
	require.Equal(t, "started", waitRunStatus(t, db.Pool, runID))
	_, stopped := workerRow(t, db.Pool, rw.w.ID())
	require.True(t, stopped)
}
