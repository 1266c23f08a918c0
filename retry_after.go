package pgflow

import (
	"errors"
	"time"

	"github.com/pgflow-go/pgflow/internal/executor"
)

// MaxRetryAfter is the longest retry delay a handler can ask for with RetryAfter; a longer one is cut to it.
const MaxRetryAfter = executor.MaxRetryAfter

// ErrRetryAfter is matched (errors.Is) by every error made with RetryAfter.
var ErrRetryAfter = errors.New("retry after a delay")

// RetryAfterError is a handler error that asks for the task's next attempt after Delay; create it with RetryAfter.
type RetryAfterError struct {
	Delay time.Duration // the delay asked for, as given to RetryAfter (never negative)
	Err   error         // the handler's error
}

// RetryAfter wraps err so that, if the step has attempts left, the task's next attempt becomes visible after d
// instead of after the step's backoff (BaseDelay × 2^attempt): for example the Retry-After of an HTTP 429 or 503.
// RetryAfter(d, nil) is nil.
//
//   - The failed attempt is spent as with any error: when it was the step's last (MaxAttempts), the task fails
//     and the step's WhenExhausted mode applies; the delay changes only when the retry runs.
//   - d is rounded up to whole seconds (the retry never runs earlier than asked); d <= 0 retries at once; d above
//     MaxRetryAfter (24 h) is cut to it.
//   - The time the retry becomes visible is in the task's row, pgflow.step_tasks.retry_at; a listening worker
//     wakes for it on time (docs/worker.md, "Delayed work").
//   - Permanent wins: an error that is (or wraps, or is wrapped by) a Permanent error is never retried, whatever
//     delay RetryAfter asked for.
//   - When wrappers are nested, the outermost RetryAfter's delay applies.
//
// The message is err's own; errors.Is and errors.As see err through the wrapper, errors.Is(e, ErrRetryAfter)
// reports whether e asks for a delay, and errors.As(e, &r) with r a *RetryAfterError reads the delay.
//
//	resp, err := http.DefaultClient.Do(req)
//	if err != nil {
//		return Out{}, err
//	}
//	defer resp.Body.Close()
//	if resp.StatusCode == http.StatusTooManyRequests {
//		wait, _ := time.ParseDuration(resp.Header.Get("Retry-After") + "s") // seconds; 0 if absent
//		return Out{}, pgflow.RetryAfter(wait, fmt.Errorf("rate limited: %s", resp.Status))
//	}
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &RetryAfterError{Delay: max(d, 0), Err: err}
}

func (e *RetryAfterError) Error() string {
	if e.Err == nil {
		return ErrRetryAfter.Error()
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// Is reports whether target is ErrRetryAfter.
func (e *RetryAfterError) Is(target error) bool { return target == ErrRetryAfter }

// RetryDelay returns Delay: the worker asks pgflow.fail_task for this retry delay.
func (e *RetryAfterError) RetryDelay() time.Duration { return max(e.Delay, 0) }
