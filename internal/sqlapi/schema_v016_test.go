package sqlapi_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/schema"
)

// The reads also work on a database still at schema v0.16.0, which has no queue_name columns.
func TestCLIReadsOnSchemaV016(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewWithPGMQ(t)
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	_, err = schema.NewMigrator(conn, nil).Up(ctx, "v0.16.0")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	diamondAndMap(t, db.Pool)

	flows, err := sqlapi.ListFlows(ctx, db.Pool, sqlapi.ListFlowsParams{Flow: "fan"})
	require.NoError(t, err)
	require.Equal(t, []sqlapi.FlowStep{{StepSlug: "each", StepType: "map", StepIndex: 0, Deps: []string{}}}, flows[0].Steps)
	run, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`[1]`), "")
	require.NoError(t, err)
	tasks, err := sqlapi.ListRunTasks(ctx, db.Pool, sqlapi.ListRunTasksParams{RunID: run.Run.RunID})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Nil(t, tasks[0].QueueName)
	require.NotNil(t, tasks[0].MessageID)
	depth, err := sqlapi.GetQueueMetrics(ctx, db.Pool, "fan")
	require.NoError(t, err)
	requireDepth(t, 1, 1, depth)
}

// The dashboard's reads also work on a database still at schema v0.16.0, which has no queue_name columns.
func TestDashboardReadsOnSchemaV016(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewWithPGMQ(t)
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	_, err = schema.NewMigrator(conn, nil).Up(ctx, "v0.16.0")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	diamondAndMap(t, db.Pool)

	flows, err := sqlapi.ListFlows(ctx, db.Pool, sqlapi.ListFlowsParams{})
	require.NoError(t, err)
	require.Len(t, flows, 2)
	require.Nil(t, flows[1].Steps[0].QueueName)
	f, err := sqlapi.GetFlowDefinition(ctx, db.Pool, "fan")
	require.NoError(t, err)
	require.Nil(t, f.Steps[0].QueueName)
	run, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`[1, 2]`), "")
	require.NoError(t, err)
	tasks, err := sqlapi.ListRunTasks(ctx, db.Pool, sqlapi.ListRunTasksParams{RunID: run.Run.RunID, PerStep: 10, OutputChars: 10})
	require.NoError(t, err)
	require.Len(t, tasks, 2)
	require.Nil(t, tasks[0].QueueName)
	d, err := sqlapi.GetRunDetail(ctx, db.Pool, sqlapi.GetRunDetailParams{RunID: run.Run.RunID, TasksPerStep: -1})
	require.NoError(t, err)
	require.Equal(t, 2, d.Steps[0].Tasks.Queued)
	require.Nil(t, d.Steps[0].TaskList[1].QueueName)
	queues, err := sqlapi.ListQueueMetrics(ctx, db.Pool)
	require.NoError(t, err)
	require.EqualValues(t, 2, queues["fan"].Length)
}
