package pgflow

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// Every start error about a run with a caller-chosen id names that id and the flow. Before, an unknown flow,
// a check of start_flow (P0001) and an invalid input named only the flow.
func TestClientStartErrorsNameTheRunID(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db)
	ctx := clCtx(t)
	const id = "5b7c1d2e-3f40-4a5b-8c6d-7e8f90a1b2c3"
	want := func(flow string) string { return `pgflow: start run ` + id + ` of flow "` + flow + `"` }

	_, err := c.StartRunJSON(ctx, "no_such_flow", json.RawMessage(`{}`), &StartOpts{RunID: id})
	require.ErrorIs(t, err, ErrFlowNotFound)
	require.ErrorContains(t, err, want("no_such_flow"))

	_, err = c.StartRunJSON(ctx, "rootmap", json.RawMessage(`{"items": []}`), &StartOpts{RunID: id})
	require.ErrorContains(t, err, want("rootmap")+": Flow rootmap has root map steps but input is not an array (got object)")

	_, err = c.StartRunJSON(ctx, "chain", json.RawMessage(`{"broken": `), &StartOpts{RunID: id})
	require.ErrorContains(t, err, want("chain")+": input is not valid JSON")

	_, err = c.StartRunJSON(ctx, "", json.RawMessage(`{}`), &StartOpts{RunID: id})
	require.ErrorIs(t, err, ErrFlowNotFound)
	require.ErrorContains(t, err, "pgflow: start run "+id+": empty flow slug")

	f := NewFlow[func()]("unencodable")
	Step(f, "s", func(_ context.Context, tk *Task[func()]) (int, error) { return 0, nil })
	_, err = StartRun(ctx, c, f, func() {}, &StartOpts{RunID: id})
	require.ErrorContains(t, err, want("unencodable")+": encode input func()")

	// Without an id the flow is named as before.
	_, err = c.StartRunJSON(ctx, "no_such_flow", json.RawMessage(`{}`), nil)
	require.ErrorContains(t, err, `pgflow: start run of flow "no_such_flow"`)
}
