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

// clientFlows defines "chain" (first -> second) and "rootmap" (a map over the run input).
func clientFlows(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	sqlapi.ClientFlows(t, pool)
}

func TestStartFlowWithStatesAndGetRunWithStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	clientFlows(t, db.Pool)

	started, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "chain", json.RawMessage(`{"n": 0, "ok": false}`), "")
	require.NoError(t, err)
	require.NotEmpty(t, started.Run.RunID)
	require.Equal(t, "chain", started.Run.FlowSlug)
	require.Equal(t, "started", started.Run.Status)
	require.JSONEq(t, `{"n": 0, "ok": false}`, string(started.Run.Input))
	require.Equal(t, 2, started.Run.RemainingSteps)
	require.False(t, started.Run.StartedAt.IsZero())
	require.Nil(t, started.Run.CompletedAt)
	require.Len(t, started.Steps, 2)
	require.Equal(t, "first", started.Steps[0].StepSlug)
	require.Equal(t, "started", started.Steps[0].Status)
	require.Equal(t, 1, *started.Steps[0].RemainingTasks)
	require.NotNil(t, started.Steps[0].StartedAt)
	require.Equal(t, "second", started.Steps[1].StepSlug)
	require.Equal(t, "created", started.Steps[1].Status)
	require.Nil(t, started.Steps[1].RemainingTasks)
	require.Equal(t, 1, started.Steps[1].RemainingDeps)

	got, err := sqlapi.GetRunWithStates(ctx, db.Pool, started.Run.RunID)
	require.NoError(t, err)
	require.Equal(t, started, got)
}

func TestStartFlowWithStatesCallerRunID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	clientFlows(t, db.Pool)
	const id = "5f0c6a57-4a0e-4c8e-9d59-3c8b1a2f0001"

	r, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "chain", json.RawMessage(`1`), id)
	require.NoError(t, err)
	require.Equal(t, id, r.Run.RunID)

	_, err = sqlapi.StartFlowWithStates(ctx, db.Pool, "chain", json.RawMessage(`1`), id)
	require.Error(t, err)
	require.True(t, sqlapi.IsDuplicateRun(err), "%v", err)
	require.False(t, sqlapi.IsUnknownFlow(err))
}

func TestStartFlowWithStatesErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	clientFlows(t, db.Pool)

	_, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "nope", json.RawMessage(`{}`), "")
	require.True(t, sqlapi.IsUnknownFlow(err), "%v", err)
	require.False(t, sqlapi.IsDuplicateRun(err))

	_, err = sqlapi.StartFlowWithStates(ctx, db.Pool, "rootmap", json.RawMessage(`{"a": 1}`), "")
	require.ErrorContains(t, err, "Flow rootmap has root map steps but input is not an array (got object)")

	_, err = sqlapi.StartFlowWithStates(ctx, db.Pool, "chain", json.RawMessage(`{}`), "not-a-uuid")
	require.True(t, sqlapi.IsInvalidRunID(err), "%v", err)

	// A root map over an empty array completes inside the start.
	r, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "rootmap", json.RawMessage(`[]`), "")
	require.NoError(t, err)
	require.Equal(t, "completed", r.Run.Status)
	require.Equal(t, "completed", r.Steps[0].Status)
	require.JSONEq(t, `[]`, string(r.Steps[0].Output))
}

func TestGetRunWithStatesUnknownRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)

	r, err := sqlapi.GetRunWithStates(ctx, db.Pool, "00000000-0000-4000-8000-000000000000")
	require.NoError(t, err)
	require.Nil(t, r)

	_, err = sqlapi.GetRunWithStates(ctx, db.Pool, "xyz")
	require.True(t, sqlapi.IsInvalidRunID(err), "%v", err)
}

func TestStartFlowWithStatesInTransactionRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	clientFlows(t, db.Pool)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	r, err := sqlapi.StartFlowWithStates(ctx, tx, "chain", json.RawMessage(`{}`), "")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	got, err := sqlapi.GetRunWithStates(ctx, db.Pool, r.Run.RunID)
	require.NoError(t, err)
	require.Nil(t, got, "a rolled-back start leaves no run")
}
