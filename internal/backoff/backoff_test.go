package backoff

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCeilingDoublesAndCaps(t *testing.T) {
	t.Parallel()
	p := Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i, w := range want {
		require.Equal(t, w*time.Millisecond, p.Ceiling(i+1), "retry %d", i+1)
	}
	require.Equal(t, 100*time.Millisecond, p.Ceiling(0))
	require.Equal(t, 5*time.Second, p.Ceiling(1000), "no overflow on large retry numbers")
}

func TestZeroPolicyDefaults(t *testing.T) {
	t.Parallel()
	var p Policy
	require.Equal(t, 100*time.Millisecond, p.Ceiling(1))
	require.Equal(t, 5*time.Second, p.Ceiling(60))
	require.Equal(t, time.Second, Policy{Base: time.Second, Max: time.Millisecond}.Ceiling(3), "Max below Base is raised to Base")
}

func TestDelayIsWithinHalfCeilingAndCeiling(t *testing.T) {
	t.Parallel()
	p := Policy{Base: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	seen := map[time.Duration]bool{}
	for n := 1; n <= 6; n++ {
		c := p.Ceiling(n)
		for range 200 {
			d := p.Delay(n)
			require.GreaterOrEqual(t, d, c/2)
			require.LessOrEqual(t, d, c)
			seen[d] = true
		}
	}
	require.Greater(t, len(seen), 10, "delays are jittered")
}

func TestSleepStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := Policy{Base: time.Hour, Max: time.Hour}
	require.ErrorIs(t, p.Sleep(ctx, 1), context.Canceled)
	require.NoError(t, Policy{Base: time.Millisecond, Max: time.Millisecond}.Sleep(context.Background(), 3))
}
