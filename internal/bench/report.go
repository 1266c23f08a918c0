package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of one benchmark.
type Report struct {
	Started  time.Time     `json:"started"`
	Finished time.Time     `json:"finished"`
	Machine  Machine       `json:"machine"`
	Config   ConfigSummary `json:"config"`
	Baseline Baseline      `json:"baseline"`
	Results  []Result      `json:"results"`
	Growth   *Growth       `json:"growth,omitempty"`    // the growth mode's outcome
	Scale    *Scale        `json:"scale_out,omitempty"` // the scale-out mode's outcome
	Warnings []string      `json:"warnings,omitempty"`
}

// ConfigSummary is the configuration a report was measured with.
type ConfigSummary struct {
	Mode             string    `json:"mode"`
	Scenarios        []string  `json:"scenarios"`
	Runs             int       `json:"runs"`
	DurationSeconds  float64   `json:"duration_seconds,omitempty"`
	WarmupSeconds    float64   `json:"warmup_seconds,omitempty"`
	Workers          int       `json:"workers"`
	MaxConcurrent    int       `json:"max_concurrent"`
	BatchSize        int       `json:"batch_size"`
	PoolSize         int       `json:"pool_size"`
	StartBatch       int       `json:"start_batch"`
	Starters         int       `json:"starters"`
	Rates            []float64 `json:"latency_rates,omitempty"`
	RatesOfOneStep   []float64 `json:"latency_rates_of_one_step,omitempty"`
	DeleteMessages   bool      `json:"delete_messages"`
	GrowthSizes      []int     `json:"growth_sizes,omitempty"`
	Backlog          int       `json:"backlog,omitempty"`
	ScaleWorkers     []int     `json:"scale_workers,omitempty"`
	BaselineSeconds  float64   `json:"baseline_seconds"`
	ThrowawayCluster bool      `json:"throwaway_cluster"`
}

func summarize(c Config) ConfigSummary {
	s := ConfigSummary{Mode: c.Mode, Scenarios: c.Scenarios, Runs: c.Runs, Workers: c.Workers, MaxConcurrent: c.MaxConcurrent,
		BatchSize: c.BatchSize, PoolSize: c.PoolSize, StartBatch: c.StartBatch, Starters: c.Starters,
		DeleteMessages:  c.DeleteMessages,
		BaselineSeconds: c.BaselineDuration.Seconds(), ThrowawayCluster: c.DatabaseURL == ""}
	if slices.Contains(c.Scenarios, ScenarioLatency) {
		// The rates asked for: as fractions of the one-step rate when given so (they replace Rates), else in runs/s.
		if len(c.RatesOfOneStep) > 0 {
			s.RatesOfOneStep = c.RatesOfOneStep
		} else {
			s.Rates = c.Rates
		}
	}
	if c.Mode == ModeBurnDown && slices.Contains(c.Scenarios, ScenarioLatency) {
		s.WarmupSeconds = c.Warmup.Seconds()
	}
	switch c.Mode {
	case ModeContinuous:
		s.DurationSeconds, s.WarmupSeconds = c.Duration.Seconds(), c.Warmup.Seconds()
	case ModeGrowth:
		s.GrowthSizes, s.Backlog = c.GrowthSizes, c.Backlog
	case ModeScaleOut:
		s.ScaleWorkers = c.ScaleWorkers
	}
	return s
}

// Result is the outcome of one scenario. Costs are per task (per run for the start scenario); ratios divide a
// figure by the same figure of the baseline transaction (rates by the baseline's commits per second).
type Result struct {
	Scenario      string `json:"scenario"`
	Mode          string `json:"mode"`
	Workers       int    `json:"workers,omitempty"`
	MaxConcurrent int    `json:"max_concurrent,omitempty"`
	BatchSize     int    `json:"batch_size,omitempty"`
	StartBatch    int    `json:"start_batch,omitempty"`
	Starters      int    `json:"starters,omitempty"`

	Runs           int     `json:"runs"`            // runs started
	Tasks          int     `json:"tasks"`           // tasks those runs have
	RunsCompleted  int     `json:"runs_completed"`  // runs completed (all of them in burn-down)
	TasksCompleted int     `json:"tasks_completed"` // tasks completed
	RunsFailed     int     `json:"runs_failed"`
	RunsUnfinished int     `json:"runs_unfinished"` // still 'started' at the end (continuous backlog, start scenario)
	Seconds        float64 `json:"seconds"`         // working time (burn-down) or measured window (continuous)

	RunsPerSec    float64 `json:"runs_per_sec"`
	TasksPerSec   float64 `json:"tasks_per_sec"`
	LatencyP50Ms  float64 `json:"latency_p50_ms"`
	LatencyP95Ms  float64 `json:"latency_p95_ms"`
	LatencyP99Ms  float64 `json:"latency_p99_ms"`
	LatencySource string  `json:"latency_source,omitempty"`
	// ArrivalRate is the latency scenario's achieved arrival rate: starts returned per second, from the first
	// scheduled arrival to the last start's return (the rate asked for is in Mode).
	ArrivalRate float64 `json:"arrival_rate,omitempty"`
	// RateBasis says how the latency scenario's rate was chosen when Config.RatesOfOneStep set it.
	RateBasis string `json:"latency_rate_basis,omitempty"`
	// CPUShare is the share of this machine's CPUs the latency scenario kept busy, from 0 to 1: the server's and
	// this process's CPU per run times ArrivalRate, over the machine's CPUs. Near 1 the machine is saturated and a
	// run's latency is mostly waiting for a CPU. 0 when the server's CPU is not measured (it runs elsewhere).
	CPUShare float64 `json:"cpu_share,omitempty"`
	// ServerCPUSplit divides the latency scenario's ServerCPUMicrosPer by the connections that spent it (nil when
	// the server's CPU is not measured).
	ServerCPUSplit *ServerCPUSplit `json:"server_cpu_split,omitempty"`
	// WarmUp is the latency scenario's cold start: the runs that arrived during Config.Warmup, left out of the
	// latency percentiles above (nil when the client could not pair every run with its event).
	WarmUp *WarmUp `json:"warm_up,omitempty"`
	// Stages splits the latency scenario's latency where the server's timestamps fall (nil when the server does
	// not run on this machine, or the client could not pair every run with its event).
	Stages *LatencyStages `json:"latency_stages,omitempty"`

	CostPer        string  `json:"cost_per,omitempty"` // "task" or "run"
	CommitsPer     float64 `json:"commits_per"`
	WALBytesPer    float64 `json:"wal_bytes_per"`
	RowsWrittenPer float64 `json:"rows_written_per"`
	// HOTUpdateShare is the share of the rows updated that PostgreSQL updated without new index entries (heap-only
	// tuples: no indexed column changed and the new version fitted on the old one's page), from pg_stat_user_tables.
	HOTUpdateShare float64 `json:"hot_update_share"`
	// BuffersPer is the number of shared-buffer accesses per task (or run) by the database's sessions:
	// pg_stat_database's blks_hit + blks_read, autovacuum's and the monitor's progress counts included. Like rows
	// and WAL it counts work, not time, so it does not move with the machine's load: under concurrency each access
	// costs more CPU, but the count stays the same.
	BuffersPer float64 `json:"buffers_per"`
	// ServerCPUMicrosPer is the database server's CPU time per task (or run), every server process counted,
	// when the server runs on this machine (0 otherwise). It depends on the machine, not on the load of others.
	ServerCPUMicrosPer float64 `json:"server_cpu_us_per,omitempty"`
	// WorkerCPUMicrosPer is the benchmark process's own CPU time (user + system) per task (or run) over the same
	// window: the in-process workers (or the start scenario's clients), the monitor's polls, the set-up and
	// shut-down of the pools. 0 where getrusage is not available.
	WorkerCPUMicrosPer float64 `json:"worker_cpu_us_per,omitempty"`
	TotalCommits       int64   `json:"total_commits"`
	TotalWALBytes      int64   `json:"total_wal_bytes"`
	TotalRowsWriten    int64   `json:"total_rows_written"`
	TotalBuffers       int64   `json:"total_buffers"`

	// Delayed work (scenario delayed): how late a delayed task was claimed after it became due, for start delays
	// (due: queued_at + the delay) and for RetryAfter retries (due: step_tasks.retry_at).
	DelayedStartP50Ms float64 `json:"delayed_start_p50_ms,omitempty"`
	DelayedStartP99Ms float64 `json:"delayed_start_p99_ms,omitempty"`
	DelayedRetryP50Ms float64 `json:"delayed_retry_p50_ms,omitempty"`
	DelayedRetryP99Ms float64 `json:"delayed_retry_p99_ms,omitempty"`

	IdleStatementsPerSec   float64 `json:"idle_statements_per_sec,omitempty"`   // statements the worker sent
	IdleTransactionsPerSec float64 `json:"idle_transactions_per_sec,omitempty"` // pg_stat_database commits, all sessions
	IdleWALBytesPerSec     float64 `json:"idle_wal_bytes_per_sec,omitempty"`

	Ratios Ratios `json:"ratios"`
}

// Ratios are a result's figures divided by the baseline's.
type Ratios struct {
	RunsPerSec   float64 `json:"runs_per_sec"`    // runs/s ÷ baseline commits/s
	TasksPerSec  float64 `json:"tasks_per_sec"`   // tasks/s ÷ baseline commits/s
	LatencyP50   float64 `json:"latency_p50"`     // ÷ the baseline transaction's mean latency
	LatencyP95   float64 `json:"latency_p95"`     //
	LatencyP99   float64 `json:"latency_p99"`     //
	Commits      float64 `json:"commits"`         // commits per task ÷ commits per baseline transaction
	WALBytes     float64 `json:"wal_bytes"`       // WAL bytes per task ÷ WAL bytes per baseline transaction
	RowsWritten  float64 `json:"rows_written"`    // rows per task ÷ rows per baseline transaction
	Buffers      float64 `json:"buffers"`         // buffer accesses per task ÷ per baseline transaction
	IdleRequests float64 `json:"idle_statements"` // idle statements/s ÷ baseline commits/s
	ServerCPU    float64 `json:"server_cpu"`      // server CPU per task ÷ server CPU per baseline transaction
}

func (r *Result) setCost(d delta) {
	r.CostPer = "task"
	n := r.TasksCompleted
	if n == 0 {
		return
	}
	r.setTotals(d, n)
}

func (r *Result) setCostPerRun(d delta) {
	r.CostPer = "run"
	if r.Runs == 0 {
		return
	}
	r.setTotals(d, r.Runs)
}

func (r *Result) setTotals(d delta, n int) {
	r.TotalCommits, r.TotalWALBytes, r.TotalRowsWriten, r.TotalBuffers = d.commits, d.walBytes, d.rows, d.buffers
	r.CommitsPer = float64(d.commits) / float64(n)
	r.WALBytesPer = float64(d.walBytes) / float64(n)
	r.RowsWrittenPer = float64(d.rows) / float64(n)
	if d.updates > 0 {
		r.HOTUpdateShare = float64(d.hot) / float64(d.updates)
	}
	r.BuffersPer = float64(d.buffers) / float64(n)
	r.ServerCPUMicrosPer = float64(d.cpu.Microseconds()) / float64(n)
	r.WorkerCPUMicrosPer = float64(d.selfCPU.Microseconds()) / float64(n)
}

// ServerCPUSplit is the server's CPU per run of the latency scenario spent by the connections that start runs and
// by the workers' connections; the rest of ServerCPUMicrosPer is the server's background processes (WAL writer,
// checkpointer, autovacuum) and the benchmark's listener and monitor. The latency target is set at a fraction of
// the one-step burn-down's rate, and that burn-down has no starts to pay for: StartsMicrosPer is what a run costs
// the server besides what the burn-down measures (docs/performance.md). The connections' times are read to the
// nanosecond where the kernel gives them (/proc/<pid>/schedstat), the total in clock ticks.
type ServerCPUSplit struct {
	// StartsMicrosPer is the starting client's connections: the coalesced start calls and the sending of their
	// events.
	StartsMicrosPer float64 `json:"starts_us_per"`
	// WorkersMicrosPer is the workers' connections: reads and claims, completions, heartbeats, and their listening
	// connections.
	WorkersMicrosPer float64 `json:"workers_us_per"`
}

const (
	roleStarts  = "starts"
	roleWorkers = "workers"
)

// splitServerCPU divides the starts' and the workers' connections' time (byRole) by runs, in µs.
func splitServerCPU(byRole map[string]time.Duration, runs int) *ServerCPUSplit {
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(runs) }
	return &ServerCPUSplit{StartsMicrosPer: per(byRole[roleStarts]), WorkersMicrosPer: per(byRole[roleWorkers])}
}

// WarmUp is what the latency scenario's warm-up runs saw.
type WarmUp struct {
	Seconds      float64 `json:"seconds"`
	Runs         int     `json:"runs"`
	LatencyP50Ms float64 `json:"latency_p50_ms"`
	LatencyP99Ms float64 `json:"latency_p99_ms"`
}

func warmUpOf(d time.Duration, lat []time.Duration) *WarmUp {
	w := &WarmUp{Seconds: d.Seconds(), Runs: len(lat)}
	if len(lat) > 0 {
		slices.Sort(lat)
		w.LatencyP50Ms, w.LatencyP99Ms = ms(percentile(lat, 50)), ms(percentile(lat, 99))
	}
	return w
}

func (r *Result) setLatency(lat []time.Duration, source string) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	r.LatencyP50Ms = ms(percentile(lat, 50))
	r.LatencyP95Ms = ms(percentile(lat, 95))
	r.LatencyP99Ms = ms(percentile(lat, 99))
	r.LatencySource = source
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func (r *Result) ratios(b Baseline) {
	r.Ratios = Ratios{
		RunsPerSec:   ratio(r.RunsPerSec, b.CommitsPerSec),
		TasksPerSec:  ratio(r.TasksPerSec, b.CommitsPerSec),
		LatencyP50:   ratio(r.LatencyP50Ms, b.LatencyMs),
		LatencyP95:   ratio(r.LatencyP95Ms, b.LatencyMs),
		LatencyP99:   ratio(r.LatencyP99Ms, b.LatencyMs),
		Commits:      ratio(r.CommitsPer, b.CommitsPerTx),
		WALBytes:     ratio(r.WALBytesPer, b.WALBytesPerTx),
		RowsWritten:  ratio(r.RowsWrittenPer, b.RowsPerTx),
		Buffers:      ratio(r.BuffersPer, b.BuffersPerTx),
		IdleRequests: ratio(r.IdleStatementsPerSec, b.CommitsPerSec),
		ServerCPU:    ratio(r.ServerCPUMicrosPer, b.ServerCPUMicrosPerTx),
	}
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteTable writes the report as text tables: the machine and baseline, then one row per scenario with every
// figure followed by its ratio to the baseline in brackets.
func (rep *Report) WriteTable(w io.Writer) error {
	m := rep.Machine
	fmt.Fprintf(w, "machine: %d CPUs (%s), %s, GOMAXPROCS %d; PostgreSQL %s (%s), PGMQ %s\n", m.CPUs, m.CPUModel, m.GoVersion,
		m.GOMAXPROCS, m.ServerVersion, map[bool]string{true: "throwaway cluster", false: "given database"}[m.Throwaway], m.PGMQ)
	fmt.Fprintf(w, "settings: fsync=%s synchronous_commit=%s full_page_writes=%s wal_sync_method=%s shared_buffers=%s\n",
		m.Settings["fsync"], m.Settings["synchronous_commit"], m.Settings["full_page_writes"], m.Settings["wal_sync_method"], m.Settings["shared_buffers"])
	c := rep.Config
	fmt.Fprintf(w, "config: mode=%s runs=%d workers=%d max_concurrent=%d batch_size=%d pool_size=%d start_batch=%d starters=%d",
		c.Mode, c.Runs, c.Workers, c.MaxConcurrent, c.BatchSize, c.PoolSize, c.StartBatch, c.Starters)
	if c.Mode == ModeContinuous {
		fmt.Fprintf(w, " duration=%gs warmup=%gs", c.DurationSeconds, c.WarmupSeconds)
	} else if c.WarmupSeconds > 0 {
		fmt.Fprintf(w, " latency_warmup=%gs", c.WarmupSeconds)
	}
	if c.DeleteMessages {
		fmt.Fprint(w, " messages=deleted at the claim (DeleteTaskMessages)")
	}
	fmt.Fprintln(w)
	b := rep.Baseline
	fmt.Fprintf(w, "baseline: %d clients, one-row insert+update per transaction: %.0f commits/s (before %.0f, after %.0f), %.2f ms/tx, %.0f WAL bytes/tx, %.1f rows/tx, %.1f buffers/tx, %s server CPU µs/tx (%d tx in %.1fs)\n\n",
		b.Clients, b.CommitsPerSec, b.CommitsPerSecBefore, b.CommitsPerSecAfter, b.LatencyMs, b.WALBytesPerTx, b.RowsPerTx,
		b.BuffersPerTx, num(b.ServerCPUMicrosPerTx, 0), b.Transactions, b.Seconds)

	if err := rep.writeResults(w); err != nil {
		return err
	}
	for _, r := range rep.Results {
		if r.Scenario == ScenarioIdle {

			fmt.Fprintf(w, "\nidle worker (%s): %.2f statements/s sent (×base %.5f); database: %.2f transactions/s, %.0f WAL bytes/s; over %.1fs\n",
				r.Mode, r.IdleStatementsPerSec, r.Ratios.IdleRequests, r.IdleTransactionsPerSec, r.IdleWALBytesPerSec, r.Seconds)
		}
	}
	for _, r := range rep.Results {
		if r.Scenario == ScenarioDelayed {
			fmt.Fprintf(w, "\ndelayed work (%s): due → claim p50 %.1f ms, p99 %.1f ms (start delays p50 %.1f / p99 %.1f ms; RetryAfter retries p50 %.1f / p99 %.1f ms)\n",
				r.Mode, r.LatencyP50Ms, r.LatencyP99Ms, r.DelayedStartP50Ms, r.DelayedStartP99Ms, r.DelayedRetryP50Ms, r.DelayedRetryP99Ms)
		}
	}
	if err := rep.Growth.writeTable(w); err != nil {
		return err
	}
	if err := rep.Scale.writeTable(w); err != nil {
		return err
	}
	var notes []string
	for _, r := range rep.Results {
		if r.RunsFailed > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d runs failed", r.Scenario, r.RunsFailed))
		}
		if r.LatencySource != "" && r.Scenario == ScenarioLatency {
			// A run measures the latency at one rate or more: each note names its rate.
			subject := fmt.Sprintf("%s at %s", r.Scenario, r.Mode)
			asked := r.Mode
			if r.RateBasis != "" {
				asked += ": " + r.RateBasis
			}
			note := fmt.Sprintf("%s: latency measured by the %s; arrivals achieved %.0f runs/s (%s asked, %d starters)",
				subject, r.LatencySource, r.ArrivalRate, asked, r.Starters)
			if r.CPUShare > 0 {
				note += fmt.Sprintf("; the server and this process used %.0f%% of %d CPUs (%.0f + %.0f µs per run)",
					100*r.CPUShare, rep.Machine.CPUs, r.ServerCPUMicrosPer, r.WorkerCPUMicrosPer)
			}
			if sp := r.ServerCPUSplit; sp != nil {
				note += fmt.Sprintf("; of the server's µs per run, %.0f were the starts' connections' and %.0f the workers'",
					sp.StartsMicrosPer, sp.WorkersMicrosPer)
			}
			if w := r.WarmUp; w != nil && w.Runs > 0 {
				note += fmt.Sprintf("; not counted: the %gs warm-up's %d runs, p50 %.1f ms, p99 %.1f ms", w.Seconds, w.Runs,
					w.LatencyP50Ms, w.LatencyP99Ms)
			}
			notes = append(notes, note)
			if short := r.arrivalShortfall(); short > 1-keptUpShare {
				notes = append(notes, fmt.Sprintf("%s: the runs completed at %.0f runs/s, %.0f%% below the arrivals: the engine fell "+
					"behind at this rate, so the latency is that of a backlog that grew for the whole window, not of a "+
					"steady state (the machine does not sustain this rate)", subject, r.RunsPerSec, 100*short))
			}
			if st := r.Stages; st != nil {
				notes = append(notes, fmt.Sprintf("%s: where the time went, p50 / p99 ms of %d runs: arrival to start %.1f / %.1f, "+
					"start to claim %.1f / %.1f, claim to completion %.1f / %.1f, completion to event %.1f / %.1f",
					subject, st.Runs, st.ToStart.P50Ms, st.ToStart.P99Ms, st.ToClaim.P50Ms, st.ToClaim.P99Ms,
					st.ToCompletion.P50Ms, st.ToCompletion.P99Ms, st.ToEvent.P50Ms, st.ToEvent.P99Ms))
			}
		}
	}
	for _, n := range append(notes, rep.Warnings...) {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

// keptUpShare is the share of the latency scenario's arrival rate its runs must complete at (their steady rate,
// between the 10th and the 90th percentile of the completions) to count as kept up with. Rounds that keep up
// complete within 1–2 % of the arrivals; a round that fell behind at half the one-step rate completed 12 %
// below them (docs/performance.md, "Figures").
const keptUpShare = 0.95

// arrivalShortfall is, for the latency scenario, the share of the arrival rate by which its runs' steady
// completion rate fell short of it (negative when they completed faster); 0 for other scenarios.
func (r *Result) arrivalShortfall() float64 {
	if r.Scenario != ScenarioLatency || r.ArrivalRate <= 0 || r.RunsPerSec <= 0 {
		return 0
	}
	return 1 - r.RunsPerSec/r.ArrivalRate
}

func perSuffix(per string) string {
	if per == "run" {
		return " /run"
	}
	return ""
}

func num(v float64, prec int) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func withRatio(v, r float64, prec int) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f (%s)", prec, v, strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", r), "0"), "."))
}

// writeResults writes the scenarios' table (nothing when no scenario ran).
func (rep *Report) writeResults(w io.Writer) error {
	if len(rep.Results) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tmode\truns\ttasks\truns/s (×base)\ttasks/s (×base)\tp50 ms\tp95 ms\tp99 ms (×base)\tcommits/task (×base)\tWAL B/task (×base)\trows/task (×base)\tHOT updates\tbuffers/task (×base)\tserver CPU µs/task (×base)\tworker CPU µs/task\t")
	for _, r := range rep.Results {
		if r.Scenario == ScenarioIdle {
			continue
		}
		per := "task"
		if r.CostPer == "run" {
			per = "run"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.Scenario, r.Mode, r.Runs, r.Tasks,
			withRatio(r.RunsPerSec, r.Ratios.RunsPerSec, 0),
			withRatio(r.TasksPerSec, r.Ratios.TasksPerSec, 0),
			num(r.LatencyP50Ms, 1), num(r.LatencyP95Ms, 1),
			withRatio(r.LatencyP99Ms, r.Ratios.LatencyP99, 1),
			withRatio(r.CommitsPer, r.Ratios.Commits, 2)+perSuffix(per),
			withRatio(r.WALBytesPer, r.Ratios.WALBytes, 0)+perSuffix(per),
			withRatio(r.RowsWrittenPer, r.Ratios.RowsWritten, 1)+perSuffix(per),
			fmt.Sprintf("%.0f %%", 100*r.HOTUpdateShare),
			withRatio(r.BuffersPer, r.Ratios.Buffers, 0)+perSuffix(per),
			withRatio(r.ServerCPUMicrosPer, r.Ratios.ServerCPU, 0)+perSuffix(per),
			num(r.WorkerCPUMicrosPer, 0)+perSuffix(per))
	}
	return tw.Flush()
}

// meanMs is the mean client-side time of a function's calls ("-" when it was not called).
func meanMs(ts []StatementTime, function string) string {
	for _, t := range ts {
		if t.Function == function {
			return fmt.Sprintf("%.2f", t.MeanMs)
		}
	}
	return "-"
}

// writeTable writes one row per size: the start phase per run, the work phase per task, the mean times of the
// hot calls and the tables' size; then the pruning figures.
func (g *Growth) writeTable(w io.Writer) error {
	if g == nil {
		return nil
	}
	fmt.Fprintln(w, "cost as work grows (one-step flow; start: per run, work: per task; ms: mean client-side time of one call; rates ×base: per commit of the baseline measured before each size):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "history runs\tqueued\tpreload s\tbase c/s\tstart runs/s (×base)\tWAL B/run (FPI)\ttasks/s (×base)\tcommits/task\tWAL B/task (×base)\tFPI/task\trows/task\tstart_flows ms\tread+claim ms\tcomplete_tasks ms\ttables MB\t")
	points := g.allPoints()
	for _, p := range points {
		history := strconv.FormatInt(p.HistoryRuns, 10)
		if p == g.AfterPrune {
			history = "after prune: " + history
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.0f\t%s\t%.0f (%.2f)\t%s\t%.3f\t%s\t%.2f\t%.1f\t%s\t%s\t%s\t%.0f\t\n",
			history, p.QueuedRuns, p.PreloadSeconds, p.Baseline.CommitsPerSec,
			withRatio(p.Start.PerSec, p.Start.Ratios.RunsPerSec, 0), p.Start.WALBytesPer, p.Start.FullPagesPer,
			withRatio(p.Work.PerSec, p.Work.Ratios.TasksPerSec, 0), p.Work.CommitsPer,
			withRatio(p.Work.WALBytesPer, p.Work.Ratios.WALBytes, 0), p.Work.FullPagesPer, p.Work.RowsWrittenPer,
			meanMs(p.Statements, "pgflow.start_flows"), meanMs(p.Statements, "pgflow.read_and_start_tasks"),
			meanMs(p.Statements, "pgflow.complete_tasks"),
			float64(p.TableBytes)/(1<<20))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range g.Points {
		if p.PreloadRuns > 0 {
			fmt.Fprintf(w, "preload: %d history runs in %.1fs (%.0f runs/s); backlog top-up %.1fs; vacuum analyze %.1fs\n",
				p.PreloadRuns, p.PreloadSeconds, float64(p.PreloadRuns)/p.PreloadSeconds, p.BacklogSeconds, p.VacuumSeconds)
		}
	}
	for _, p := range points {
		if !p.Checkpointed {
			fmt.Fprintf(w, "note: no CHECKPOINT before size %d (needs pg_checkpoint or a superuser): its full-page images depend on when the server last checkpointed\n", p.HistoryRuns)
		}
	}
	for _, r := range g.Prune {
		fmt.Fprintf(w, "prune_data_older_than('%s'): %d of %d runs pruned in %.2fs (%.1f ms per 1000 runs, %.0f WAL B, %.2f full-page images and %.1f rows per run)\n",
			r.Retention, r.RunsPruned, r.RunsBefore, r.Seconds, r.MsPer1000Runs, r.WALBytesPerRun, r.FullPagesPer, r.RowsPerRun)
	}
	if r := g.Reuse; r != nil {
		fmt.Fprintf(w, "space: tables %.0f MB before pruning, %.0f MB after pruning and vacuum (%.1fs), %.0f MB after loading %d runs again\n",
			float64(r.BytesBeforePrune)/(1<<20), float64(r.BytesAfterVacuum)/(1<<20), r.VacuumSeconds, float64(r.BytesAfterReload)/(1<<20), r.ReloadedRuns)
	}
	if g.PruneNote != "" {
		fmt.Fprintln(w, "prune:", g.PruneNote)
	}
	fmt.Fprintln(w)
	return nil
}

// writeTable writes one row per number of worker processes.
func (s *Scale) writeTable(w io.Writer) error {
	if s == nil || len(s.Points) == 0 {
		return nil
	}
	fmt.Fprintln(w, "scaling out (worker processes against one database; one-step burn-down, then idle; tasks/s ×base: per commit of the baseline measured before each point):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "processes\tbase c/s\ttasks/s (×base)\t× 1st\tcommits/task\tWAL B/task\tconns/process busy (max)\tidle\tidle stmts/s/process\tsingle runs\treads/run\tstmts/run\t")
	first := s.Points[0].TasksPerSec
	for _, p := range s.Points {
		fmt.Fprintf(tw, "%d\t%.0f\t%s\t%.2f\t%.3f\t%.0f\t%.1f (%d)\t%.1f\t%.2f\t%d\t%.2f\t%.1f\t\n",
			p.Processes, p.Baseline.CommitsPerSec, withRatio(p.TasksPerSec, p.Ratios.TasksPerSec, 0), ratio(p.TasksPerSec, first), p.CommitsPer,
			p.WALBytesPer, p.ConnectionsBusy, p.ConnectionsMax, p.ConnectionsIdle, p.IdleStatementsPerSec,
			p.TrickleRuns, p.ReadsPerRun, p.StatementsPerRun)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "reads/run: queue reads (pgflow.read_and_start_tasks or pgmq.read) of all processes per single started run beyond their idle rate (1 = one process woke; processes = every one did)")
	fmt.Fprintln(w)
	return nil
}
