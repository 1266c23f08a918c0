package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/backoff"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// Run runs the benchmark described by cfg and returns its report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	e, err := openEnv(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	defer e.close()
	return e.run(ctx, cfg)
}

func (e *env) run(ctx context.Context, cfg Config) (*Report, error) {
	rep := &Report{Started: time.Now(), Config: summarize(cfg)}
	m, err := e.machine(ctx)
	if err != nil {
		return nil, err
	}
	rep.Machine = m
	if !m.durable() {
		rep.Warnings = append(rep.Warnings, errNotDurable.Error())
	}
	progress := func(scenario string) func(Progress) {
		return func(p Progress) {
			if cfg.Progress != nil {
				p.Scenario = scenario
				cfg.Progress(p)
			}
		}
	}
	rep.Baseline, err = e.runBaseline(ctx, cfg.BaselineDuration, progress("baseline"))
	if err != nil {
		return nil, err
	}
	switch cfg.Mode {
	case ModeGrowth:
		if rep.Growth, err = e.runGrowth(ctx, cfg, progress("growth")); err != nil {
			return nil, fmt.Errorf("bench: growth: %w", err)
		}
	case ModeScaleOut:
		if rep.Scale, err = e.runScaleOut(ctx, cfg, progress("scale-out")); err != nil {
			return nil, fmt.Errorf("bench: scale-out: %w", err)
		}
	}
	var oneStepTasksPerSec float64
	for _, name := range cfg.Scenarios {
		var res []*Result // one per measurement: the idle scenario makes two, the latency scenario one per rate
		var err error
		switch name {
		case ScenarioStart:
			res, err = single(e.runStart(ctx, cfg, progress(name)))
		case ScenarioLatency:
			res, err = e.runLatencies(ctx, cfg, oneStepTasksPerSec, progress(name))
		case ScenarioDelayed:
			res, err = single(e.runDelayed(ctx, cfg, progress(name)))
		case ScenarioIdle:
			// The default configuration waits for notifications; PollOnly polls inside the database.
			res, err = single(e.runIdle(ctx, cfg, "default WorkerConfig", pgflow.WorkerConfig{}, progress(name)))
			if err == nil {
				var pollOnly *Result
				pollOnly, err = e.runIdle(ctx, cfg, "WorkerConfig{PollOnly: true}", pgflow.WorkerConfig{PollOnly: true}, progress(name))
				res = append(res, pollOnly)
			}
		default:
			res, err = single(e.runThroughput(ctx, cfg, name, progress(name)))
		}
		if err != nil {
			return nil, fmt.Errorf("bench: scenario %s: %w", name, err)
		}
		if name == ScenarioOneStep {
			oneStepTasksPerSec = res[0].TasksPerSec
		}
		for _, r := range res {
			rep.Results = append(rep.Results, *r)
		}
	}
	if len(cfg.Scenarios) > 0 || rep.Growth != nil || rep.Scale != nil {
		after, err := e.runBaseline(ctx, cfg.BaselineDuration, progress("baseline"))
		if err != nil {
			return nil, err
		}
		rep.Baseline = rep.Baseline.combine(after)
	}
	for i := range rep.Results {
		rep.Results[i].ratios(rep.Baseline)
	}
	rep.Growth.ratios(rep.Baseline)
	rep.Scale.ratios(rep.Baseline)
	rep.Finished = time.Now()
	return rep, nil
}

// single is the result of a scenario that measures once, as the scenario loop collects them.
func single(r *Result, err error) ([]*Result, error) {
	return []*Result{r}, err
}

// prepareFlow removes the scenario's flow with all its data (a previous benchmark in the same database) and
// compiles it afresh.
func (e *env) prepareFlow(ctx context.Context, bf *benchFlow) error {
	stmts, err := bf.flow.CompileSQL()
	if err != nil {
		return fmt.Errorf("compile flow %q: %w", bf.slug, err)
	}
	err = pgx.BeginFunc(ctx, e.mon, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `select pgflow.delete_flow_and_data($1::text)`, bf.slug); err != nil {
			return fmt.Errorf("delete flow %q: %w", bf.slug, err)
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("compile flow %q: %w", bf.slug, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return e.vacuum(ctx)
}

// vacuum vacuums and analyzes the engine's tables, so every scenario starts without the dead rows of the one
// before it (deleted flows, completed work) and with statistics that describe the tables as they are.
func (e *env) vacuum(ctx context.Context) error {
	if _, err := e.mon.Exec(ctx, `vacuum (analyze) pgflow.runs, pgflow.step_states, pgflow.step_tasks, pgflow.workers`); err != nil {
		return fmt.Errorf("vacuum the pgflow tables: %w", err)
	}
	return nil
}

// workerSet is the workers of one scenario, each with its own pool and client (like separate processes).
type workerSet struct {
	pools   []*pgxpool.Pool
	clients []*pgflow.Client
	workers []*pgflow.Worker
	done    chan error // one value per started worker once it has stopped
	n       int        // started workers whose value was not yet received from done
	stopNow context.Context
}

// startWorkers starts n workers for a fresh definition of the scenario's flow; it returns once they run.
func (e *env) startWorkers(ctx context.Context, cfg Config, scenario string, n int, wcfg pgflow.WorkerConfig) (*workerSet, error) {
	return e.startTracedWorkers(ctx, cfg, scenario, n, wcfg, nil)
}

func (e *env) startTracedWorkers(ctx context.Context, cfg Config, scenario string, n int, wcfg pgflow.WorkerConfig, tracer pgx.QueryTracer) (*workerSet, error) {
	ws := &workerSet{done: make(chan error, n), stopNow: cfg.StopNow}
	if ws.stopNow == nil {
		ws.stopNow = context.WithoutCancel(ctx)
	}
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	e.handled.Store(0)
	for i := range n {
		bf, err := flowFor(scenario, cfg.DeleteMessages)
		if err != nil {
			return nil, errors.Join(err, ws.stop())
		}
		bf.handled = &e.handled
		pool, err := newTracedPool(ctx, e.url, workerPoolApp(i), cfg.PoolSize, tracer)
		if err != nil {
			return nil, errors.Join(err, ws.stop())
		}
		ws.pools = append(ws.pools, pool)
		client, err := pgflow.NewClient(pool, &pgflow.ClientConfig{Logger: cfg.Logger})
		if err != nil {
			return nil, errors.Join(err, ws.stop())
		}
		ws.clients = append(ws.clients, client)
		c := wcfg
		c.Flows = []pgflow.WorkerFlow{{Flow: bf.flow}}
		c.Logger = cfg.Logger
		w, err := pgflow.NewWorker(client, &c)
		if err != nil {
			return nil, errors.Join(err, ws.stop())
		}
		if err := w.Start(startCtx); err != nil {
			return nil, errors.Join(fmt.Errorf("start worker %d: %w", i+1, err), ws.stop())
		}
		ws.workers = append(ws.workers, w)
		ws.n++
		go func() {
			<-w.Stopped()
			ws.done <- fmt.Errorf("worker %s stopped", w.ID())
		}()
	}
	return ws, nil
}

// stop shuts the workers down gracefully (each within its ShutdownTimeout) and closes their clients and pools.
func (ws *workerSet) stop() error {
	errs := make([]error, len(ws.workers))
	var wg sync.WaitGroup
	for i, w := range ws.workers {
		wg.Go(func() { errs[i] = w.Stop(ws.stopNow) })
	}
	wg.Wait()
	for range ws.n {
		_ = <-ws.done // "worker ... stopped": expected now
	}
	ws.n = 0
	ws.workers = nil
	for _, c := range ws.clients {
		c.Close()
	}
	ws.clients = nil
	for _, p := range ws.pools {
		p.Close()
	}
	ws.pools = nil
	return errors.Join(errs...)
}

func workerConfig(cfg Config) pgflow.WorkerConfig {
	return pgflow.WorkerConfig{
		MaxConcurrent:     cfg.MaxConcurrent,
		BatchSize:         cfg.BatchSize,
		MaxPollWait:       time.Second,
		PollInterval:      10 * time.Millisecond,
		HeartbeatInterval: 5 * time.Second,
		ShutdownTimeout:   30 * time.Second,
	}
}

// startRuns starts n runs of the flow in calls of up to batch runs each (each call is one transaction), with
// `starters` clients calling at the same time (the pool must allow that many connections).
func startRuns(ctx context.Context, db *pgxpool.Pool, bf *benchFlow, n, batch, starters int, tick func(done int)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		claimed  int // runs handed to a starter
		done     int // runs started
		firstErr error
		wg       sync.WaitGroup
	)
	for range max(1, starters) {
		wg.Go(func() {
			for {
				mu.Lock()
				k := min(batch, n-claimed)
				if k <= 0 || firstErr != nil {
					mu.Unlock()
					return
				}
				claimed += k
				mu.Unlock()
				err := startBatch(ctx, db, bf, k)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					mu.Unlock()
					return
				}
				done += k
				if tick != nil {
					tick(done)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return firstErr
}

// warmStarters makes each of the pool's n connections start one run of the flow in a transaction it rolls back,
// so that the timed starts run on connections that have made their plans, as an application's pooled connections
// have. A connection's first start_flows call compiles the functions and plans every statement they run (about
// 20 ms of server CPU on two cores, two thirds of a warm call of 500 runs); the burn-down scenarios leave the
// same warm-up out of their rates by measuring between the 10th and the 90th percentile of completions. The
// rolled-back starts still count in the cost figures (CPU, WAL), which cover everything from the pool's opening.
func warmStarters(ctx context.Context, pool *pgxpool.Pool, bf *benchFlow, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range max(1, n) {
		c, err := pool.Acquire(ctx) // held until all are taken: n distinct connections
		if err != nil {
			return fmt.Errorf("bench: warm the starters: %w", err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		tx, err := c.Begin(ctx)
		if err != nil {
			return fmt.Errorf("bench: warm the starters: %w", err)
		}
		_, err = sqlapi.StartFlows(ctx, tx, bf.slug, []json.RawMessage{bf.input}, nil)
		if rbErr := tx.Rollback(ctx); err == nil && rbErr != nil {
			err = rbErr
		}
		if err != nil {
			return fmt.Errorf("bench: warm the starters: %w", err)
		}
	}
	return nil
}

// startBatch starts k runs in one transaction with pgflow.start_flows.
func startBatch(ctx context.Context, db *pgxpool.Pool, bf *benchFlow, k int) error {
	inputs := make([]json.RawMessage, k)
	for i := range inputs {
		inputs[i] = bf.input
	}
	if _, err := sqlapi.StartFlows(ctx, db, bf.slug, inputs, nil); err != nil {
		return fmt.Errorf("start %d runs of %q: %w", k, bf.slug, err)
	}
	return nil
}

// runCounts reads how many runs of the flow are completed and failed.
func (e *env) runCounts(ctx context.Context, slug string) (completed, failed int64, err error) {
	err = e.mon.QueryRow(ctx, `select count(*) filter (where r.status = 'completed'), count(*) filter (where r.status = 'failed')
		from pgflow.runs as r where r.flow_slug = $1::text`, slug).Scan(&completed, &failed)
	e.monQueries.Add(1)
	return completed, failed, err
}

// waitRuns waits until total runs of the flow have finished, reporting progress. The database says when they
// have, but counting a flow's runs costs the server milliseconds per count while the workers it measures need every
// CPU (11 ms a count at 10,000 runs during a burn-down, some 7 % of two cores at ten counts a second). So until the
// in-process workers' handlers have run as often as the runs have tasks (env.handled), it counts only every
// waitRunsCheck, for a flow whose tasks end without their handler (or another process's workers); from then on,
// every waitRunsTick until the last results are recorded.
func (e *env) waitRuns(ctx context.Context, bf *benchFlow, total int64, ws *workerSet, tick func(done int64)) error {
	t := time.NewTicker(waitRunsTick)
	defer t.Stop()
	handlers := total * int64(bf.tasksPerRun)
	var counted time.Time
	for {
		if now := time.Now(); e.handled.Load() >= handlers || now.Sub(counted) >= waitRunsCheck {
			counted = now
			c, f, err := e.runCounts(ctx, bf.slug)
			if err != nil {
				return err
			}
			if tick != nil {
				tick(c + f)
			}
			if c+f >= total {
				return nil
			}
		} else if tick != nil {
			tick(min(total, e.handled.Load()/int64(bf.tasksPerRun)))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-ws.done:
			ws.n--
			return fmt.Errorf("a worker stopped while runs were pending: %v", err)
		case <-t.C:
		}
	}
}

const (
	waitRunsTick  = 100 * time.Millisecond // progress, and counts once the handlers are done
	waitRunsCheck = 2 * time.Second        // counts before that
)

// measureCost brackets fn with exact counter snapshots: every benchmark connection is closed before each read.
func (e *env) measureCost(ctx context.Context, fn func() error) (delta, error) {
	if err := e.flushStats(ctx); err != nil {
		return delta{}, err
	}
	before, err := e.snapshot(ctx)
	if err != nil {
		return delta{}, err
	}
	e.monQueries.Store(0)
	if err := fn(); err != nil {
		return delta{}, err
	}
	if err := e.flushStats(ctx); err != nil {
		return delta{}, err
	}
	after, err := e.snapshot(ctx)
	if err != nil {
		return delta{}, err
	}
	d := before.to(after)
	d.commits -= e.monQueries.Load() + 1 // the monitor's own polls and the first snapshot's read
	return d, nil
}

// runThroughput runs a throughput scenario (one-step, chain, diamond, map) in the configured mode.
func (e *env) runThroughput(ctx context.Context, cfg Config, name string, progress func(Progress)) (*Result, error) {
	if cfg.Mode == ModeContinuous {
		return e.runContinuous(ctx, cfg, name, progress)
	}
	bf, err := flowFor(name, cfg.DeleteMessages)
	if err != nil {
		return nil, err
	}
	if err := e.prepareFlow(ctx, bf); err != nil {
		return nil, err
	}
	runs := cfg.Runs
	if name == ScenarioMap {
		runs = max(2, cfg.Runs/MapElements)
	}
	res := &Result{Scenario: name, Mode: ModeBurnDown, Runs: runs, Tasks: runs * bf.tasksPerRun, Workers: cfg.Workers,
		MaxConcurrent: cfg.MaxConcurrent, BatchSize: cfg.BatchSize}
	if err := startRuns(ctx, e.mon, bf, runs, cfg.StartBatch, 1, func(done int) {
		progress(Progress{Phase: "starting runs", Done: int64(done), Total: int64(runs), Unit: "runs"})
	}); err != nil {
		return nil, err
	}
	if err := e.vacuum(ctx); err != nil { // statistics that know the backlog
		return nil, err
	}
	var elapsed time.Duration
	cost, err := e.measureCost(ctx, func() error {
		ws, err := e.startWorkers(ctx, cfg, name, cfg.Workers, workerConfig(cfg))
		if err != nil {
			return err
		}
		start := time.Now()
		werr := e.waitRuns(ctx, bf, int64(runs), ws, func(done int64) {
			progress(Progress{Phase: "working", Done: done, Total: int64(runs), Unit: "runs"})
		})
		elapsed = time.Since(start)
		return errors.Join(werr, ws.stop())
	})
	if err != nil {
		return nil, err
	}
	res.Seconds = elapsed.Seconds()
	if err := e.collect(ctx, bf, res, time.Time{}, time.Time{}); err != nil {
		return nil, err
	}
	res.setCost(cost)
	return res, nil
}

// runContinuous keeps a backlog of runs for Warmup + Duration and measures the window after the warm-up.
func (e *env) runContinuous(ctx context.Context, cfg Config, name string, progress func(Progress)) (*Result, error) {
	bf, err := flowFor(name, cfg.DeleteMessages)
	if err != nil {
		return nil, err
	}
	if err := e.prepareFlow(ctx, bf); err != nil {
		return nil, err
	}
	res := &Result{Scenario: name, Mode: ModeContinuous, Workers: cfg.Workers, MaxConcurrent: cfg.MaxConcurrent, BatchSize: cfg.BatchSize}
	// The backlog kept queued: enough runs for every worker to fill its slots twice, at least one start batch.
	backlog := int64(max(cfg.StartBatch, 2*cfg.Workers*cfg.MaxConcurrent))
	if name == ScenarioMap {
		backlog = max(2, backlog/MapElements)
	}
	var windowStart, windowEnd time.Time
	var started int64
	cost, err := e.measureCost(ctx, func() error {
		feeder, err := newPool(ctx, e.url, workerApp+"-feeder", 2)
		if err != nil {
			return err
		}
		defer feeder.Close()
		ws, err := e.startWorkers(ctx, cfg, name, cfg.Workers, workerConfig(cfg))
		if err != nil {
			return err
		}
		begin := time.Now()
		total := cfg.Warmup + cfg.Duration
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		var loopErr error
		for loopErr == nil {
			now := time.Now()
			if windowStart.IsZero() && now.Sub(begin) >= cfg.Warmup {
				windowStart = e.dbNow(ctx)
			}
			if now.Sub(begin) >= total {
				windowEnd = e.dbNow(ctx)
				break
			}
			// Runs finished, as the handlers count them (a run's results are recorded a moment later): counting
			// them in the database would cost the server more the longer the scenario runs (see waitRuns).
			finished := e.handled.Load() / int64(bf.tasksPerRun)
			progress(Progress{Phase: "working", Done: int64(now.Sub(begin) / time.Second), Total: int64(total / time.Second), Unit: "s"})
			if pending := started - finished; pending < backlog {
				k := int(min(int64(cfg.StartBatch), backlog-pending))
				if name == ScenarioMap {
					k = int(backlog - pending)
				}
				if err := startBatch(ctx, feeder, bf, k); err != nil {
					loopErr = err
					break
				}
				started += int64(k)
				continue
			}
			select {
			case <-ctx.Done():
				loopErr = ctx.Err()
			case err := <-ws.done:
				ws.n--
				loopErr = fmt.Errorf("a worker stopped: %v", err)
			case <-t.C:
			}
		}
		feeder.Close()
		return errors.Join(loopErr, ws.stop())
	})
	if err != nil {
		return nil, err
	}
	res.Seconds = windowEnd.Sub(windowStart).Seconds()
	if err := e.collect(ctx, bf, res, windowStart, windowEnd); err != nil {
		return nil, err
	}
	res.Runs, res.Tasks = int(started), int(started)*bf.tasksPerRun
	res.setCost(cost)
	return res, nil
}

// dbNow reads the database clock (task and run timestamps are the database's).
func (e *env) dbNow(ctx context.Context) time.Time {
	var t time.Time
	if err := e.mon.QueryRow(ctx, `select clock_timestamp()`).Scan(&t); err != nil {
		return time.Now()
	}
	e.monQueries.Add(1)
	return t
}

// collect reads the scenario's outcome from the database: counts, steady-state rates and latencies. With a
// zero window the steady state is the middle 80% of the completions (burn-down); otherwise the window's.
func (e *env) collect(ctx context.Context, bf *benchFlow, res *Result, from, to time.Time) error {
	var taskTimes []time.Time
	rows, err := e.mon.Query(ctx, `select t.completed_at from pgflow.step_tasks as t
		where t.flow_slug = $1::text and t.status = 'completed' order by t.completed_at`, bf.slug)
	if err != nil {
		return fmt.Errorf("read task completions: %w", err)
	}
	if taskTimes, err = pgx.CollectRows(rows, pgx.RowTo[time.Time]); err != nil {
		return fmt.Errorf("read task completions: %w", err)
	}
	type runTimes struct {
		started, completed time.Time
	}
	rows, err = e.mon.Query(ctx, `select r.started_at, r.completed_at from pgflow.runs as r
		where r.flow_slug = $1::text and r.status = 'completed' order by r.completed_at`, bf.slug)
	if err != nil {
		return fmt.Errorf("read run completions: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (runTimes, error) {
		var x runTimes
		err := r.Scan(&x.started, &x.completed)
		return x, err
	})
	if err != nil {
		return fmt.Errorf("read run completions: %w", err)
	}
	if err := e.mon.QueryRow(ctx, `select count(*) filter (where r.status = 'failed'), count(*) filter (where r.status = 'started')
		from pgflow.runs as r where r.flow_slug = $1::text`, bf.slug).Scan(&res.RunsFailed, &res.RunsUnfinished); err != nil {
		return fmt.Errorf("count runs: %w", err)
	}
	res.RunsCompleted, res.TasksCompleted = len(runs), len(taskTimes)
	runEnds := make([]time.Time, len(runs))
	for i, r := range runs {
		runEnds[i] = r.completed
	}
	var lat []time.Duration
	if from.IsZero() {
		res.TasksPerSec = steadyRate(taskTimes)
		res.RunsPerSec = steadyRate(runEnds)
		for _, r := range runs {
			lat = append(lat, r.completed.Sub(r.started))
		}
	} else {
		res.TasksPerSec = windowRate(taskTimes, from, to)
		res.RunsPerSec = windowRate(runEnds, from, to)
		for _, r := range runs {
			if !r.started.Before(from) && r.completed.Before(to) {
				lat = append(lat, r.completed.Sub(r.started))
			}
		}
	}
	res.setLatency(lat, "database")
	return nil
}

// steadyRate is the rate of events between the 10th and the 90th percentile of their times (the warm-up and
// the tail excluded); with fewer than 10 events, the rate over all of them.
func steadyRate(ts []time.Time) float64 {
	n := len(ts)
	if n < 2 {
		return 0
	}
	lo, hi := 0, n-1
	if n >= 10 {
		lo, hi = n/10, n-1-n/10
	}
	span := ts[hi].Sub(ts[lo]).Seconds()
	if span <= 0 {
		return 0
	}
	return float64(hi-lo) / span
}

func windowRate(ts []time.Time, from, to time.Time) float64 {
	i := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(from) })
	j := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(to) })
	if s := to.Sub(from).Seconds(); s > 0 {
		return float64(j-i) / s
	}
	return 0
}

// runStart measures starting runs in bulk (no worker runs; the runs stay queued and are deleted afterwards).
func (e *env) runStart(ctx context.Context, cfg Config, progress func(Progress)) (*Result, error) {
	bf, err := flowFor(ScenarioStart, cfg.DeleteMessages)
	if err != nil {
		return nil, err
	}
	if err := e.prepareFlow(ctx, bf); err != nil {
		return nil, err
	}
	res := &Result{Scenario: ScenarioStart, Mode: ModeBurnDown, Runs: cfg.Runs, StartBatch: cfg.StartBatch, Starters: cfg.Starters}
	var elapsed time.Duration
	cost, err := e.measureCost(ctx, func() error {
		pool, err := newPool(ctx, e.url, starterApp, cfg.Starters)
		if err != nil {
			return err
		}
		defer pool.Close()
		if err := warmStarters(ctx, pool, bf, cfg.Starters); err != nil {
			return err
		}
		start := time.Now()
		err = startRuns(ctx, pool, bf, cfg.Runs, cfg.StartBatch, cfg.Starters, func(done int) {
			progress(Progress{Phase: "starting runs", Done: int64(done), Total: int64(cfg.Runs), Unit: "runs"})
		})
		elapsed = time.Since(start)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := e.mon.QueryRow(ctx, `select count(*) from pgflow.runs as r where r.flow_slug = $1::text and r.status = 'started'`, bf.slug).Scan(&res.RunsUnfinished); err != nil {
		return nil, fmt.Errorf("count started runs: %w", err)
	}
	res.Seconds = elapsed.Seconds()
	res.RunsPerSec = float64(cfg.Runs) / elapsed.Seconds()
	res.setCostPerRun(cost)
	if _, err := e.mon.Exec(ctx, `select pgflow.delete_flow_and_data($1::text)`, bf.slug); err != nil {
		return nil, fmt.Errorf("delete flow %q: %w", bf.slug, err)
	}
	return res, nil
}

// latencyStarters is the number of connections that start the latency scenario's runs. Every arrival is its own
// goroutine calling Client.StartRunJSON at its scheduled time, as every request of a service would be, whatever
// the starts cost (an open loop); concurrent starts share the connections and, through the client's coalescing,
// their transactions. (Until v0.20.0 the arrivals were taken by 16 goroutines, so at most 16 starts were in
// flight and the scenario could not offer more than about 700 runs per second on two cores, whatever it asked:
// the latency it reported above that was the benchmark's own queue.)
const latencyStarters = 16

// maxArrivalsInFlight bounds the arrivals whose starts have not returned: an arrival beyond it waits for one to
// return (and its latency counts the wait), so a stalled database cannot make the benchmark start goroutines
// without end.
const maxArrivalsInFlight = 10000

// latencyBook pairs each run's scheduled arrival with its run:completed event. The event can arrive before the
// start call has returned the run's id (a fast run on a slow start), so both sides may be first. Runs that arrived
// during the warm-up are paired too, but their latencies are kept apart (warm), out of the reported percentiles.
type latencyBook struct {
	mu      sync.Mutex
	arrived map[string]arrival        // run id -> scheduled arrival, completion not seen yet
	early   map[string]time.Time      // run id -> completion seen, start call not returned yet
	lat     []time.Duration           // runs that arrived after the warm-up
	warm    []time.Duration           // runs that arrived during it
	ends    map[string]clientRunTimes // runs that arrived after the warm-up: their client-side times, for the stages
}

// clientRunTimes are a run's two client-side times: its scheduled arrival and the arrival of its run:completed event.
type clientRunTimes struct {
	arrived, completed time.Time
}

type arrival struct {
	at     time.Time
	warmUp bool
}

func newLatencyBook() *latencyBook {
	return &latencyBook{arrived: map[string]arrival{}, early: map[string]time.Time{}, ends: map[string]clientRunTimes{}}
}

func (b *latencyBook) started(id string, a arrival) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if done, ok := b.early[id]; ok {
		delete(b.early, id)
		b.record(id, a, done)
		return
	}
	b.arrived[id] = a
}

func (b *latencyBook) completed(id string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a, ok := b.arrived[id]; ok {
		delete(b.arrived, id)
		b.record(id, a, at)
		return
	}
	b.early[id] = at
}

func (b *latencyBook) record(id string, a arrival, done time.Time) {
	if a.warmUp {
		b.warm = append(b.warm, done.Sub(a.at))
	} else {
		b.lat = append(b.lat, done.Sub(a.at))
		b.ends[id] = clientRunTimes{arrived: a.at, completed: done}
	}
}

// count is the number of runs paired so far, warm-up included.
func (b *latencyBook) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.lat) + len(b.warm)
}

// runLatencies runs the latency scenario once per rate: cfg.Rates, or cfg.RatesOfOneStep of the one-step
// scenario's tasks per second in this run (it ran before: the scenarios run in their canonical order). Each run
// starts from a fresh flow and waits for all its runs, so one rate's backlog does not spill into the next.
func (e *env) runLatencies(ctx context.Context, cfg Config, oneStepTasksPerSec float64, progress func(Progress)) ([]*Result, error) {
	rates := cfg.Rates
	var bases []string // how each rate was chosen, when the fractions chose them
	if len(cfg.RatesOfOneStep) > 0 {
		rates = make([]float64, 0, len(cfg.RatesOfOneStep))
		for _, f := range cfg.RatesOfOneStep {
			rates = append(rates, max(1, math.Round(f*oneStepTasksPerSec)))
			bases = append(bases, fmt.Sprintf("%g × one-step's %.0f tasks/s", f, oneStepTasksPerSec))
		}
	}
	var out []*Result
	for i, rate := range rates {
		res, err := e.runLatency(ctx, cfg, rate, progress)
		if err != nil {
			return nil, fmt.Errorf("at %g runs/s: %w", rate, err)
		}
		if bases != nil {
			res.RateBasis = bases[i]
		}
		out = append(out, res)
	}
	return out, nil
}

// runLatency starts one-step runs at a fixed rate (an open loop over latencyStarters connections) for cfg.Warmup
// and then cfg.LatencyDuration, and measures start-to-completion latency as a client sees it: from the run's
// scheduled arrival (so time spent waiting for a free starter counts) to its run:completed event (LISTEN on the
// 'pgflow' channel), with the database's timestamps as a fallback. The percentiles are those of the runs that
// arrived after the warm-up: the engine's steady state at that rate. The first second of a fresh set of
// connections plans and compiles every function once per connection, and at a high rate the backlog that leaves
// takes a second or two to drain; that cold start is reported apart (WarmUp). The arrival rate achieved is
// reported next to the one asked for.
func (e *env) runLatency(ctx context.Context, cfg Config, rate float64, progress func(Progress)) (*Result, error) {
	bf, err := flowFor(ScenarioLatency, cfg.DeleteMessages)
	if err != nil {
		return nil, err
	}
	if err := e.prepareFlow(ctx, bf); err != nil {
		return nil, err
	}
	warmUp := int(rate * cfg.Warmup.Seconds())
	n := warmUp + max(1, int(rate*cfg.LatencyDuration.Seconds()))
	res := &Result{Scenario: ScenarioLatency, Mode: fmt.Sprintf("%g runs/s", rate), Runs: n, Tasks: n, Workers: cfg.Workers,
		MaxConcurrent: cfg.MaxConcurrent, BatchSize: cfg.BatchSize, Starters: latencyStarters}
	book := newLatencyBook()
	listener, err := connect(ctx, e.url, "pgflow-listener-bench") // outside appPrefix: it stays open across flushes
	if err != nil {
		return nil, err
	}
	defer listener.Close(context.WithoutCancel(ctx))
	if _, err := listener.Exec(ctx, `listen pgflow`); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	lctx, stopListen := context.WithCancel(ctx)
	listenDone := make(chan struct{})
	go func() {
		defer close(listenDone)
		for {
			note, err := listener.WaitForNotification(lctx)
			if err != nil {
				return
			}
			now := time.Now()
			// Three of a one-step run's four events are not its run:completed: skip them before decoding (at a
			// few thousand runs a second the decoding was a tenth of this process's CPU). The decoded fields
			// decide; this only saves work.
			if !strings.Contains(note.Payload, `"run:completed"`) {
				continue
			}
			var ev struct {
				EventType string `json:"event_type"`
				RunID     string `json:"run_id"`
				FlowSlug  string `json:"flow_slug"`
			}
			if json.Unmarshal([]byte(note.Payload), &ev) != nil || ev.EventType != "run:completed" || ev.FlowSlug != bf.slug {
				continue
			}
			book.completed(ev.RunID, now)
		}
	}()
	defer func() { stopListen(); <-listenDone }()

	roles := map[string]string{starterApp: roleStarts}
	for i := range cfg.Workers {
		roles[workerPoolApp(i)] = roleWorkers
	}
	var byRole map[string]time.Duration
	cost, err := e.measureCost(ctx, func() error {
		ws, err := e.startWorkers(ctx, cfg, ScenarioLatency, cfg.Workers, workerConfig(cfg))
		if err != nil {
			return err
		}
		starter, err := newPool(ctx, e.url, starterApp, latencyStarters)
		if err != nil {
			return errors.Join(err, ws.stop())
		}
		defer starter.Close()
		// Runs start as an application starts them: Client.StartRun, one call per arrival (concurrent calls of
		// one flow share a transaction when they meet, see Client.StartRunJSON).
		client, err := pgflow.NewClient(starter, &pgflow.ClientConfig{Logger: cfg.Logger})
		if err != nil {
			return errors.Join(err, ws.stop())
		}
		defer client.Close()
		arrivals, elapsed, loopErr := offerArrivals(ctx, n, rate, func(ctx context.Context, i int, at time.Time) error {
			run, err := client.StartRunJSON(ctx, bf.slug, bf.input, nil)
			if err != nil {
				return fmt.Errorf("start a run: %w", err)
			}
			book.started(run.ID, arrival{at: at, warmUp: i < warmUp})
			return nil
		}, func(done int) {
			progress(Progress{Phase: "arrivals", Done: int64(done), Total: int64(n), Unit: "runs"})
		})
		if elapsed > 0 {
			res.ArrivalRate = float64(arrivals) / elapsed.Seconds()
		}
		if loopErr == nil {
			loopErr = e.waitRuns(ctx, bf, int64(n), ws, nil)
		}
		if loopErr == nil && e.postmaster != 0 {
			// The starter's and the workers' connections were opened in this window and are still open.
			byRole, loopErr = e.backendsCPU(ctx, roles)
		}
		return errors.Join(loopErr, ws.stop())
	})
	if err != nil {
		return nil, err
	}
	if err := e.collect(ctx, bf, res, time.Time{}, time.Time{}); err != nil {
		return nil, err
	}
	// Give the listener a moment for the last events, then prefer the client-side latencies when complete.
	deadline := time.Now().Add(2 * time.Second)
	for book.count() < res.RunsCompleted && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	book.mu.Lock()
	paired := len(book.lat)+len(book.warm) == res.RunsCompleted && len(book.lat) > 0
	if paired {
		res.setLatency(book.lat, "client (scheduled arrival to run:completed event)")
		res.WarmUp = warmUpOf(cfg.Warmup, book.warm)
	} else if res.LatencySource != "" {
		res.LatencySource += ", warm-up included"
	}
	ends := book.ends // every run is paired: no event writes to it any more
	book.mu.Unlock()
	// The stages put the server's timestamps between the client's: only meaningful on one clock.
	if paired && e.postmaster != 0 {
		if res.Stages, err = e.latencyStages(ctx, bf.slug, ends); err != nil {
			return nil, err
		}
	}
	res.Seconds = cfg.LatencyDuration.Seconds()
	res.setCost(cost)
	if byRole != nil && res.TasksCompleted > 0 {
		res.ServerCPUSplit = splitServerCPU(byRole, res.TasksCompleted)
	}
	if res.ServerCPUMicrosPer > 0 && res.ArrivalRate > 0 {
		res.CPUShare = (res.ServerCPUMicrosPer + res.WorkerCPUMicrosPer) * res.ArrivalRate / 1e6 / float64(runtime.NumCPU())
	}
	return res, nil
}

// offerArrivals calls start n times at rate per second, each at its scheduled time (start i at i/rate after the
// first, given i and that time) in a goroutine of its own (at most maxArrivalsInFlight at once): a slow start
// delays no other arrival. It returns how many starts returned, the time from the first scheduled arrival to the
// last start's return, and the first error (which stops further arrivals).
func offerArrivals(ctx context.Context, n int, rate float64, start func(ctx context.Context, i int, at time.Time) error,
	progress func(done int)) (int, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		done     int
		last     time.Time
	)
	inFlight := make(chan struct{}, maxArrivalsInFlight)
	begin := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := range n {
		at := begin.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			if backoff.Sleep(ctx, d) != nil {
				break
			}
		}
		select {
		case inFlight <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-inFlight }()
			err := start(ctx, i, at)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
				cancel()
			}
			if err == nil {
				done++
				last = time.Now()
				if done%100 == 0 || done == n {
					progress(done)
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if done == 0 {
		return 0, 0, firstErr
	}
	return done, last.Sub(begin), firstErr
}

// runIdle measures what a worker with nothing to do (configured by wcfg) costs the database: the statements it
// sends per second, and the database's transactions and WAL per second.
func (e *env) runIdle(ctx context.Context, cfg Config, mode string, wcfg pgflow.WorkerConfig, progress func(Progress)) (*Result, error) {
	bf, err := flowFor(ScenarioIdle, cfg.DeleteMessages)
	if err != nil {
		return nil, err
	}
	if err := e.prepareFlow(ctx, bf); err != nil {
		return nil, err
	}
	res := &Result{Scenario: ScenarioIdle, Mode: mode, Workers: 1}
	var counter statementCounter
	ws, err := e.startTracedWorkers(ctx, cfg, ScenarioIdle, 1, wcfg, &counter)
	if err != nil {
		return nil, err
	}
	defer ws.stop()
	// Let the startup settle, then count what the worker sends over the window: statements counted on its
	// connections (its pool and its listener), and the database's transactions (every statement outside an
	// explicit transaction is one; the worker's pool stays open, so these counters lag by about a second at
	// each end of a window of several seconds).
	if err := backoff.Sleep(ctx, time.Second); err != nil {
		return nil, err
	}
	before, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	sent := counter.n.Load()
	start := time.Now()
	end := start.Add(cfg.IdleDuration)
	for time.Now().Before(end) {
		if err := backoff.Sleep(ctx, min(time.Second, time.Until(end))); err != nil {
			return nil, err
		}
		progress(Progress{Phase: "idle", Done: int64(time.Since(start) / time.Second), Total: int64(cfg.IdleDuration / time.Second), Unit: "s"})
	}
	sent = counter.n.Load() - sent
	secs := time.Since(start).Seconds()
	if err := backoff.Sleep(ctx, 1500*time.Millisecond); err != nil { // idle backends flush their counters
		return nil, err
	}
	after, err := e.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	d := before.to(after)
	res.Seconds = secs
	res.IdleStatementsPerSec = float64(sent) / secs
	res.IdleTransactionsPerSec = float64(d.commits-1) / after.at.Sub(before.at).Seconds() // minus the first snapshot's read
	res.IdleWALBytesPerSec = float64(d.walBytes) / after.at.Sub(before.at).Seconds()
	return res, ws.stop()
}
