package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/spf13/cobra"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/reliability"
)

// `pgflow bench --soak` runs a short soak on a given database with faults and event capture, and reports every
// invariant holding; the counts add up.
func TestBenchSoakReportsInvariants(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	out := mustCLI(t, "--database-url", db.URL, "bench", "--soak", "3s", "--soak-workers", "2", "--soak-backlog", "60",
		"--soak-fault-every", "1s", "--soak-events", "--json")
	rep := decodeJSON[reliability.SoakReport](t, out)
	require.True(t, rep.OK, "problems: %v", rep.Problems)
	require.Empty(t, rep.Problems)
	require.Positive(t, rep.RunsStarted)
	require.Positive(t, rep.Faults)
	require.Len(t, rep.Flows, 2)
	var runs int64
	for _, inv := range rep.Flows {
		require.True(t, inv.HasEvents)
		require.True(t, inv.HasInvocations)
		require.Equal(t, inv.Runs, inv.RunsCompleted, inv.Flow)
		require.Equal(t, inv.Tasks, inv.TasksCompleted, inv.Flow)
		require.Equal(t, inv.Runs, inv.RunTerminalEvents, inv.Flow)
		require.GreaterOrEqual(t, inv.Attempts, inv.Tasks, inv.Flow)
		runs += inv.Runs
	}
	require.Equal(t, rep.RunsStarted, runs)
}

// The standalone `pgflow soak` prints a readable report; a bad duration is refused.
func TestSoakCommandText(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cmd := newSoakCmd(&globalOptions{databaseURL: db.URL})
	r := runCmd(t, cmd, "--duration", "1s", "--soak-workers", "2", "--soak-backlog", "20", "--soak-fault-every", "0")
	require.NoError(t, r.err, r.stderr)
	require.Contains(t, r.stdout, "invariants: all hold")
	require.Contains(t, r.stdout, "flow rel_one")
	require.Contains(t, r.stdout, "flow rel_map")

	r = runCmd(t, newSoakCmd(&globalOptions{databaseURL: db.URL}), "--duration", "0s")
	require.ErrorContains(t, r.err, "--duration must be positive")
	r = runCLI(t, "", "--database-url", db.URL, "bench", "--soak", "-1s")
	require.ErrorContains(t, r.err, "--soak must be a positive duration")
}

// runCmd runs one command (not the root) in-process with args.
func runCmd(t *testing.T, cmd *cobra.Command, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(ctx)
	return cliResult{stdout: out.String(), stderr: errOut.String(), err: err}
}
