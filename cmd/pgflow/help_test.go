package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// Every command a user runs has a short description, a long help text and an example.
func TestEveryCommandHasHelpWithAnExample(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			seen++
			require.NotEmpty(t, sub.Short, sub.CommandPath())
			if sub.Runnable() {
				require.NotEmpty(t, sub.Example, "%s has no example", sub.CommandPath())
				require.True(t, strings.Contains(sub.Example, "pgflow "+sub.Name()) || strings.Contains(sub.Example, sub.Name()),
					"%s: the example does not use the command", sub.CommandPath())
			}
			walk(sub)
		}
	}
	walk(newRootCmd())
	require.GreaterOrEqual(t, seen, 10) // migrate (3), flows, runs (3), workers, demo, and the groups

	for _, args := range [][]string{
		{"flows", "--help"}, {"runs", "start", "--help"}, {"runs", "show", "--help"}, {"runs", "watch", "--help"},
		{"workers", "--help"}, {"demo", "--help"},
	} {
		r := runCLI(t, "", args...)
		require.NoError(t, r.err)
		require.Contains(t, r.stdout, "Examples:", strings.Join(args, " "))
		require.Contains(t, r.stdout, "Usage:", strings.Join(args, " "))
	}
}
