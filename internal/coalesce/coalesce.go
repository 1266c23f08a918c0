// Package coalesce runs concurrent calls that share a key as one batch: group commit for calls that each would
// be a transaction of their own.
//
// The first call of a key starts a batch at once, so a call that finds no other in flight waits for nothing.
// Calls that arrive while a batch of their key is in flight wait for it to finish and then go together, as the
// next batch (up to a maximum number of calls and, when calls have weights, a maximum total weight). Under load
// this turns many small transactions into few larger ones without a timer: the batch size follows the arrival
// rate and the duration of a batch.
//
// One batch at a time caps a key's rate at the batch's size over its duration. When a full batch waits,
// another batch of the key starts beside the ones in flight (up to a maximum number in flight), and such an extra
// batch runner stops as soon as what waits no longer fills a batch: below the cap nothing changes, at it the
// queue of waiting calls stops growing while the machine has room.
//
// It knows nothing of the database: the batch function does the work.
package coalesce

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// BatchFunc does the work of one batch: ins[i] is the input of the i-th call, and on success out[i] is its result
// (len(out) must equal len(ins)). An error fails every call of the batch. ctx is cancelled only when every call
// of the batch has stopped waiting (its own context ended); it carries the values of the batch's first call.
type BatchFunc[In, Out any] func(ctx context.Context, key string, ins []In) (out []Out, err error)

// Limits bound the batches of a Group.
type Limits[In any] struct {
	// MaxBatch is the most calls in one batch (at least 1).
	MaxBatch int
	// MaxInFlight is the most batches of one key at once (at least 1); the second and later start only while a
	// full batch waits.
	MaxInFlight int
	// Weight, when not nil, weighs a call (say, the size of its input), and a batch's calls weigh at most
	// MaxWeight together: a call heavier than that goes alone. Nil or a MaxWeight of 0: no bound on weight.
	Weight    func(In) int
	MaxWeight int
}

// Group coalesces the calls of Do by key. Its zero value is not usable: use New. It is safe for concurrent use.
type Group[In, Out any] struct {
	run    BatchFunc[In, Out]
	limits Limits[In]

	mu   sync.Mutex
	keys map[string]*queue[In, Out] // keys with a batch in flight or calls waiting
}

type queue[In, Out any] struct {
	waiting []*call[In, Out]
	weight  int // of the waiting calls
	runners int // goroutines running this key's batches (each at most one batch at a time)
}

type call[In, Out any] struct {
	ctx    context.Context
	in     In
	weight int
	done   chan result[Out] // buffered: the batch never blocks on a caller that stopped waiting
	taken  bool             // a batch took it (guarded by Group.mu)
}

type result[Out any] struct {
	out Out
	err error
}

// New returns a Group that runs batches with run, within limits.
func New[In, Out any](run BatchFunc[In, Out], limits Limits[In]) *Group[In, Out] {
	limits.MaxBatch = max(1, limits.MaxBatch)
	limits.MaxInFlight = max(1, limits.MaxInFlight)
	if limits.Weight == nil || limits.MaxWeight <= 0 {
		limits.Weight, limits.MaxWeight = nil, 0
	}
	return &Group[In, Out]{run: run, limits: limits, keys: map[string]*queue[In, Out]{}}
}

// full reports whether the calls waiting on q fill a batch (called with g.mu held).
func (g *Group[In, Out]) full(q *queue[In, Out]) bool {
	return len(q.waiting) >= g.limits.MaxBatch || g.limits.MaxWeight > 0 && q.weight >= g.limits.MaxWeight
}

// Do runs in as part of a batch of calls with the same key and returns its result. When ctx ends before a batch
// took the call, the call is withdrawn (its input is never passed to the batch function) and Do returns ctx's
// error; when ctx ends while its batch runs, Do returns ctx's error at once and the outcome of the call is
// unknown to the caller (as for any call whose context ends while the database works on it).
func (g *Group[In, Out]) Do(ctx context.Context, key string, in In) (Out, error) {
	c := &call[In, Out]{ctx: ctx, in: in, done: make(chan result[Out], 1)}
	if g.limits.Weight != nil {
		c.weight = g.limits.Weight(in)
	}
	g.mu.Lock()
	q := g.keys[key]
	if q == nil {
		q = &queue[In, Out]{}
		g.keys[key] = q
	}
	q.waiting = append(q.waiting, c)
	q.weight += c.weight
	if q.runners == 0 || (g.full(q) && q.runners < g.limits.MaxInFlight) {
		q.runners++
		go g.drain(key, q)
	}
	g.mu.Unlock()

	select {
	case r := <-c.done:
		return r.out, r.err
	case <-ctx.Done():
		g.mu.Lock()
		if !c.taken {
			for i, w := range q.waiting {
				if w == c {
					q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
					q.weight -= c.weight
					break
				}
			}
		}
		g.mu.Unlock()
		var zero Out
		return zero, ctx.Err()
	}
}

// Waiting reports how many calls of key wait for a batch (not counting those of the batch in flight).
func (g *Group[In, Out]) Waiting(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if q := g.keys[key]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// drain runs batches of key until no call waits, or, when other runners of the key are left, until what waits no
// longer fills a batch; the last runner to stop forgets the key (the next call starts anew).
func (g *Group[In, Out]) drain(key string, q *queue[In, Out]) {
	for {
		g.mu.Lock()
		if len(q.waiting) == 0 || (q.runners > 1 && !g.full(q)) {
			q.runners--
			if q.runners == 0 {
				delete(g.keys, key)
			}
			g.mu.Unlock()
			return
		}
		n, weight := 0, 0
		for n < len(q.waiting) && n < g.limits.MaxBatch {
			w := q.waiting[n].weight
			if n > 0 && g.limits.MaxWeight > 0 && weight+w > g.limits.MaxWeight {
				break
			}
			n, weight = n+1, weight+w
		}
		batch := make([]*call[In, Out], n)
		copy(batch, q.waiting)
		q.waiting = append(q.waiting[:0], q.waiting[n:]...)
		q.weight -= weight
		for _, c := range batch {
			c.taken = true
		}
		g.mu.Unlock()
		g.runBatch(key, batch)
	}
}

func (g *Group[In, Out]) runBatch(key string, batch []*call[In, Out]) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	defer cancel()
	// The batch is abandoned only when nobody waits for it any more.
	live := int64(len(batch))
	stops := make([]func() bool, len(batch))
	for i, c := range batch {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if atomic.AddInt64(&live, -1) == 0 {
				cancel()
			}
		})
	}
	ins := make([]In, len(batch))
	for i, c := range batch {
		ins[i] = c.in
	}
	out, err := g.run(ctx, key, ins)
	for _, stop := range stops {
		stop()
	}
	if err == nil && len(out) != len(ins) {
		err = fmt.Errorf("coalesce: the batch function returned %d results for %d calls", len(out), len(ins))
	}
	for i, c := range batch {
		if err != nil {
			c.done <- result[Out]{err: err}
			continue
		}
		c.done <- result[Out]{out: out[i]}
	}
}
