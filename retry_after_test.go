package pgflow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

var errRateLimited = errors.New("429 too many requests")

func TestRetryAfterWrapsForErrorsIsAndAs(t *testing.T) {
	t.Parallel()
	require.NoError(t, RetryAfter(time.Second, nil))
	err := fmt.Errorf("call: %w", RetryAfter(3*time.Second, errRateLimited))
	require.ErrorIs(t, err, ErrRetryAfter)
	require.ErrorIs(t, err, errRateLimited)
	require.NotErrorIs(t, err, ErrPermanent)
	var ra *RetryAfterError
	require.ErrorAs(t, err, &ra)
	require.Equal(t, 3*time.Second, ra.Delay)
	require.Equal(t, errRateLimited, ra.Err)
	require.Equal(t, "call: 429 too many requests", err.Error())
	require.NotErrorIs(t, errRateLimited, ErrRetryAfter)

	require.ErrorAs(t, RetryAfter(-time.Second, errRateLimited), &ra)
	require.Equal(t, time.Duration(0), ra.Delay, "negative: at once")

	both := RetryAfter(time.Second, Permanent(errRateLimited))
	require.ErrorIs(t, both, ErrPermanent)
	require.ErrorIs(t, both, ErrRetryAfter)
}

// dbClock reads the database's clock: retry_at is the database's time, so comparisons stay on one clock.
func dbClock(ctx context.Context, db *pgtest.DB) (time.Time, error) {
	var now time.Time
	err := db.Pool.QueryRow(ctx, `select clock_timestamp()`).Scan(&now)
	return now, err
}

// A handler's RetryAfter replaces the step's backoff: the retry becomes visible after the delay asked for (in
// whole seconds, rounded up), recorded in step_tasks.retry_at, and the failed attempt is spent.
func TestRetryAfterDelaysTheRetryAndSpendsTheAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	f := NewFlow[int]("retry_after")
	var mu sync.Mutex
	var failedAt, secondAt time.Time
	Step(f, "call", func(ctx context.Context, tk *Task[int]) (string, error) {
		now, err := dbClock(ctx, db)
		if err != nil {
			return "", err
		}
		mu.Lock()
		defer mu.Unlock()
		if tk.Attempt == 1 {
			failedAt = now
			return "", RetryAfter(1500*time.Millisecond, errRateLimited)
		}
		secondAt = now
		return "ok", nil
	}, MaxAttempts(3), BaseDelay(30*time.Second)) // the step's own backoff would wait 60 s
	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "retry_after", 1)
	require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)

	var retryAt *time.Time
	var attempts int
	require.NoError(t, db.Pool.QueryRow(ctx, `select retry_at, attempts_count from pgflow.step_tasks
		where run_id = $1 and step_slug = 'call'`, runID).Scan(&retryAt, &attempts))
	require.Equal(t, 2, attempts, "the failed attempt was spent")
	require.NotNil(t, retryAt, "the retry's time is in the task's row")
	mu.Lock()
	defer mu.Unlock()
	wait := retryAt.Sub(failedAt)
	require.GreaterOrEqual(t, wait, 2*time.Second, "1.5 s rounded up to whole seconds, from after the failure")
	require.Less(t, wait, 30*time.Second, "not the step's backoff (a generous bound: only the handler's delay is this short)")
	require.False(t, secondAt.Before(*retryAt), "the retry did not run before its time")
}

// Permanent wins over RetryAfter, whichever wraps the other; on the last attempt RetryAfter changes nothing: the
// attempt is spent and the task fails.
func TestRetryAfterWithPermanentAndOnTheLastAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	f := NewFlow[int]("retry_after_permanent")
	opts := []StepOption{MaxAttempts(3), WhenExhausted(Skip)}
	Step(f, "outer_permanent", func(ctx context.Context, tk *Task[int]) (int, error) {
		return 0, Permanent(RetryAfter(time.Second, errRateLimited))
	}, opts...)
	Step(f, "inner_permanent", func(ctx context.Context, tk *Task[int]) (int, error) {
		return 0, RetryAfter(time.Second, fmt.Errorf("wrapped: %w", Permanent(errRateLimited)))
	}, opts...)
	Step(f, "last_attempt", func(ctx context.Context, tk *Task[int]) (int, error) {
		return 0, RetryAfter(time.Second, errRateLimited)
	}, MaxAttempts(1), WhenExhausted(Skip))
	cfg, _ := testConfig(t)
	startWorker(t, db.Pool, f, cfg)
	runID := startRun(t, db.Pool, "retry_after_permanent", 1)
	require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)
	for _, step := range []string{"outer_permanent", "inner_permanent", "last_attempt"} {
		tk := taskRow(t, db.Pool, runID, step, 0)
		require.Equal(t, "failed", tk.Status, step)
		require.Equal(t, 1, tk.Attempts, "%s: not retried", step)
		require.Contains(t, *tk.Error, errRateLimited.Error(), step)
		var retryAt *time.Time
		require.NoError(t, db.Pool.QueryRow(ctx, `select retry_at from pgflow.step_tasks
			where run_id = $1 and step_slug = $2`, runID, step).Scan(&retryAt))
		require.Nil(t, retryAt, "%s: no retry was queued", step)
	}
}
