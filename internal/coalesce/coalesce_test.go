package coalesce

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gate is a batch function that records its batches and runs each only when the test lets it.
type gate struct {
	mu      sync.Mutex
	batches [][]int
	entered chan struct{}
	proceed chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 100), proceed: make(chan struct{})} }

func (g *gate) run(ctx context.Context, key string, ins []int) ([]string, error) {
	g.mu.Lock()
	g.batches = append(g.batches, append([]int(nil), ins...))
	g.mu.Unlock()
	g.entered <- struct{}{}
	select {
	case <-g.proceed:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = fmt.Sprintf("%s:%d", key, in)
	}
	return out, nil
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "condition not reached")
		time.Sleep(time.Millisecond)
	}
}

// Calls that arrive while a batch of their key runs form the next batch (up to the maximum size); keys do not
// wait for each other; every call gets its own result.
func TestCallsWaitingForABatchRunTogether(t *testing.T) {
	g := newGate()
	grp := New(g.run, Limits[int]{MaxBatch: 3})
	ctx := context.Background()
	results := make(chan string, 10)
	do := func(key string, in int) {
		go func() {
			out, err := grp.Do(ctx, key, in)
			if err != nil {
				out = err.Error()
			}
			results <- out
		}()
	}
	do("a", 0)
	<-g.entered // batch [0] of a is in flight
	for i := 1; i <= 4; i++ {
		do("a", i)
	}
	waitUntil(t, func() bool { return grp.Waiting("a") == 4 })
	do("b", 9)
	<-g.entered      // b runs at once, beside a's batch
	close(g.proceed) // every batch may finish now: a's four waiting calls go as [1 2 3], then [4]
	got := map[string]bool{}
	for range 6 {
		got[<-results] = true
	}
	require.Equal(t, map[string]bool{"a:0": true, "a:1": true, "a:2": true, "a:3": true, "a:4": true, "b:9": true}, got)
	g.mu.Lock()
	defer g.mu.Unlock()
	var sizes []int
	for _, b := range g.batches {
		sizes = append(sizes, len(b))
	}
	require.ElementsMatch(t, []int{1, 1, 3, 1}, sizes, "a: [0], then at most 3 of the 4 waiting, then the last; b: [9]")
	require.Equal(t, 0, grp.Waiting("a"))
}

// The batch's context ends only when every call of the batch stopped waiting; a batch function error reaches
// every call of its batch.
func TestBatchContextEndsWhenNoCallWaits(t *testing.T) {
	g := newGate()
	grp := New(g.run, Limits[int]{MaxBatch: 10})
	blocker := make(chan error, 1)
	go func() {
		_, err := grp.Do(context.Background(), "k", 0)
		blocker <- err
	}()
	<-g.entered
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	for _, ctx := range []context.Context{ctx1, ctx2} {
		go func() {
			_, err := grp.Do(ctx, "k", 1)
			errs <- err
		}()
	}
	waitUntil(t, func() bool { return grp.Waiting("k") == 2 })
	g.proceed <- struct{}{} // the first batch ends; the two calls start the second one
	require.NoError(t, <-blocker)
	<-g.entered
	cancel1()
	require.ErrorIs(t, <-errs, context.Canceled)
	g.mu.Lock()
	require.Len(t, g.batches, 2)
	g.mu.Unlock()
	cancel2() // nobody waits any more: the batch's context ends and the batch function returns
	require.ErrorIs(t, <-errs, context.Canceled)
	waitUntil(t, func() bool {
		grp.mu.Lock()
		defer grp.mu.Unlock()
		return len(grp.keys) == 0
	})
}

// A batch function that returns an error, or the wrong number of results, fails every call of its batch.
func TestBatchErrorsReachEveryCall(t *testing.T) {
	boom := errors.New("boom")
	grp := New(func(_ context.Context, _ string, ins []int) ([]int, error) {
		if ins[0] < 0 {
			return nil, boom
		}
		return ins[:0], nil
	}, Limits[int]{MaxBatch: 5})
	_, err := grp.Do(context.Background(), "k", -1)
	require.ErrorIs(t, err, boom)
	_, err = grp.Do(context.Background(), "k", 1)
	require.EqualError(t, err, "coalesce: the batch function returned 0 results for 1 calls")
}

// A full batch waiting while a batch is in flight starts beside it (up to the maximum in flight); a partial one
// waits. The extra runner stops once what waits no longer fills a batch, and the last runner forgets the key.
func TestAFullBatchStartsBesideTheOneInFlight(t *testing.T) {
	g := newGate()
	grp := New(g.run, Limits[int]{MaxBatch: 2, MaxInFlight: 2})
	results := make(chan string, 10)
	do := caller(grp, "k", results)
	do(0)
	<-g.entered // [0] in flight
	do(1)
	waitUntil(t, func() bool { return grp.Waiting("k") == 1 })
	require.Equal(t, 1, runners(grp, "k"), "a partial batch waits for the one in flight")
	do(2)
	select { // [1 2] is full: it starts beside [0]
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("a full batch did not start beside the one in flight")
	}
	for i := 3; i <= 5; i++ {
		do(i)
	}
	waitUntil(t, func() bool { return grp.Waiting("k") == 3 })
	require.Equal(t, 2, runners(grp, "k"), "two in flight: the third batch waits although full")
	close(g.proceed)
	got := map[string]bool{}
	for range 6 {
		got[<-results] = true
	}
	require.Len(t, got, 6)
	for i := range 6 {
		require.True(t, got[fmt.Sprintf("k:%d", i)], "call %d got its own result", i)
	}
	waitUntil(t, func() bool {
		grp.mu.Lock()
		defer grp.mu.Unlock()
		return len(grp.keys) == 0
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Equal(t, []int{0}, g.batches[0])
	require.Equal(t, []int{1, 2}, g.batches[1])
	var rest []int
	for _, b := range g.batches[2:] {
		require.LessOrEqual(t, len(b), 2)
		rest = append(rest, b...)
	}
	require.ElementsMatch(t, []int{3, 4, 5}, rest, "the waiting calls go in later batches of at most two")
}

func runners[In, Out any](g *Group[In, Out], key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if q := g.keys[key]; q != nil {
		return q.runners
	}
	return 0
}

// With weights, a batch takes waiting calls in order while their total stays within MaxWeight, and a call heavier
// than that goes alone; a waiting weight that fills a batch starts a second batch beside the one in flight.
func TestBatchesStayWithinTheirWeight(t *testing.T) {
	g := newGate()
	grp := New(g.run, Limits[int]{MaxBatch: 10, MaxInFlight: 2, Weight: func(in int) int { return in }, MaxWeight: 10})
	results := make(chan string, 10)
	do := caller(grp, "k", results)
	entered := func(what string) {
		select {
		case <-g.entered:
		case <-time.After(30 * time.Second):
			t.Fatal(what)
		}
	}
	do(1)
	entered("the first call did not start at once") // [1] in flight
	do(4)
	waitUntil(t, func() bool { return grp.Waiting("k") == 1 })
	do(4)
	waitUntil(t, func() bool { return grp.Waiting("k") == 2 })
	require.Equal(t, 1, runners(grp, "k"), "8 of 10: the waiting calls do not fill a batch")
	do(4) // 12: a full batch waits and starts beside [1], as [4 4] (a third 4 would weigh 12)
	entered("a batch full by weight did not start beside the one in flight")
	waitUntil(t, func() bool { return grp.Waiting("k") == 1 })
	require.Equal(t, 2, runners(grp, "k"))
	do(20) // heavier than a batch: it goes alone
	waitUntil(t, func() bool { return grp.Waiting("k") == 2 })
	do(1)
	waitUntil(t, func() bool { return grp.Waiting("k") == 3 })
	close(g.proceed)
	for range 6 {
		<-results
	}
	waitUntil(t, func() bool { return runners(grp, "k") == 0 })
	g.mu.Lock()
	defer g.mu.Unlock()
	require.Len(t, g.batches, 5)
	require.Equal(t, [][]int{{1}, {4, 4}}, g.batches[:2])
	// The two runners take the rest at once, so their batches may be recorded in either order.
	require.ElementsMatch(t, [][]int{{4}, {20}, {1}}, g.batches[2:], "[4], then 20 alone (4 + 20 > 10), then [1]")
}

// caller returns a function that calls grp.Do(key, in) in a goroutine of its own and sends its result (or error
// text) to results.
func caller(grp *Group[int, string], key string, results chan<- string) func(in int) {
	return func(in int) {
		go func() {
			out, err := grp.Do(context.Background(), key, in)
			if err != nil {
				out = err.Error()
			}
			results <- out
		}()
	}
}
