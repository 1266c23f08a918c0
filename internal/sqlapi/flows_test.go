package sqlapi_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// diamondAndMap defines "diamond" (a -> b, a -> c, {c, b} -> d, with step options) and "fan" (a map over the run
// input), with flow options on "diamond".
func diamondAndMap(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`select pgflow.create_flow('diamond', max_attempts => 5, base_delay => 2, timeout => 30)`,
		`select pgflow.add_step('diamond', 'a')`,
		`select pgflow.add_step('diamond', 'b', array['a'])`,
		`select pgflow.add_step('diamond', 'c', array['a'])`,
		`select pgflow.add_step('diamond', 'd', array['c', 'b'])`,
		`select pgflow.create_flow('fan')`,
		`select pgflow.add_step('fan', 'each', step_type => 'map')`,
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err, q)
	}
}

func TestListFlows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)

	flows, err := sqlapi.ListFlows(ctx, db.Pool, sqlapi.ListFlowsParams{})
	require.NoError(t, err)
	require.Empty(t, flows)

	diamondAndMap(t, db.Pool)
	_, err = sqlapi.StartFlowWithStates(ctx, db.Pool, "diamond", json.RawMessage(`{}`), "")
	require.NoError(t, err)
	_, err = sqlapi.StartFlowWithStates(ctx, db.Pool, "diamond", json.RawMessage(`{}`), "")
	require.NoError(t, err)
	// An empty root map completes at once, so it is not an active run.
	done, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`[]`), "")
	require.NoError(t, err)
	require.Equal(t, "completed", done.Run.Status)

	flows, err = sqlapi.ListFlows(ctx, db.Pool, sqlapi.ListFlowsParams{})
	require.NoError(t, err)
	require.Len(t, flows, 2)

	d := flows[0]
	require.Equal(t, "diamond", d.FlowSlug)
	require.Equal(t, 5, d.MaxAttempts)
	require.Equal(t, 2, d.BaseDelay)
	require.Equal(t, 30, d.Timeout)
	require.False(t, d.CreatedAt.IsZero())
	require.Equal(t, sqlapi.RunCounts{Started: 2}, d.Runs)
	q := func(s string) *string { return &s }
	require.Equal(t, []sqlapi.FlowStep{
		{StepSlug: "a", StepType: "single", StepIndex: 0, Deps: []string{}, QueueName: q("diamond")},
		{StepSlug: "b", StepType: "single", StepIndex: 1, Deps: []string{"a"}, QueueName: q("diamond")},
		{StepSlug: "c", StepType: "single", StepIndex: 2, Deps: []string{"a"}, QueueName: q("diamond")},
		{StepSlug: "d", StepType: "single", StepIndex: 3, Deps: []string{"b", "c"}, QueueName: q("diamond")}, // step_index order
	}, d.Steps)

	f := flows[1]
	require.Equal(t, "fan", f.FlowSlug)
	require.Equal(t, 3, f.MaxAttempts) // create_flow defaults
	require.Equal(t, 5, f.BaseDelay)
	require.Equal(t, 60, f.Timeout)
	require.Equal(t, sqlapi.RunCounts{Completed: 1}, f.Runs)
	require.Equal(t, []sqlapi.FlowStep{{StepSlug: "each", StepType: "map", StepIndex: 0, Deps: []string{}, QueueName: q("fan")}}, f.Steps)

	only, err := sqlapi.ListFlows(ctx, db.Pool, sqlapi.ListFlowsParams{Flow: "fan"})
	require.NoError(t, err)
	require.Equal(t, flows[1:], only)
	none, err := sqlapi.ListFlows(ctx, db.Pool, sqlapi.ListFlowsParams{Flow: "nope"})
	require.NoError(t, err)
	require.Empty(t, none)
}

func TestGetFlowDefinition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	diamondAndMap(t, db.Pool)
	execAll(t, db.Pool, `select pgflow.add_step('diamond', 'e', array['d'], start_delay => 3,
	  required_input_pattern => '{"d": 1}', when_unmet => 'fail', when_exhausted => 'skip-cascade')`)

	f, err := sqlapi.GetFlowDefinition(ctx, db.Pool, "diamond")
	require.NoError(t, err)
	require.NotNil(t, f)
	require.Equal(t, 5, f.MaxAttempts)
	require.Equal(t, 2, f.BaseDelay)
	require.Equal(t, 30, f.Timeout)
	require.Len(t, f.Steps, 5)
	for i, s := range f.Steps {
		require.Equal(t, i, s.StepIndex)
	}
	e := f.Steps[4]
	require.Equal(t, "e", e.StepSlug)
	require.Equal(t, []string{"d"}, e.Deps)
	require.Nil(t, e.MaxAttempts)
	require.Equal(t, 3, *e.StartDelay)
	require.JSONEq(t, `{"d": 1}`, string(e.RequiredInputPattern))
	require.Nil(t, e.ForbiddenInputPattern)
	require.Equal(t, "fail", e.WhenUnmet)
	require.Equal(t, "skip-cascade", e.WhenExhausted)
	require.Equal(t, "diamond", *e.QueueName)
	require.Equal(t, []string{}, f.Steps[0].Deps)

	none, err := sqlapi.GetFlowDefinition(ctx, db.Pool, "nope")
	require.NoError(t, err)
	require.Nil(t, none)
}
