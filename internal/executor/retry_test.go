package executor

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/taskrun"
)

// retryAfter and permanentErr stand for pgflow.RetryAfter's and pgflow.Permanent's errors (the executor knows
// them only by their methods).
type retryAfter struct {
	d   time.Duration
	err error
}

func (e *retryAfter) Error() string             { return e.err.Error() }
func (e *retryAfter) Unwrap() error             { return e.err }
func (e *retryAfter) RetryDelay() time.Duration { return e.d }

type permanentErr struct{ err error }

func (e *permanentErr) Error() string   { return e.err.Error() }
func (e *permanentErr) Unwrap() error   { return e.err }
func (e *permanentErr) Permanent() bool { return true }

func retryErr(d time.Duration, err error) error { return &retryAfter{d: d, err: err} }
func permanent(err error) error                 { return &permanentErr{err: err} }

func delayOf(err error) (time.Duration, bool) { return handlerRetryDelay(err, taskrun.Permanent(err)) }

func TestHandlerRetryDelay(t *testing.T) {
	t.Parallel()
	base := errors.New("429")
	_, ok := delayOf(base)
	require.False(t, ok, "no RetryAfter: the step's backoff")

	d, ok := delayOf(fmt.Errorf("call: %w", retryErr(3*time.Second, base)))
	require.True(t, ok)
	require.Equal(t, 3*time.Second, d)

	d, ok = delayOf(retryErr(-time.Second, base))
	require.True(t, ok)
	require.Zero(t, d, "negative: at once")

	d, ok = delayOf(retryErr(1000*time.Hour, base))
	require.True(t, ok)
	require.Equal(t, MaxRetryAfter, d, "bounded")

	d, ok = delayOf(retryErr(time.Second, fmt.Errorf("outer: %w", retryErr(time.Minute, base))))
	require.True(t, ok)
	require.Equal(t, time.Second, d, "the outermost RetryAfter wins")

	_, ok = delayOf(permanent(retryErr(time.Second, base)))
	require.False(t, ok, "Permanent wins (outside)")
	_, ok = delayOf(retryErr(time.Second, permanent(base)))
	require.False(t, ok, "Permanent wins (inside)")
}
