package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgflow-go/pgflow/internal/bench"
)

func newBenchCmd(opts *globalOptions) *cobra.Command {
	var (
		cfg       bench.Config
		scenarios string
		asJSON    bool
		noBar     bool
		verbose   bool
		cpuProf   string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput, latency and database cost per task with the real Go worker",
		Long: `Benchmark pgflow-go end to end: start runs, work them with real Go workers and report runs/s, tasks/s
(steady state), start-to-completion latency (p50/p95/p99), what each task costs the database (commits,
WAL bytes, rows written, server CPU µs when the server runs on this machine) and the CPU µs this process
spends per task (worker CPU: the workers run inside it).

Every figure is also given as a ratio to a baseline measured in the same run: the machine's commit rate for
one-row insert+update transactions with 2 clients. Machines are noisy; ratios measured together are what count.

Without --database-url a throwaway PostgreSQL cluster is started with durability on (fsync, synchronous_commit
and full_page_writes as in production) and removed at the end. With --database-url the schema is installed in
the given database and the benchmark's flows (bench_*) are deleted and recreated there.

Scenarios (--scenarios, comma separated; letters a-e also work):
  start     bulk start of one-step runs (no worker)
  one-step  (a) a flow with one step
  chain     (b) three steps in a chain
  diamond   (c) a -> b, c -> d
  map       (d) one map step over 100 elements (--runs/100 runs: as many tasks as one-step)
  latency   (e) one-step runs started at --rate runs/s; latency from the start call to the run:completed event
  idle      what one idle worker with the default configuration costs the database per second
  delayed   start delays and RetryAfter retries: how long after its due time delayed work is claimed (p50/p99)

Modes: burn-down starts --runs runs, then works them; continuous keeps a backlog for --warmup + --duration and
measures the window after the warm-up. Two modes measure something else instead of the scenarios:
  growth     cost per run started and per task claimed and completed at each --growth-sizes number of completed
             runs in the tables (pre-loaded), with --backlog runs queued; then pgflow.prune_data_older_than on
             that history and the same costs on the pruned tables (on a throwaway cluster, or with --prune)
  scale-out  --scale-workers worker processes (this binary, one pgflow.Worker each) against one database:
             throughput, connections per process, idle statements and reads per notification
See docs/performance.md for the method.`,
		Example: `  pgflow bench
  pgflow bench --scenarios one-step,chain --runs 10000 --max-concurrent 500
  pgflow bench --mode continuous --duration 20s --json > bench.json
  pgflow bench --mode growth --growth-sizes 0,100000,1000000 --backlog 100000
  pgflow bench --mode scale-out --scale-workers 1,2,4,8 --runs 20000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.DatabaseURL = opts.databaseURL
			if strings.TrimSpace(scenarios) != "" {
				cfg.Scenarios = strings.Split(scenarios, ",")
			}
			if cfg.Mode == bench.ModeScaleOut {
				self, err := os.Executable()
				if err != nil {
					return fmt.Errorf("--mode scale-out: find this binary to start worker processes: %w", err)
				}
				cfg.WorkerCommand = []string{self, "bench", "worker"}
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			level := slog.LevelError
			if verbose {
				level = slog.LevelWarn
			}
			cfg.Logger = slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: level}))
			var bar *progressBar
			if !noBar && isTerminal(errOut) {
				bar = &progressBar{w: errOut}
				cfg.Progress = bar.update
			}
			if cpuProf != "" {
				f, err := os.Create(cpuProf)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			cfg.StopNow = stopNowContext(cmd.Context())
			release := announceInterrupt(cmd.Context(), errOut,
				"bench: interrupted: stopping the workers gracefully (interrupt again to stop them at once)")
			rep, err := bench.Run(cmd.Context(), cfg)
			release()
			if bar != nil {
				bar.clear()
			}
			if err != nil {
				return err
			}
			if asJSON {
				return rep.WriteJSON(out)
			}
			return rep.WriteTable(out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&scenarios, "scenarios", "", "scenarios to run, comma separated (default all): start, one-step, chain, diamond, map, latency, idle, delayed or a-e")
	f.StringVar(&cfg.Mode, "mode", bench.ModeBurnDown, "burn-down, continuous, growth or scale-out")
	f.IntVar(&cfg.Runs, "runs", bench.DefaultRuns, "runs per scenario in burn-down mode and for the start scenario")
	f.DurationVar(&cfg.Duration, "duration", bench.DefaultDuration, "measured time per scenario in continuous mode")
	f.DurationVar(&cfg.Warmup, "warmup", bench.DefaultWarmup, "warm-up excluded at the start of a continuous scenario and of the latency scenario (its runs reported apart)")
	f.IntVar(&cfg.Workers, "workers", bench.DefaultWorkers, "number of Go workers (each with its own connection pool)")
	f.IntVar(&cfg.MaxConcurrent, "max-concurrent", bench.DefaultMaxConcurrent, "handlers running at once per worker (WorkerConfig.MaxConcurrent)")
	f.IntVar(&cfg.BatchSize, "batch-size", bench.DefaultBatchSize, "messages read per poll (WorkerConfig.BatchSize)")
	f.IntVar(&cfg.PoolSize, "pool-size", bench.DefaultPoolSize, "connections per worker pool")
	f.IntVar(&cfg.StartBatch, "start-batch", bench.DefaultStartBatch, "runs started per call")
	f.BoolVar(&cfg.DeleteMessages, "delete-messages", false,
		"define the benchmark's flows with pgflow.DeleteTaskMessages (messages deleted at the claim, not archived)")
	f.IntVar(&cfg.Starters, "starters", bench.DefaultStarters, "clients starting runs at the same time in the start scenario")
	f.Float64SliceVar(&cfg.Rates, "rate", []float64{bench.DefaultRate},
		"arrival `rates` of the latency scenario, runs per second, comma separated: it runs once per rate")
	f.Lookup("rate").DefValue = fmt.Sprint(bench.DefaultRate) // pflag would print [20.000000]
	f.DurationVar(&cfg.LatencyDuration, "latency-duration", bench.DefaultLatencyDuration, "length of the latency scenario after its warm-up (--warmup): the runs whose latencies are reported")
	f.Float64SliceVar(&cfg.RatesOfOneStep, "rate-of-one-step", nil,
		"latency scenario's rates as `fractions` of the one-step scenario's tasks/s in the same run, comma separated (0.5: half the one-step throughput; 0.1,0.25,0.5: three loads; replaces --rate)")
	f.Lookup("rate-of-one-step").DefValue = "" // not "[]"
	f.DurationVar(&cfg.BaselineDuration, "baseline-duration", bench.DefaultBaselineDuration, "measured time of the baseline loop")
	f.DurationVar(&cfg.IdleDuration, "idle-duration", bench.DefaultIdleDuration, "how long the idle scenario watches a worker")
	f.IntSliceVar(&cfg.GrowthSizes, "growth-sizes", bench.DefaultGrowthSizes, "growth mode: completed runs in the tables at each measurement, ascending")
	f.IntVar(&cfg.Backlog, "backlog", bench.DefaultBacklog, "growth mode: queued runs kept while measuring")
	f.BoolVar(&cfg.Prune, "prune", false, "growth mode: also measure pruning on a given database (deletes every flow's finished runs older than a day)")
	f.IntSliceVar(&cfg.ScaleWorkers, "scale-workers", bench.DefaultScaleWorkers, "scale-out mode: numbers of worker processes, ascending")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&noBar, "no-progress", false, "do not draw the progress bar (it is drawn on a terminal only)")
	f.BoolVar(&verbose, "verbose", false, "show the workers' warnings")
	f.StringVar(&cpuProf, "cpuprofile", "", "write a Go CPU profile of the benchmark process (workers included) to this file")
	addSoakMode(cmd, opts) // --soak DURATION: the reliability soak (soak.go)
	cmd.AddCommand(newBenchWorkerCmd())
	return cmd
}

// newBenchWorkerCmd is the worker process the scale-out mode starts (hidden: it is driven through its stdin and
// stdout by `pgflow bench --mode scale-out`, see bench.WorkerProcessMain).
func newBenchWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "worker",
		Short: "One worker process of `pgflow bench --mode scale-out` (started by the benchmark itself)",
		Long: `Runs one pgflow.Worker for the scale-out benchmark's flow. The benchmark starts it with its settings in
$` + bench.EnvWorkerProcess + ` (JSON), reads a JSON line once the worker runs, writes "stats" to get the statements sent so
far, and closes stdin to stop it gracefully. Not meant to be run by hand.`,
		Example: `  pgflow bench --mode scale-out   # starts 'pgflow bench worker' processes itself`,
		Hidden:  true,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Getenv(bench.EnvWorkerProcess) == "" {
				return fmt.Errorf("bench worker: started by `pgflow bench --mode scale-out` only ($%s is not set)", bench.EnvWorkerProcess)
			}
			return bench.WorkerProcessMain(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}

// progressBar redraws one line on a terminal: scenario, phase, a bar and the count.
type progressBar struct {
	mu    sync.Mutex
	w     io.Writer
	last  time.Time
	width int
}

func (b *progressBar) update(p bench.Progress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Since(b.last) < 100*time.Millisecond && p.Done != p.Total {
		return
	}
	b.last = time.Now()
	const cells = 30
	filled := 0
	if p.Total > 0 {
		filled = int(min(p.Done, p.Total) * cells / p.Total)
	}
	line := fmt.Sprintf("%-9s %-14s [%s%s] %d/%d %s", p.Scenario, p.Phase,
		strings.Repeat("#", filled), strings.Repeat(".", cells-filled), p.Done, p.Total, p.Unit)
	pad := max(0, b.width-len(line))
	b.width = len(line)
	fmt.Fprintf(b.w, "\r%s%s", line, strings.Repeat(" ", pad))
}

func (b *progressBar) clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.width > 0 {
		fmt.Fprintf(b.w, "\r%s\r", strings.Repeat(" ", b.width))
	}
}
