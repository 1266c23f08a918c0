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

// No --help of any command prints a secret from the environment: not the password in $DATABASE_URL, not the
// dashboard token in $PGFLOW_DASHBOARD_TOKEN (flag defaults used to be their values).
func TestHelpNeverPrintsSecrets(t *testing.T) {
	const password, token = "hunter2-db-password", "tok-3f9a-dashboard-secret"
	t.Setenv("DATABASE_URL", "postgres://alice:"+password+"@db.example:5432/app")
	t.Setenv(dashboardTokenEnv, token)
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	walk(newRootCmd(), nil)
	require.GreaterOrEqual(t, len(paths), 12)
	for _, path := range paths {
		for _, helpArg := range []string{"--help", "-h"} {
			args := append(append([]string(nil), path...), helpArg)
			r := runCLI(t, "", args...)
			require.NoError(t, r.err, strings.Join(args, " "))
			all := r.stdout + r.stderr
			require.NotContains(t, all, password, "pgflow %s", strings.Join(args, " "))
			require.NotContains(t, all, token, "pgflow %s", strings.Join(args, " "))
			if strings.Contains(all, "--database-url") {
				require.Contains(t, all, "(default: $DATABASE_URL)", "pgflow %s", strings.Join(args, " "))
			}
		}
	}
	// The variables still supply the values when a command runs (this one fails to connect: port 1).
	t.Setenv("DATABASE_URL", "postgres://alice:"+password+"@127.0.0.1:1/app?connect_timeout=5")
	r := runCLI(t, "", "flows")
	require.Error(t, r.err)
	require.Contains(t, r.err.Error(), "127.0.0.1:1/app", "the command used $DATABASE_URL")
	require.NotContains(t, r.err.Error()+r.stdout+r.stderr, password)
}
