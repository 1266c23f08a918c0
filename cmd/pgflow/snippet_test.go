package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

func TestSnippetPrintPruneInstallsTheFunction(t *testing.T) {
	t.Parallel()
	out := mustCLI(t, "snippet", "print", "prune")
	require.Contains(t, out, "pgflow.prune_data_older_than")

	// What the command prints is what an operator runs by hand: it installs the function.
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, out)
	require.NoError(t, err)
	var installed bool
	require.NoError(t, db.Pool.QueryRow(ctx,
		`select to_regprocedure('pgflow.prune_data_older_than(interval)') is not null`).Scan(&installed))
	require.True(t, installed)
	_, err = db.Pool.Exec(ctx, `select pgflow.prune_data_older_than(interval '7 days')`)
	require.NoError(t, err)
}

func TestSnippetListAndUnknownName(t *testing.T) {
	t.Parallel()
	require.Contains(t, mustCLI(t, "snippet", "list"), "prune_data_older_than (alias: prune)")
	r := runCLI(t, "", "snippet", "print", "nope")
	require.ErrorContains(t, r.err, `"nope"`)
	require.ErrorContains(t, r.err, "prune_data_older_than")
}
