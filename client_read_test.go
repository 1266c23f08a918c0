package pgflow_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
)

type readInput struct {
	N int `json:"n"`
}

func readFlow() *pgflow.Flow[readInput] {
	f := pgflow.NewFlow[readInput]("reads", pgflow.MaxAttempts(2), pgflow.Timeout(30*time.Second))
	first := pgflow.Step(f, "first", func(ctx context.Context, t *pgflow.Task[readInput]) (int, error) {
		in, err := t.FlowInput(ctx)
		return in.N, err
	})
	pgflow.Step(f, "second", func(ctx context.Context, t *pgflow.Task[readInput]) (int, error) {
		n, err := first.Output(t)
		return n + 1, err
	}, pgflow.DependsOn(first), pgflow.MaxAttempts(1))
	return f
}

func TestClientListFlowsQueuesAndWorkers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := pgtest.New(t)
	c, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer c.Close()

	flows, err := c.ListFlows(ctx)
	require.NoError(t, err)
	require.Empty(t, flows)

	f := readFlow()
	require.NoError(t, c.EnsureFlow(ctx, f, nil))
	ids, err := pgflow.StartRuns(ctx, c, f, []readInput{{N: 1}, {N: 2}}, nil)
	require.NoError(t, err)

	flows, err = c.ListFlows(ctx)
	require.NoError(t, err)
	require.Len(t, flows, 1)
	got := flows[0]
	require.Equal(t, "reads", got.Slug)
	require.Equal(t, 2, got.MaxAttempts)
	require.Equal(t, 30*time.Second, got.Timeout)
	require.Equal(t, 5*time.Second, got.BaseDelay) // the database default
	require.False(t, got.CreatedAt.IsZero())
	require.Equal(t, []pgflow.StepInfo{
		{Slug: "first", Type: "single", DependsOn: []string{}, Queue: "reads"},
		{Slug: "second", Type: "single", DependsOn: []string{"first"}, Queue: "reads"},
	}, got.Steps)
	require.Equal(t, pgflow.RunCounts{Started: 2}, got.Runs)

	// The root step's two messages wait in the flow's queue.
	queues, err := c.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, queues, 1)
	require.Equal(t, "reads", queues[0].Name)
	require.NoError(t, queues[0].Err)
	require.EqualValues(t, 2, queues[0].Length)
	require.EqualValues(t, 2, queues[0].Visible)
	require.EqualValues(t, 2, queues[0].Sent)
	require.GreaterOrEqual(t, queues[0].OldestMessageAge, time.Duration(0))

	workers, err := c.ListWorkers(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, workers)

	w, err := pgflow.NewWorker(c, &pgflow.WorkerConfig{
		Flows: []pgflow.WorkerFlow{{Flow: f}}, MaintenanceInterval: -1, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	for _, id := range ids {
		run, err := c.WaitRun(ctx, id)
		require.NoError(t, err)
		require.Equal(t, pgflow.RunCompleted, run.Status)
	}

	workers, err = c.ListWorkers(ctx, time.Hour)
	require.NoError(t, err)
	require.Len(t, workers, 1)
	require.Equal(t, w.ID(), workers[0].ID)
	require.Equal(t, "reads", workers[0].Queue)
	require.Nil(t, workers[0].StoppedAt)
	require.Nil(t, workers[0].DeprecatedAt)
	require.Zero(t, workers[0].RunningTasks)
	require.False(t, workers[0].StartedAt.IsZero())

	require.NoError(t, w.Stop(ctx))
	workers, err = c.ListWorkers(ctx, 0)
	require.NoError(t, err)
	require.Len(t, workers, 1)
	require.NotNil(t, workers[0].StoppedAt)

	flows, err = c.ListFlows(ctx)
	require.NoError(t, err)
	require.Equal(t, pgflow.RunCounts{Completed: 2}, flows[0].Runs)
	queues, err = c.ListQueues(ctx)
	require.NoError(t, err)
	require.Len(t, queues, 1)
	require.Zero(t, queues[0].Length)
	require.Zero(t, queues[0].OldestMessageAge)
	require.EqualValues(t, 4, queues[0].Sent) // one message per task: two runs of two steps
}

func TestClientReadsNeedTheCurrentSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewWithPGMQ(t) // PGMQ without the pgflow schema
	c, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.ListFlows(ctx)
	require.ErrorContains(t, err, "run `pgflow migrate up`")
	_, err = c.ListQueues(ctx)
	require.ErrorContains(t, err, "run `pgflow migrate up`")
	_, err = c.ListWorkers(ctx, 0)
	require.ErrorContains(t, err, "run `pgflow migrate up`")
	require.True(t, strings.HasPrefix(err.Error(), "pgflow: list workers: "), err.Error())
}
