package pgflow_test

// Go benchmarks of the end-to-end engine: each runs one scenario of `pgflow bench` (internal/bench) with b.N runs
// and reports its figures, the ratios to the same-run baseline included, as custom metrics. They start a
// throwaway PostgreSQL cluster with durability on, or use PGFLOW_BENCH_DATABASE_URL. Run them with, e.g.,
//
//	go test -run '^$' -bench BenchmarkEngine -benchtime 3000x .
//
// docs/performance.md describes the method; `pgflow bench` runs every scenario with a table at the end.

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/pgflow-go/pgflow/internal/bench"
)

func benchScenario(b *testing.B, scenario string, runsPerOp int) {
	b.Helper()
	cfg := bench.Config{
		DatabaseURL:      os.Getenv("PGFLOW_BENCH_DATABASE_URL"),
		Scenarios:        []string{scenario},
		Runs:             max(1, b.N/runsPerOp),
		BaselineDuration: 2 * time.Second,
		LatencyDuration:  5 * time.Second,
		IdleDuration:     5 * time.Second,
	}
	b.ResetTimer()
	rep, err := bench.Run(context.Background(), cfg)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.RunsFailed > 0 {
			b.Fatalf("%s: %d runs failed", r.Scenario, r.RunsFailed)
		}
		if r.TasksPerSec > 0 {
			b.ReportMetric(r.TasksPerSec, "tasks/s")
			b.ReportMetric(r.Ratios.TasksPerSec, "tasks/base-commit")
		}
		if r.RunsPerSec > 0 {
			b.ReportMetric(r.RunsPerSec, "runs/s")
			b.ReportMetric(r.Ratios.RunsPerSec, "runs/base-commit")
		}
		if r.LatencyP50Ms > 0 {
			b.ReportMetric(r.LatencyP50Ms, "p50-ms")
			b.ReportMetric(r.LatencyP99Ms, "p99-ms")
		}
		if r.CommitsPer > 0 {
			b.ReportMetric(r.CommitsPer, "commits/"+r.CostPer)
			b.ReportMetric(r.WALBytesPer, "WAL-B/"+r.CostPer)
			b.ReportMetric(r.BuffersPer, "buffers/"+r.CostPer)
		}
		if r.WorkerCPUMicrosPer > 0 { // this process's CPU: the workers run in it
			b.ReportMetric(r.WorkerCPUMicrosPer, "worker-cpu-us/"+r.CostPer)
		}
		if r.Scenario == bench.ScenarioIdle {
			b.ReportMetric(r.IdleStatementsPerSec, "idle-stmts/s")
		}
	}
	b.ReportMetric(rep.Baseline.CommitsPerSec, "base-commits/s")
}

// BenchmarkEngineOneStep is scenario (a): b.N one-step runs, burn-down.
func BenchmarkEngineOneStep(b *testing.B) { benchScenario(b, bench.ScenarioOneStep, 1) }

// BenchmarkEngineChain is scenario (b): three-step chains, b.N tasks.
func BenchmarkEngineChain(b *testing.B) { benchScenario(b, bench.ScenarioChain, 3) }

// BenchmarkEngineDiamond is scenario (c): diamonds, b.N tasks.
func BenchmarkEngineDiamond(b *testing.B) { benchScenario(b, bench.ScenarioDiamond, 4) }

// BenchmarkEngineMap is scenario (d): maps over 100 elements, b.N tasks (the scenario starts Runs/100 runs).
func BenchmarkEngineMap(b *testing.B) { benchScenario(b, bench.ScenarioMap, 1) }

// BenchmarkEngineStartRuns is the bulk start: b.N runs started with pgflow.start_flows.
func BenchmarkEngineStartRuns(b *testing.B) { benchScenario(b, bench.ScenarioStart, 1) }

// BenchmarkEngineLatency is scenario (e); b.N is ignored (the arrival rate and duration are fixed).
func BenchmarkEngineLatency(b *testing.B) { benchScenario(b, bench.ScenarioLatency, 1) }
