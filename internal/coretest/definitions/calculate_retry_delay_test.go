package definitions_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCalculateRetryDelay(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	const maxInt32 = 2147483647
	cases := []struct {
		base     string
		attempts int64
		want     int64
	}{
		{"1", 0, 1},
		{"1", 1, 2},
		{"1", 2, 4},
		{"5", 1, 10},
		{"5", 3, 40},
		{"0", 0, 0},
		{"0", 30, 0},
		{"0", 2147483647, 0},
		{"2.5", 1, 5},
		{"1.5", 0, 1}, // floor
		{"3", 29, 1610612736},
		// Beyond the integer range pgflow raises "integer out of range"; pgflow-go caps at the largest integer.
		{"1", 31, maxInt32},
		{"5", 40, maxInt32},
		{"1", 1000, maxInt32},
		{"1", 2147483647, maxInt32},
		{"0.000001", 2147483647, maxInt32},
	}
	for _, c := range cases {
		got := queryVal[int64](t, pool, `select pgflow.calculate_retry_delay($1::numeric, $2::int)`, c.base, c.attempts)
		require.Equal(t, c.want, got, "calculate_retry_delay(%s, %d)", c.base, c.attempts)
	}

	var null *int64
	require.NoError(t, pool.QueryRow(t.Context(), `select pgflow.calculate_retry_delay(null, 1)`).Scan(&null))
	require.Nil(t, null)
}
