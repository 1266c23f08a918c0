package sqlapi

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDelaySecondsRoundsUpAndClamps(t *testing.T) {
	t.Parallel()
	require.Nil(t, delaySeconds(nil), "no delay: the step's backoff")
	for d, want := range map[time.Duration]int32{
		-time.Second:            0,
		0:                       0,
		time.Nanosecond:         1,
		time.Second:             1,
		1500 * time.Millisecond: 2,
		time.Minute:             60,
		math.MaxInt64:           math.MaxInt32,
		time.Duration(math.MaxInt32) * time.Second: math.MaxInt32,
	} {
		got := delaySeconds(&d)
		require.NotNil(t, got)
		require.Equal(t, want, *got, "%s", d)
	}
}
