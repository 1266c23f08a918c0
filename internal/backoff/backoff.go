// Package backoff computes capped exponential delays with jitter for retrying failed database calls.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy describes a capped exponential backoff: the n-th retry (n >= 1) waits a random duration in
// [d/2, d], where d = min(Base * 2^(n-1), Max). The random half spreads the retries of many workers that saw the
// same outage. The zero Policy waits 100 ms .. 5 s.
type Policy struct {
	Base time.Duration // delay before the first retry; default 100 ms
	Max  time.Duration // cap; default 5 s (raised to Base when smaller)
}

func (p Policy) normalized() Policy {
	if p.Base <= 0 {
		p.Base = 100 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 5 * time.Second
	}
	if p.Max < p.Base {
		p.Max = p.Base
	}
	return p
}

// Ceiling returns the upper bound of the delay before retry n (n < 1 counts as 1): min(Base * 2^(n-1), Max).
func (p Policy) Ceiling(n int) time.Duration {
	p = p.normalized()
	if n < 1 {
		n = 1
	}
	d := p.Base
	for i := 1; i < n; i++ {
		if d >= p.Max/2 {
			return p.Max
		}
		d *= 2
	}
	return min(d, p.Max)
}

// Delay returns the jittered delay before retry n: a uniformly random duration in [Ceiling(n)/2, Ceiling(n)].
func (p Policy) Delay(n int) time.Duration {
	c := p.Ceiling(n)
	half := c / 2
	return half + rand.N(c-half+1)
}

// Sleep waits Delay(n), or less if ctx ends first; it returns ctx.Err() in that case and nil otherwise.
func (p Policy) Sleep(ctx context.Context, n int) error {
	return Sleep(ctx, p.Delay(n))
}

// Sleep waits d, or less if ctx ends first; it returns ctx.Err() in that case and nil otherwise.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
