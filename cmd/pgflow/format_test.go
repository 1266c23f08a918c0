package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		-time.Second:                          "0ms",
		850 * time.Millisecond:                "850ms",
		1250 * time.Millisecond:               "1.25s",
		125 * time.Second:                     "2m05s",
		3*time.Hour + 4*time.Minute:           "3h04m",
		53 * time.Hour:                        "2d05h",
		47*time.Hour + 59*time.Minute:         "47h59m",
		59*time.Second + 994*time.Millisecond: "59.99s",
	} {
		require.Equal(t, want, formatDuration(d), d.String())
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a b c", oneLine("a\n  b\tc", 10))
	require.Equal(t, "abcd…", oneLine("abcdefgh", 5))
	require.Equal(t, "äöüß…", oneLine("äöüßäöüß", 5))
}
