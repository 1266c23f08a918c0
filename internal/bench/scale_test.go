package bench

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// TestBenchScaleOutWithWorkerProcesses runs the scale-out mode with this test binary as the worker process
// (TestMain).
func TestBenchScaleOutWithWorkerProcesses(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg := tinyConfig(db.URL)
	cfg.Mode = ModeScaleOut
	cfg.ScaleWorkers = []int{1, 2}
	cfg.IdleDuration = time.Second
	cfg.WorkerCommand = []string{os.Args[0]}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	require.NoError(t, err)
	require.Empty(t, rep.Results)
	require.NotNil(t, rep.Scale)
	require.Len(t, rep.Scale.Points, 2)
	for i, p := range rep.Scale.Points {
		require.Equal(t, cfg.ScaleWorkers[i], p.Processes)
		require.Equal(t, cfg.Runs, p.TasksCompleted, "%d processes: every run's task completed", p.Processes)
		require.Zero(t, p.RunsFailed)
		require.Positive(t, p.TasksPerSec)
		require.InDelta(t, p.TasksPerSec/p.Baseline.CommitsPerSec, p.Ratios.TasksPerSec, 1e-9, "the rate is divided by the baseline measured next to it")
		require.Positive(t, p.CommitsPer)
		require.GreaterOrEqual(t, p.RowsWrittenPer, 1.0)
		// Each process holds at most its pool plus its listener, and at least one connection.
		require.GreaterOrEqual(t, p.ConnectionsBusy, 1.0)
		require.LessOrEqual(t, p.ConnectionsMax, cfg.PoolSize+1)
		require.GreaterOrEqual(t, p.ConnectionsIdle, 1.0)
		require.LessOrEqual(t, p.ConnectionsIdle, float64(cfg.PoolSize+1))
		require.GreaterOrEqual(t, p.IdleStatementsPerSec, 0.0)
		require.Equal(t, 4, p.TrickleRuns, "one single run per 250 ms of IdleDuration")
		require.GreaterOrEqual(t, p.ReadsPerRun, 0.0)
	}
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Contains(t, table.String(), "scaling out")
}

func TestBenchGrowthAndScaleConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := Config{Mode: ModeScaleOut, ScaleWorkers: []int{2, 1}, GrowthSizes: []int{-1}}.resolve()
	require.ErrorContains(t, err, "ScaleWorkers = [2 1]")
	require.ErrorContains(t, err, "GrowthSizes = [-1]")
	require.ErrorContains(t, err, "WorkerCommand")
	c, err := Config{Mode: ModeGrowth, Scenarios: []string{"a"}}.resolve()
	require.NoError(t, err)
	require.Empty(t, c.Scenarios, "the growth mode runs no scenario")
	require.Equal(t, DefaultGrowthSizes, c.GrowthSizes)
	require.Equal(t, DefaultBacklog, c.Backlog)
}
