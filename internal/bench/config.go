// Package bench measures pgflow-go end to end with the real Go worker: throughput (runs/s, tasks/s in the steady
// state), start-to-completion latency, and the database's cost per task (commits, WAL bytes, rows written),
// each also as a ratio to a baseline measured in the same run: the machine's commit rate for one-row
// insert+update transactions with two clients. `pgflow bench` and the Go benchmarks in the root package use it.
package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"
)

// Scenario names.
const (
	ScenarioOneStep = "one-step" // (a) one single step per run
	ScenarioChain   = "chain"    // (b) three single steps in a chain
	ScenarioDiamond = "diamond"  // (c) a → b, c → d
	ScenarioMap     = "map"      // (d) one root map step over 100 elements
	ScenarioLatency = "latency"  // (e) one-step runs started at a low fixed rate
	ScenarioStart   = "start"    // bulk start of one-step runs (no worker)
	ScenarioIdle    = "idle"     // an idle worker's statements per second
	ScenarioDelayed = "delayed"  // delayed work: due time → claim of start delays and RetryAfter retries
)

// AllScenarios lists every scenario in the order they run.
var AllScenarios = []string{ScenarioStart, ScenarioOneStep, ScenarioChain, ScenarioDiamond, ScenarioMap, ScenarioLatency, ScenarioDelayed, ScenarioIdle}

// scenarioLetters maps the letters to scenario names.
var scenarioLetters = map[string]string{"a": ScenarioOneStep, "b": ScenarioChain, "c": ScenarioDiamond, "d": ScenarioMap, "e": ScenarioLatency}

// Modes. Burn-down and continuous run the scenarios; growth and scale-out are measurements of their own (the
// scenarios are not run).
const (
	ModeBurnDown   = "burn-down"  // start all runs first, then work them
	ModeContinuous = "continuous" // keep a backlog of runs for a fixed duration
	ModeGrowth     = "growth"     // cost per task as completed history and queued backlog grow
	ModeScaleOut   = "scale-out"  // 1, 2, 4, 8 worker processes against one database
)

// MapElements is the size of the map scenario's input array.
const MapElements = 100

// Config is what one benchmark does. The zero value of a field means its default (see Defaults).
type Config struct {
	// DatabaseURL names the database to benchmark in. Empty starts a throwaway cluster with durability on
	// (fsync, synchronous_commit and full_page_writes as in production).
	DatabaseURL string
	// Scenarios to run, by name or by the letter (a-e). Empty means all.
	Scenarios []string
	// Mode is ModeBurnDown or ModeContinuous (throughput scenarios one-step, chain, diamond, map).
	Mode string
	// Runs is the number of runs per throughput scenario in burn-down mode and per bulk start scenario. The map
	// scenario starts Runs/MapElements runs (at least 2): the same number of tasks as the one-step scenario.
	Runs int
	// Duration is the measured time per throughput scenario in continuous mode, after Warmup.
	Duration time.Duration
	// Warmup is the time excluded at the beginning of a continuous scenario, and the latency scenario's warm-up:
	// runs that arrive during it are started at the same rate, but their latencies are reported apart.
	Warmup time.Duration
	// Workers is the number of Go workers (each a pgflow.Worker with its own pool) working a scenario.
	Workers int
	// MaxConcurrent and BatchSize configure each worker (WorkerConfig fields of the same name).
	MaxConcurrent int
	BatchSize     int
	// PoolSize is the maximum number of connections of each worker's pool.
	PoolSize int
	// StartBatch is the number of runs started per call when starting runs.
	StartBatch int
	// Starters is the number of clients that start runs at the same time (each its own connection). The default,
	// 2, matches the baseline's two clients.
	Starters int
	// DeleteMessages defines the benchmark's flows with pgflow.DeleteTaskMessages: a task's message is deleted at
	// its claim instead of archived when the task finishes.
	DeleteMessages bool
	// Rates are the arrival rates of the latency scenario in runs per second: it runs once per rate, in the order
	// given, each time LatencyDuration long after its warm-up. Default: DefaultRate.
	Rates           []float64
	LatencyDuration time.Duration
	// RatesOfOneStep, when set, replace Rates with fractions of the tasks per second the one-step scenario reached
	// earlier in the same run (0.5: "at half the one-step throughput"; 0.1, 0.25, 0.5: the latency at three loads
	// against one throughput and one baseline). Both scenarios must be among Scenarios.
	RatesOfOneStep []float64
	// BaselineDuration is how long the baseline transaction loop is measured (after a short warm-up).
	BaselineDuration time.Duration
	// IdleDuration is how long the idle scenario watches a worker with nothing to do.
	IdleDuration time.Duration
	// Logger receives the workers' warnings and errors. Default: discarded.
	Logger *slog.Logger
	// Progress, when set, is called with the progress of the running phase (a few times per second).
	Progress func(Progress)
	// GrowthSizes are the numbers of completed runs in the tables at which the growth mode measures, ascending
	// (history is pre-loaded up to each size). Backlog is the number of queued runs kept while it measures. At
	// each size Runs runs are started and Runs tasks worked.
	GrowthSizes []int
	Backlog     int
	// Prune measures pgflow.prune_data_older_than on the growth mode's history also in a given database (it
	// deletes every flow's finished runs older than a day there). On a throwaway cluster it is always measured.
	Prune bool
	// ScaleWorkers are the numbers of worker processes the scale-out mode measures with, ascending.
	ScaleWorkers []int
	// WorkerCommand starts one worker process of the scale-out mode (argv; the process is given its settings in
	// the environment, see WorkerProcessMain). `pgflow bench` passes its own binary with the hidden
	// `bench worker` subcommand.
	WorkerCommand []string
	// StopNow, when it ends, cuts the workers' graceful stop short (their handlers are cancelled and their tasks
	// released), e.g. on a second SIGINT. Nil: workers stop gracefully, each within its shutdown timeout.
	StopNow context.Context
}

// Progress describes the running phase.
type Progress struct {
	Scenario string
	Phase    string // "baseline", "starting runs", "working", "arrivals", "idle"
	Done     int64  // units finished (runs, or seconds for timed phases)
	Total    int64  // units expected (0 when unknown)
	Unit     string // "runs", "s"
}

// Defaults of Config.
const (
	DefaultRuns             = 10000
	DefaultDuration         = 10 * time.Second
	DefaultWarmup           = 2 * time.Second
	DefaultWorkers          = 2
	DefaultMaxConcurrent    = 400
	DefaultBatchSize        = 200
	DefaultPoolSize         = 8
	DefaultStartBatch       = 500
	DefaultStarters         = 2
	DefaultRate             = 20
	DefaultLatencyDuration  = 5 * time.Second
	DefaultBaselineDuration = 5 * time.Second
	DefaultIdleDuration     = 10 * time.Second
	DefaultBacklog          = 100000
)

// DefaultGrowthSizes and DefaultScaleWorkers are the defaults of Config.GrowthSizes and Config.ScaleWorkers.
var (
	DefaultGrowthSizes  = []int{0, 100000, 1000000}
	DefaultScaleWorkers = []int{1, 2, 4, 8}
)

// resolve applies defaults and validates c; errors name the bad field and value.
func (c Config) resolve() (Config, error) {
	var errs []error
	bad := func(field string, v any, rule string) {
		errs = append(errs, fmt.Errorf("bench: %s = %v: %s", field, v, rule))
	}
	intDefault := func(field string, v *int, def int) {
		switch {
		case *v < 0:
			bad(field, *v, "must be positive (0 means the default)")
		case *v == 0:
			*v = def
		}
	}
	durDefault := func(field string, v *time.Duration, def time.Duration) {
		switch {
		case *v < 0:
			bad(field, *v, "must be positive (0 means the default)")
		case *v == 0:
			*v = def
		}
	}
	intDefault("Runs", &c.Runs, DefaultRuns)
	intDefault("Workers", &c.Workers, DefaultWorkers)
	intDefault("MaxConcurrent", &c.MaxConcurrent, DefaultMaxConcurrent)
	intDefault("BatchSize", &c.BatchSize, DefaultBatchSize)
	intDefault("PoolSize", &c.PoolSize, DefaultPoolSize)
	intDefault("StartBatch", &c.StartBatch, DefaultStartBatch)
	intDefault("Starters", &c.Starters, DefaultStarters)
	intDefault("Backlog", &c.Backlog, DefaultBacklog)
	ascending := func(field string, v []int, def []int, least int) []int {
		if len(v) == 0 {
			return def
		}
		for i, x := range v {
			if x < least || (i > 0 && x <= v[i-1]) {
				bad(field, v, fmt.Sprintf("must be ascending numbers of at least %d (%d is not)", least, x))
				break
			}
		}
		return v
	}
	c.GrowthSizes = ascending("GrowthSizes", c.GrowthSizes, DefaultGrowthSizes, 0)
	c.ScaleWorkers = ascending("ScaleWorkers", c.ScaleWorkers, DefaultScaleWorkers, 1)
	durDefault("Duration", &c.Duration, DefaultDuration)
	durDefault("Warmup", &c.Warmup, DefaultWarmup)
	durDefault("LatencyDuration", &c.LatencyDuration, DefaultLatencyDuration)
	durDefault("BaselineDuration", &c.BaselineDuration, DefaultBaselineDuration)
	durDefault("IdleDuration", &c.IdleDuration, DefaultIdleDuration)
	finiteAboveZero := func(field string, v []float64) {
		for _, x := range v {
			if !(x > 0) || math.IsInf(x, 1) {
				bad(field, v, fmt.Sprintf("must be finite numbers above 0 (%g is not)", x))
				return
			}
		}
	}
	finiteAboveZero("Rates", c.Rates)
	finiteAboveZero("RatesOfOneStep", c.RatesOfOneStep)
	if len(c.Rates) == 0 {
		c.Rates = []float64{DefaultRate}
	}
	switch c.Mode {
	case "":
		c.Mode = ModeBurnDown
	case ModeBurnDown, ModeContinuous, ModeGrowth:
	case ModeScaleOut:
		if len(c.WorkerCommand) == 0 {
			bad("WorkerCommand", "[]", "the scale-out mode needs a command that starts a worker process")
		}
	default:
		bad("Mode", fmt.Sprintf("%q", c.Mode), fmt.Sprintf("must be %q, %q, %q or %q", ModeBurnDown, ModeContinuous, ModeGrowth, ModeScaleOut))
	}
	if c.Mode == ModeGrowth || c.Mode == ModeScaleOut {
		c.Scenarios = nil // measurements of their own
	} else if len(c.Scenarios) == 0 {
		c.Scenarios = AllScenarios
	} else {
		want := map[string]bool{}
		for _, s := range c.Scenarios {
			s = strings.ToLower(strings.TrimSpace(s))
			if n, ok := scenarioLetters[s]; ok {
				s = n
			}
			known := false
			for _, k := range AllScenarios {
				known = known || k == s
			}
			if !known {
				bad("Scenarios", fmt.Sprintf("%q", s), "unknown scenario; known: a-e or "+strings.Join(AllScenarios, ", "))
				continue
			}
			want[s] = true
		}
		c.Scenarios = nil
		for _, k := range AllScenarios { // always in the canonical order
			if want[k] {
				c.Scenarios = append(c.Scenarios, k)
			}
		}
	}
	if len(c.RatesOfOneStep) > 0 && !(slices.Contains(c.Scenarios, ScenarioOneStep) && slices.Contains(c.Scenarios, ScenarioLatency)) {
		bad("RatesOfOneStep", c.RatesOfOneStep, "needs the one-step and latency scenarios in the same run")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}
