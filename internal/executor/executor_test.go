package executor

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/taskrun"
)

func TestRunInputCacheSharesLoadsAndIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newRunInputCache(3)
	var loads atomic.Int32
	gate := make(chan struct{})
	load := func(ctx context.Context) (json.RawMessage, error) {
		loads.Add(1)
		<-gate
		return json.RawMessage(`{"x":1}`), nil
	}
	var wg sync.WaitGroup
	results := make([]string, 8)
	for i := range results {
		wg.Go(func() {
			raw, err := c.get(ctx, "run-1", load)
			require.NoError(t, err)
			results[i] = string(raw)
		})
	}
	for loads.Load() != 1 {
		runtime.Gosched() // the first load starts; the others wait for it
	}
	close(gate)
	wg.Wait()
	require.EqualValues(t, 1, loads.Load(), "concurrent requests for one run share one load")
	for _, r := range results {
		require.Equal(t, `{"x":1}`, r)
	}

	// A failed load is not cached.
	failing := func(ctx context.Context) (json.RawMessage, error) { return nil, errors.New("db down") }
	_, err := c.get(ctx, "run-2", failing)
	require.ErrorContains(t, err, "db down")
	raw, err := c.get(ctx, "run-2", func(ctx context.Context) (json.RawMessage, error) { return json.RawMessage(`2`), nil })
	require.NoError(t, err)
	require.Equal(t, `2`, string(raw))

	// Inputs delivered with tasks are cached too, and the cache never grows beyond its size (LRU).
	c.put("run-3", json.RawMessage(`3`))
	_, _ = c.get(ctx, "run-1", load) // run-1 is now the most recently used
	c.put("run-4", json.RawMessage(`4`))
	require.Equal(t, 3, c.len())
	raw, err = c.get(ctx, "run-1", func(ctx context.Context) (json.RawMessage, error) {
		return nil, errors.New("run-1 was evicted, but it was the most recently used")
	})
	require.NoError(t, err)
	require.Equal(t, `{"x":1}`, string(raw))
	reloaded := false
	_, err = c.get(ctx, "run-2", func(ctx context.Context) (json.RawMessage, error) {
		reloaded = true
		return json.RawMessage(`2`), nil
	})
	require.NoError(t, err)
	require.True(t, reloaded, "the least recently used run was evicted")
	require.Equal(t, 3, c.len())
}

func (c *runInputCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

func TestRunRegistryCancelsTheRunsHandlersOnly(t *testing.T) {
	t.Parallel()
	r := newRunRegistry()
	a1, cancelA1 := context.WithCancelCause(context.Background())
	a2, cancelA2 := context.WithCancelCause(context.Background())
	a3, cancelA3 := context.WithCancelCause(context.Background())
	b, cancelB := context.WithCancelCause(context.Background())
	at1, at2, at3, bt := &attempt{}, &attempt{}, &attempt{}, &attempt{}
	r.add(at1, "a", cancelA1)
	r.add(at2, "a", cancelA2)
	r.add(at3, "a", cancelA3)
	r.add(bt, "b", cancelB)
	r.remove(at2) // from the middle of the run's list
	r.remove(at2) // twice: nothing more happens
	require.Equal(t, 2, r.cancel("a"), "a removed handler is not counted")
	require.NoError(t, a2.Err())
	for _, c := range []context.Context{a1, a3} {
		var rce *taskrun.RunCancelledError
		require.ErrorAs(t, context.Cause(c), &rce)
		require.Equal(t, "a", rce.RunID)
		require.ErrorIs(t, context.Cause(c), taskrun.ErrRunCancelled)
	}
	require.NoError(t, b.Err())

	// Removing every handler of a run forgets the run; the other run's list is intact.
	r.remove(at3)
	r.remove(at1)
	require.NotContains(t, r.byRun, "a")
	require.Same(t, bt, r.byRun["b"])
	r.remove(bt)
	require.Empty(t, r.byRun)

	// A handler of the run that starts after the cancel (its claim raced it) is cancelled at once.
	late, cancelLate := context.WithCancelCause(context.Background())
	r.add(&attempt{}, "a", cancelLate)
	require.ErrorIs(t, context.Cause(late), taskrun.ErrRunCancelled)
}
