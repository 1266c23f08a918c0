package main

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/bench"
	"github.com/pgflow-go/pgflow/internal/pgtest"
)

var benchTinyArgs = []string{"bench", "--runs", "30", "--workers", "2", "--max-concurrent", "6", "--batch-size", "4",
	"--pool-size", "3", "--start-batch", "8", "--rate", "40", "--latency-duration", "300ms", "--baseline-duration", "300ms",
	"--idle-duration", "300ms"}

func TestBenchJSONReportAddsUp(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	args := append([]string{"--database-url", db.URL}, benchTinyArgs...)
	args[slices.Index(args, "--rate")+1] = "40,20" // the latency scenario twice
	args = append(args, "--scenarios", "start,a,b,latency", "--warmup", "200ms", "--json")
	rep := decodeJSON[bench.Report](t, mustCLI(t, args...))

	require.Positive(t, rep.Baseline.CommitsPerSec)
	require.Equal(t, []string{"start", "one-step", "chain", "latency"}, rep.Config.Scenarios)
	require.Equal(t, []float64{40, 20}, rep.Config.Rates)
	require.Len(t, rep.Results, 5)
	perRun := map[string]int{"one-step": 1, "chain": 3, "latency": 1}
	for _, r := range rep.Results {
		if r.Scenario == "start" {
			require.Equal(t, 30, r.Runs)
			require.Equal(t, 30, r.RunsUnfinished, "started runs stay queued without a worker")
			continue
		}
		require.Equal(t, r.Runs, r.RunsCompleted, r.Scenario)
		require.Equal(t, r.Runs*perRun[r.Scenario], r.TasksCompleted, r.Scenario)
		require.Zero(t, r.RunsFailed, r.Scenario)
		require.Positive(t, r.TasksPerSec, r.Scenario)
		require.Positive(t, r.WorkerCPUMicrosPer, "%s: the bench process's CPU per task (worker_cpu_us_per)", r.Scenario)
		require.InDelta(t, r.TasksPerSec/rep.Baseline.CommitsPerSec, r.Ratios.TasksPerSec, 1e-9, r.Scenario)
	}
	require.Equal(t, 30, rep.Results[1].Runs)
	require.Equal(t, 0.2, rep.Config.WarmupSeconds, "--warmup is the latency scenario's warm-up too")
	require.Equal(t, 8+12, rep.Results[3].Runs, "latency: rate × (warm-up + duration) runs")
	if w := rep.Results[3].WarmUp; w != nil { // nil only when the client could not pair every run with its event
		require.Equal(t, 8, w.Runs, "latency: the warm-up's runs are reported apart")
	}
	require.Equal(t, "20 runs/s", rep.Results[4].Mode)
	require.Equal(t, 4+6, rep.Results[4].Runs, "latency at the second rate")
}

func TestBenchTableAndBadFlags(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	args := append([]string{"--database-url", db.URL}, benchTinyArgs...)
	out := mustCLI(t, append(args, "--scenarios", "d", "--mode", "continuous", "--duration", "500ms", "--warmup", "200ms")...)
	require.Contains(t, out, "baseline: 2 clients")
	require.Contains(t, out, "map")
	require.Contains(t, out, "continuous")
	require.Contains(t, out, "fsync=off", "the table states the durability settings")
	require.Contains(t, out, "worker CPU µs/task")

	r := runCLI(t, "", "--database-url", db.URL, "bench", "--mode", "sideways")
	require.ErrorContains(t, r.err, `Mode = "sideways"`)
	r = runCLI(t, "", "--database-url", db.URL, "bench", "--scenarios", "z")
	require.ErrorContains(t, r.err, `Scenarios = "z"`)
}

func TestBenchGrowthAndScaleOutModes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	args := append([]string{"--database-url", db.URL}, benchTinyArgs...)
	rep := decodeJSON[bench.Report](t, mustCLI(t, append(args, "--mode", "growth", "--growth-sizes", "0,200", "--backlog", "50", "--json")...))
	require.NotNil(t, rep.Growth)
	require.Len(t, rep.Growth.Points, 2)
	require.EqualValues(t, 200, rep.Growth.Points[1].HistoryRuns)
	require.EqualValues(t, 50, rep.Growth.Points[1].QueuedRuns)
	require.Empty(t, rep.Growth.Prune, "pruning a given database needs --prune")
	require.Contains(t, rep.Growth.PruneNote, "--prune")
	require.Equal(t, []int{0, 200}, rep.Config.GrowthSizes)

	out := mustCLI(t, append(args, "--mode", "scale-out", "--scale-workers", "1,2")...)
	require.Contains(t, out, "scaling out")
	require.Contains(t, out, "reads/run")

	r := runCLI(t, "", "--database-url", db.URL, "bench", "--mode", "growth", "--growth-sizes", "100,10")
	require.ErrorContains(t, r.err, "GrowthSizes = [100 10]")
	r = runCLI(t, "", "bench", "worker")
	require.ErrorContains(t, r.err, bench.EnvWorkerProcess)
}
