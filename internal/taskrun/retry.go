package taskrun

import (
	"errors"
	"time"
)

// RetryDelay reports the retry delay err, or an error it wraps, asks for: it has a method RetryDelay()
// time.Duration (pgflow.RetryAfter's error does). ok is false when no error in the chain asks for one; then the
// step's backoff applies. The outermost such error wins.
func RetryDelay(err error) (d time.Duration, ok bool) {
	var r interface{ RetryDelay() time.Duration }
	if !errors.As(err, &r) {
		return 0, false
	}
	return max(r.RetryDelay(), 0), true
}
