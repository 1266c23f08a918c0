package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// tinyConfig runs every scenario with sizes small enough for a test.
func tinyConfig(url string) Config {
	return Config{
		DatabaseURL:      url,
		Runs:             40,
		Workers:          2,
		MaxConcurrent:    8,
		BatchSize:        5,
		PoolSize:         4,
		StartBatch:       7,
		Starters:         3, // 40 runs in calls of 7 by three clients: every run started once
		Rates:            []float64{40},
		LatencyDuration:  500 * time.Millisecond,
		BaselineDuration: 300 * time.Millisecond,
		IdleDuration:     500 * time.Millisecond,
		Duration:         time.Second,
		Warmup:           300 * time.Millisecond,
	}
}

var tasksPerRun = map[string]int{ScenarioOneStep: 1, ScenarioChain: 3, ScenarioDiamond: 4, ScenarioMap: MapElements, ScenarioLatency: 1, ScenarioDelayed: 2}

// checkReport requires the invariants every report must hold.
func checkReport(t *testing.T, cfg Config, rep *Report) {
	t.Helper()
	b := rep.Baseline
	require.Equal(t, BaselineClients, b.Clients)
	require.Positive(t, b.Transactions)
	require.Positive(t, b.CommitsPerSec)
	// All benchmark connections are closed while the counters are read, so the baseline's rows are exact: one
	// insert and one update per transaction.
	require.InDelta(t, 2.0, b.RowsPerTx, 1e-9, "rows written per baseline transaction")
	require.GreaterOrEqual(t, b.CommitsPerTx, 1.0)
	require.Positive(t, b.WALBytesPerTx)
	// A row is written on a page the writer has in a buffer: at least one buffer access per row written.
	require.GreaterOrEqual(t, b.BuffersPerTx, b.RowsPerTx, "buffer accesses per baseline transaction")

	var names []string
	latencies := 0
	for _, r := range rep.Results {
		if len(names) == 0 || names[len(names)-1] != r.Scenario {
			names = append(names, r.Scenario) // idle is measured twice: default configuration and PollOnly
		}
		if r.Scenario == ScenarioLatency && len(cfg.RatesOfOneStep) == 0 {
			// One measurement per rate asked for, in the order given.
			require.Less(t, latencies, len(cfg.Rates), "more latency results than rates")
			require.Equal(t, fmt.Sprintf("%g runs/s", cfg.Rates[latencies]), r.Mode)
			latencies++
		}
		switch r.Scenario {
		case ScenarioStart:
			require.Equal(t, cfg.Runs, r.Runs)
			require.Equal(t, cfg.Runs, r.RunsUnfinished, "every started run stays queued (no worker)")
			require.Equal(t, "run", r.CostPer)
			require.Positive(t, r.RunsPerSec)
			require.Positive(t, r.CommitsPer)
			require.Positive(t, r.RowsWrittenPer)
			require.GreaterOrEqual(t, r.BuffersPer, r.RowsWrittenPer, "buffer accesses per run")
			require.Positive(t, r.WorkerCPUMicrosPer, "the starters run in the bench process: its CPU per run is measured")
			require.InDelta(t, r.RunsPerSec/b.CommitsPerSec, r.Ratios.RunsPerSec, 1e-9)
		case ScenarioIdle:
			require.Positive(t, r.Seconds)
			require.GreaterOrEqual(t, r.IdleStatementsPerSec, 0.0)
		default:
			per := tasksPerRun[r.Scenario]
			require.Equal(t, r.Runs*per, r.Tasks, "%s: tasks of the started runs", r.Scenario)
			require.Zero(t, r.RunsFailed, "%s: no run may fail", r.Scenario)
			if r.Mode == ModeContinuous {
				// A window of the run's life: how much got done in it depends on the machine, so only the
				// accounting is checked.
				require.Equal(t, r.Runs, r.RunsCompleted+r.RunsUnfinished, "%s: every started run is completed or still running", r.Scenario)
				require.LessOrEqual(t, r.TasksCompleted, r.Tasks, "%s", r.Scenario)
				require.GreaterOrEqual(t, r.TasksCompleted, r.RunsCompleted*per, "%s", r.Scenario)
				require.GreaterOrEqual(t, r.TasksPerSec, 0.0, "%s", r.Scenario)
				require.GreaterOrEqual(t, r.RunsPerSec, 0.0, "%s", r.Scenario)
				require.Equal(t, "task", r.CostPer)
				require.InDelta(t, r.TasksPerSec/b.CommitsPerSec, r.Ratios.TasksPerSec, 1e-9)
				continue
			}
			require.Equal(t, r.Runs, r.RunsCompleted, "%s: all runs completed", r.Scenario)
			require.Zero(t, r.RunsUnfinished, "%s", r.Scenario)
			require.Equal(t, r.Tasks, r.TasksCompleted, "%s: all tasks completed", r.Scenario)
			require.Positive(t, r.TasksPerSec, "%s", r.Scenario)
			require.Positive(t, r.RunsPerSec, "%s", r.Scenario)
			require.Equal(t, "task", r.CostPer)
			// Every task is claimed and completed in some transaction, and writes at least its own row.
			require.Positive(t, r.CommitsPer, "%s", r.Scenario)
			require.GreaterOrEqual(t, r.RowsWrittenPer, 1.0, "%s", r.Scenario)
			require.Positive(t, r.WALBytesPer, "%s", r.Scenario)
			require.GreaterOrEqual(t, r.BuffersPer, r.RowsWrittenPer, "%s: buffer accesses per task", r.Scenario)
			require.InDelta(t, r.BuffersPer/b.BuffersPerTx, r.Ratios.Buffers, 1e-9)
			// The workers run in the bench process: its CPU time over the window, per task, is measured.
			require.Positive(t, r.WorkerCPUMicrosPer, "%s: worker CPU per task", r.Scenario)
			require.Positive(t, r.LatencyP50Ms, "%s", r.Scenario)
			require.LessOrEqual(t, r.LatencyP50Ms, r.LatencyP95Ms, "%s", r.Scenario)
			require.LessOrEqual(t, r.LatencyP95Ms, r.LatencyP99Ms, "%s", r.Scenario)
			require.InDelta(t, r.TasksPerSec/b.CommitsPerSec, r.Ratios.TasksPerSec, 1e-9)
			require.InDelta(t, r.CommitsPer/b.CommitsPerTx, r.Ratios.Commits, 1e-9)
			if r.Scenario == ScenarioLatency && r.WarmUp != nil {
				rate := askedRate(t, r)
				warmUp := int(r.WarmUp.Seconds * rate)
				require.Equal(t, warmUp, r.WarmUp.Runs, "the runs that arrived during the warm-up")
				require.Equal(t, warmUp+max(1, int(rate*cfg.LatencyDuration.Seconds())), r.Runs, "warm-up and measured runs")
				require.LessOrEqual(t, r.WarmUp.LatencyP50Ms, r.WarmUp.LatencyP99Ms)
			}
			if r.Scenario == ScenarioDelayed {
				// Figures, not limits: how late delayed work starts depends on the machine.
				require.Positive(t, r.DelayedStartP50Ms, "a start delay's due time precedes its claim")
				require.Positive(t, r.DelayedRetryP50Ms, "a retry's due time precedes its claim")
				require.LessOrEqual(t, r.DelayedRetryP50Ms, r.DelayedRetryP99Ms)
			}
		}
	}
	require.Equal(t, cfg.Scenarios, names)
	if slices.Contains(cfg.Scenarios, ScenarioLatency) && len(cfg.RatesOfOneStep) == 0 {
		require.Equal(t, len(cfg.Rates), latencies, "one latency result per rate")
		require.Equal(t, cfg.Rates, rep.Config.Rates)
	}

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	for _, n := range names {
		require.Contains(t, table.String(), n)
	}
	require.Contains(t, table.String(), "worker CPU µs/task")
	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var back Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	require.Equal(t, len(rep.Results), len(back.Results))
	for i, r := range rep.Results {
		require.Equal(t, r.WorkerCPUMicrosPer, back.Results[i].WorkerCPUMicrosPer, "%s: worker_cpu_us_per in the JSON", r.Scenario)
	}
}

func TestBenchBurnDownAllScenarios(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg := tinyConfig(db.URL)
	cfg.Rates = []float64{40, 25} // the latency scenario once per rate, in the order given
	var phases []Progress
	cfg.Progress = func(p Progress) { phases = append(phases, p) }
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	require.NoError(t, err)
	cfg, _ = cfg.resolve()
	checkReport(t, cfg, rep)
	require.NotEmpty(t, phases)
	require.Contains(t, rep.Warnings, errNotDurable.Error(), "the test cluster runs without fsync and the report says so")
}

func TestBenchContinuous(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg := tinyConfig(db.URL)
	cfg.Mode = ModeContinuous
	cfg.Scenarios = []string{"a", "d"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	require.NoError(t, err)
	cfg, _ = cfg.resolve()
	require.Equal(t, []string{ScenarioOneStep, ScenarioMap}, cfg.Scenarios)
	checkReport(t, cfg, rep)
}

func TestBenchConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	_, err := Config{Mode: "sideways", Runs: -1, Scenarios: []string{"x"}}.resolve()
	require.ErrorContains(t, err, `Mode = "sideways"`)
	require.ErrorContains(t, err, "Runs = -1")
	require.ErrorContains(t, err, `Scenarios = "x"`)

	_, err = Config{RatesOfOneStep: []float64{0.25, -1}}.resolve()
	require.ErrorContains(t, err, "RatesOfOneStep = [0.25 -1]: must be finite numbers above 0 (-1 is not)")
	_, err = Config{Rates: []float64{math.NaN()}}.resolve()
	require.ErrorContains(t, err, "Rates = [NaN]: must be finite numbers above 0 (NaN is not)")
	_, err = Config{Rates: []float64{math.Inf(1)}}.resolve()
	require.ErrorContains(t, err, "Rates = [+Inf]: must be finite numbers above 0 (+Inf is not)")
	_, err = Config{Rates: []float64{0}}.resolve()
	require.ErrorContains(t, err, "Rates = [0]: must be finite numbers above 0 (0 is not)")
	_, err = Config{RatesOfOneStep: []float64{0.5}, Scenarios: []string{"latency"}}.resolve()
	require.ErrorContains(t, err, "RatesOfOneStep = [0.5]: needs the one-step and latency scenarios in the same run")
	cfg, err := Config{}.resolve()
	require.NoError(t, err)
	require.Equal(t, []float64{DefaultRate}, cfg.Rates)
}

// TestBenchLatencyAtAFractionOfOneStep: with RatesOfOneStep the latency scenario runs once per fraction, offering
// that fraction of the tasks/s the one-step scenario reached in the same run, and says so.
func TestBenchLatencyAtAFractionOfOneStep(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg := tinyConfig(db.URL)
	cfg.Scenarios = []string{"latency", "one-step"} // run in the canonical order whatever the order given
	cfg.RatesOfOneStep = []float64{0.02, 0.01}      // in the order given
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	require.NoError(t, err)
	require.Len(t, rep.Results, 3)
	oneStep := rep.Results[0]
	require.Equal(t, ScenarioOneStep, oneStep.Scenario)
	require.Equal(t, cfg.RatesOfOneStep, rep.Config.RatesOfOneStep)
	require.Nil(t, rep.Config.Rates, "the fractions replace the rates in runs/s")
	var text bytes.Buffer
	require.NoError(t, rep.WriteTable(&text))
	for i, f := range cfg.RatesOfOneStep {
		latency := rep.Results[1+i]
		require.Equal(t, ScenarioLatency, latency.Scenario)
		rate := max(1, math.Round(f*oneStep.TasksPerSec))
		require.Equal(t, fmt.Sprintf("%g runs/s", rate), latency.Mode)
		require.Equal(t, fmt.Sprintf("%g × one-step's %.0f tasks/s", f, oneStep.TasksPerSec), latency.RateBasis)
		require.Equal(t, int(rate*cfg.Warmup.Seconds())+max(1, int(rate*cfg.LatencyDuration.Seconds())), latency.Runs,
			"the warm-up's runs and the measured ones")
		require.Contains(t, text.String(), latency.RateBasis)
		// Each rate's notes name it: the table has a latency row per rate.
		require.Contains(t, text.String(), fmt.Sprintf("note: latency at %s: latency measured by the ", latency.Mode))
	}
	latency := rep.Results[2]

	// The server runs on this machine here, so the CPU it and this process spent per run are measured, and the
	// share of the machine they kept busy at the achieved rate is reported with them.
	require.Positive(t, latency.ServerCPUMicrosPer)
	require.Positive(t, latency.WorkerCPUMicrosPer)
	require.InDelta(t, (latency.ServerCPUMicrosPer+latency.WorkerCPUMicrosPer)*latency.ArrivalRate/1e6/float64(rep.Machine.CPUs),
		latency.CPUShare, 1e-9)
	require.Contains(t, text.String(), fmt.Sprintf("the server and this process used %.0f%% of %d CPUs (%.0f + %.0f µs per run)",
		100*latency.CPUShare, rep.Machine.CPUs, latency.ServerCPUMicrosPer, latency.WorkerCPUMicrosPer))

	// The server's CPU is divided by the connections that spent it: the starts' connections ran every start and
	// the workers' every claim and completion, so both used some (read to the nanosecond, not in clock ticks: a
	// short scenario's starts can take less than a tick).
	sp := latency.ServerCPUSplit
	require.NotNil(t, sp, "the server is local: its CPU is split by connection")
	require.Positive(t, sp.StartsMicrosPer)
	require.Positive(t, sp.WorkersMicrosPer)
	require.Contains(t, text.String(), fmt.Sprintf("of the server's µs per run, %.0f were the starts' connections' and %.0f the workers'",
		sp.StartsMicrosPer, sp.WorkersMicrosPer))

	// On one clock the latency is split where the server's timestamps fall, for every measured run (the warm-up's
	// left out). Each stage ends where the next begins, so none is negative, whatever the machine.
	st := latency.Stages
	require.NotNil(t, st, "the server is local: the stages are reported")
	require.Equal(t, latency.Runs-latency.WarmUp.Runs, st.Runs, "every measured run, no warm-up run")
	for name, p := range map[string]StagePercentiles{"to_start": st.ToStart, "to_claim": st.ToClaim,
		"to_completion": st.ToCompletion, "to_event": st.ToEvent} {
		require.GreaterOrEqual(t, p.P50Ms, 0.0, name)
		require.LessOrEqual(t, p.P50Ms, p.P99Ms, name)
	}
	require.Contains(t, text.String(), fmt.Sprintf("where the time went, p50 / p99 ms of %d runs: arrival to start %.1f / %.1f",
		st.Runs, st.ToStart.P50Ms, st.ToStart.P99Ms))
}

// askedRate is the arrival rate a latency result was asked for (its Mode).
func askedRate(t *testing.T, r Result) float64 {
	t.Helper()
	var rate float64
	_, err := fmt.Sscanf(r.Mode, "%g runs/s", &rate)
	require.NoError(t, err, "latency mode %q", r.Mode)
	return rate
}

// TestStagesOfSplitsEachRunAtTheServersTimes: each run's four stages are cut at its own server times and add up
// to its latency; runs the client or the server does not know are left out.
func TestStagesOfSplitsEachRunAtTheServersTimes(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ends := map[string]clientRunTimes{
		"a":           {arrived: at(0), completed: at(10)},  // 1 + 2 + 3 + 4
		"b":           {arrived: at(5), completed: at(105)}, // 10 + 20 + 30 + 40
		"client-only": {arrived: at(0), completed: at(1)},
	}
	server := []serverRunTimes{
		{runID: "b", started: at(15), claimed: at(35), completed: at(65)},
		{runID: "warm-up", started: at(0), claimed: at(1), completed: at(2)},
		{runID: "a", started: at(1), claimed: at(3), completed: at(6)},
	}
	require.Equal(t, &LatencyStages{
		Runs:         2,
		ToStart:      StagePercentiles{P50Ms: 1, P99Ms: 10},
		ToClaim:      StagePercentiles{P50Ms: 2, P99Ms: 20},
		ToCompletion: StagePercentiles{P50Ms: 3, P99Ms: 30},
		ToEvent:      StagePercentiles{P50Ms: 4, P99Ms: 40},
	}, stagesOf(ends, server))
	require.Nil(t, stagesOf(ends, server[1:2]), "no run on both sides")
}

// TestLatencyBookKeepsTheWarmUpApart: a run's latency is paired whichever of its start's return and its event
// comes first, and goes to the warm-up's list or the measured one by its arrival, not by when it was paired.
func TestLatencyBookKeepsTheWarmUpApart(t *testing.T) {
	t.Parallel()
	b := newLatencyBook()
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	b.started("warm-first", arrival{at: t0, warmUp: true})
	b.completed("measured-early", t0.Add(9*time.Millisecond)) // its event before its start returned
	b.completed("warm-first", t0.Add(500*time.Millisecond))
	b.started("measured-early", arrival{at: t0.Add(time.Millisecond)})
	b.started("measured", arrival{at: t0.Add(2 * time.Millisecond)})
	b.completed("warm-late", t0.Add(700*time.Millisecond))
	require.Equal(t, 2, b.count(), "two runs paired so far")
	b.started("warm-late", arrival{at: t0.Add(100 * time.Millisecond), warmUp: true})
	b.completed("measured", t0.Add(7*time.Millisecond))
	require.Equal(t, []time.Duration{8 * time.Millisecond, 5 * time.Millisecond}, b.lat)
	require.Equal(t, []time.Duration{500 * time.Millisecond, 600 * time.Millisecond}, b.warm)
	require.Equal(t, 4, b.count())
	require.Empty(t, b.arrived)
	require.Empty(t, b.early)
	require.Equal(t, map[string]clientRunTimes{
		"measured-early": {arrived: t0.Add(time.Millisecond), completed: t0.Add(9 * time.Millisecond)},
		"measured":       {arrived: t0.Add(2 * time.Millisecond), completed: t0.Add(7 * time.Millisecond)},
	}, b.ends, "the measured runs' client-side times, for the stages")

	w := warmUpOf(2*time.Second, b.warm)
	require.Equal(t, &WarmUp{Seconds: 2, Runs: 2, LatencyP50Ms: 500, LatencyP99Ms: 600}, w)
	require.Equal(t, &WarmUp{Seconds: 0}, warmUpOf(0, nil), "no warm-up: nothing to report")
}

func TestPercentileAndRates(t *testing.T) {
	t.Parallel()
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 50*time.Millisecond, percentile(d, 50))
	require.Equal(t, 95*time.Millisecond, percentile(d, 95))
	require.Equal(t, 99*time.Millisecond, percentile(d, 99))
	require.Equal(t, time.Millisecond, percentile(d[:1], 99))

	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ts []time.Time
	for i := range 101 {
		ts = append(ts, base.Add(time.Duration(i)*10*time.Millisecond)) // 100 events per second
	}
	require.InDelta(t, 100, steadyRate(ts), 1e-6)
	require.InDelta(t, 100, windowRate(ts, base, base.Add(500*time.Millisecond)), 1e-6)

	lsn, err := parseLSN("16/B374D848")
	require.NoError(t, err)
	require.Equal(t, uint64(0x16)<<32|0xB374D848, lsn)
	_, err = parseLSN("nonsense")
	require.ErrorContains(t, err, `"nonsense"`)
}

// TestWriteTableLinesUpEveryColumn: the text table has as many headings as each row has figures, each figure under
// its heading (a column added to the rows but not to the headings shifts every figure after it).
func TestWriteTableLinesUpEveryColumn(t *testing.T) {
	t.Parallel()
	b := Baseline{Clients: 2, Transactions: 1000, Seconds: 1, CommitsPerSec: 1000, LatencyMs: 2, CommitsPerTx: 1,
		WALBytesPerTx: 260, RowsPerTx: 2, BuffersPerTx: 12, ServerCPUMicrosPerTx: 300}
	r := Result{Scenario: ScenarioOneStep, Mode: ModeBurnDown, Runs: 10, Tasks: 10, TasksCompleted: 10, RunsPerSec: 4000,
		TasksPerSec: 4000, LatencyP50Ms: 1, LatencyP95Ms: 2, LatencyP99Ms: 3, CostPer: "task", CommitsPer: 0.03,
		WALBytesPer: 3300, RowsWrittenPer: 7, BuffersPer: 185, ServerCPUMicrosPer: 210, WorkerCPUMicrosPer: 30}
	r.ratios(b)
	rep := &Report{Baseline: b, Results: []Result{r}}
	var out bytes.Buffer
	require.NoError(t, rep.WriteTable(&out))
	require.Contains(t, out.String(), "12.0 buffers/tx")

	var heading, row []string
	gaps := regexp.MustCompile(`\s{2,}`)
	for line := range strings.Lines(out.String()) {
		fields := gaps.Split(strings.TrimSpace(line), -1)
		switch fields[0] {
		case "scenario":
			heading = fields
		case ScenarioOneStep:
			row = fields
		}
	}
	require.Len(t, row, len(heading), "heading %q, row %q", heading, row)
	column := slices.Index(heading, "buffers/task (×base)")
	require.NotEqual(t, -1, column, "heading %q", heading)
	require.Equal(t, "185 (15.417)", row[column])
	require.Equal(t, "210 (0.7)", row[slices.Index(heading, "server CPU µs/task (×base)")])
}

// TestLatencyReportSaysWhenTheEngineFellBehind: a latency round whose runs completed well below the rate they
// arrived at gets a note saying its latency is a growing backlog's; a round that kept up (completions within 1–2 %
// of the arrivals, as most rounds at half the one-step rate do) gets none. The figures are rounds of
// docs/performance-rounds.md (twenty-eighth round).
func TestLatencyReportSaysWhenTheEngineFellBehind(t *testing.T) {
	t.Parallel()
	b := Baseline{Clients: 2, Transactions: 1000, Seconds: 1, CommitsPerSec: 3000, LatencyMs: 0.65, CommitsPerTx: 1}
	report := func(completed, arrived float64) string {
		t.Helper()
		r := Result{Scenario: ScenarioLatency, Mode: "7716 runs/s", Runs: 100, Tasks: 100, RunsCompleted: 100,
			TasksCompleted: 100, RunsPerSec: completed, TasksPerSec: completed, ArrivalRate: arrived,
			LatencyP50Ms: 40, LatencyP95Ms: 60, LatencyP99Ms: 80, LatencySource: "client", CostPer: "task",
			Starters: latencyStarters}
		r.ratios(b)
		var out bytes.Buffer
		require.NoError(t, (&Report{Baseline: b, Results: []Result{r}}).WriteTable(&out))
		return out.String()
	}
	require.Contains(t, report(6739, 7692), "latency at 7716 runs/s: the runs completed at 6739 runs/s, 12% below the arrivals: the engine fell behind")
	require.NotContains(t, report(7001, 6990), "fell behind")
	require.NotContains(t, report(7400, 7692), "fell behind", "4 % short is within what keeping up leaves")
}

// TestWarmStartersStartsOnEveryConnectionAndLeavesNothing: before the start scenario's clock runs, each starter
// connection has run one start (its message id is used up) and rolled it back (no run, no message is left).
func TestWarmStartersStartsOnEveryConnectionAndLeavesNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := openEnv(ctx, db.URL)
	require.NoError(t, err)
	defer e.close()
	bf, err := flowFor(ScenarioStart, false)
	require.NoError(t, err)
	require.NoError(t, e.prepareFlow(ctx, bf))
	pool, err := newPool(ctx, db.URL, starterApp, 3)
	require.NoError(t, err)
	defer pool.Close()

	require.NoError(t, warmStarters(ctx, pool, bf, 3))
	require.EqualValues(t, 3, pool.Stat().TotalConns(), "three connections, each warmed")
	var runs, messages int
	require.NoError(t, db.Pool.QueryRow(ctx, `select (select count(*) from pgflow.runs), (select count(*) from pgmq.q_`+bf.slug+`)`).Scan(&runs, &messages))
	require.Zero(t, runs, "the warm-up starts are rolled back")
	require.Zero(t, messages)

	require.NoError(t, startRuns(ctx, pool, bf, 1, 1, 1, func(int) {}))
	var first int64
	require.NoError(t, db.Pool.QueryRow(ctx, `select min(q.msg_id) from pgmq.q_`+bf.slug+` as q`).Scan(&first))
	require.EqualValues(t, 4, first, "three warm-up starts sent (and rolled back) messages 1 to 3")
}

// TestOfferArrivalsDoesNotWaitForSlowStarts: the latency scenario's arrivals are an open loop. Every start here
// blocks until all of them have arrived, which only completes when no arrival waits for an earlier start to
// return (with a fixed set of starter goroutines it would not, and the starts would give up at the deadline).
func TestOfferArrivalsDoesNotWaitForSlowStarts(t *testing.T) {
	t.Parallel()
	const n = 3 * latencyStarters
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var arrived sync.WaitGroup
	arrived.Add(n)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	var progressed []int
	done, _, err := offerArrivals(ctx, n, 1e6, func(ctx context.Context, _ int, _ time.Time) error {
		arrived.Done()
		select {
		case <-all:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("an arrival waited for a start to return: %w", ctx.Err())
		}
	}, func(d int) { progressed = append(progressed, d) })
	require.NoError(t, err)
	require.Equal(t, n, done)
	require.Equal(t, []int{n}, progressed, "progress is reported at every hundredth start and at the last")
}
