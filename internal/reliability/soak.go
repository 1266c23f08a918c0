package reliability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgcluster"
	"github.com/pgflow-go/pgflow/schema"
)

// SoakConfig configures Soak. Zero values mean the defaults.
type SoakConfig struct {
	DatabaseURL   string        // empty: a throwaway cluster (removed at the end)
	Duration      time.Duration // how long runs keep being started; required
	Workers       int           // in-process workers, split between the two flows; default 4 (at least 2)
	MaxConcurrent int           // per worker; default 10
	Backlog       int           // unfinished runs the load keeps in the database; default 200
	FaultEvery    time.Duration // terminate every worker session this often (pg_terminate_backend); 0: 15 s, <0: never
	FailPercent   int           // share of one-step runs whose first attempt fails (retried); default 10, <0: none
	CaptureEvents bool          // install a realtime.send that records events (always on a throwaway cluster)
	DrainTimeout  time.Duration // how long to wait for the backlog after the load stops; default 3 min
	Logger        *slog.Logger  // the workers' logs; default: discarded
	// StopNow, when it ends, cuts the workers' graceful stop short (their handlers are cancelled and their tasks
	// released), e.g. on a second SIGINT. Nil: the workers stop gracefully, each within its shutdown timeout.
	StopNow context.Context
}

// SoakReport is what Soak found.
type SoakReport struct {
	Duration    time.Duration `json:"duration_ns"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	RunsStarted int64         `json:"runs_started"`
	Faults      int           `json:"faults_injected"`
	Terminated  int64         `json:"sessions_terminated"`
	Flows       []Invariants  `json:"flows"`
	Problems    []string      `json:"problems"` // empty when every invariant holds
	OK          bool          `json:"ok"`
}

// soakApp is the application_name of the soak workers' sessions (faults terminate exactly these).
const soakApp = "pgflow-soak-worker"

// Soak runs a bounded soak test: workers of the two reliability flows work a steady backlog of runs (some of
// whose first attempts fail) for cfg.Duration while their sessions are terminated every cfg.FaultEvery; then the
// load stops, the backlog drains and the invariants of both flows are checked: every run completed, every
// completed task holds the result of an invocation of that very task, no duplicated terminal or step events
// (when events are captured), no message left. The report lists every broken invariant.
func Soak(ctx context.Context, cfg SoakConfig) (SoakReport, error) {
	if cfg.Duration <= 0 {
		return SoakReport{}, fmt.Errorf("reliability: soak duration must be positive, got %s", cfg.Duration)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if cfg.Workers < 2 {
		return SoakReport{}, fmt.Errorf("reliability: soak needs at least 2 workers (one per flow), got %d", cfg.Workers)
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 10
	}
	if cfg.Backlog <= 0 {
		cfg.Backlog = 200
	}
	if cfg.FaultEvery == 0 {
		cfg.FaultEvery = 15 * time.Second
	}
	if cfg.FailPercent == 0 {
		cfg.FailPercent = 10
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 3 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}

	url := cfg.DatabaseURL
	if url == "" {
		c, err := pgcluster.Start(ctx, pgcluster.Options{})
		if err != nil {
			return SoakReport{}, err
		}
		defer c.Stop()
		admin, err := pgx.Connect(ctx, c.AdminURL())
		if err != nil {
			return SoakReport{}, fmt.Errorf("reliability: connect to the throwaway cluster: %w", err)
		}
		_, err = admin.Exec(ctx, `create database soak`)
		admin.Close(ctx)
		if err != nil {
			return SoakReport{}, fmt.Errorf("reliability: create database soak: %w", err)
		}
		url = c.URL("soak")
		cfg.CaptureEvents = true
	}
	if err := prepareSoakDB(ctx, url, cfg.CaptureEvents); err != nil {
		return SoakReport{}, err
	}
	pool, err := soakPool(ctx, url, "pgflow-soak", 6)
	if err != nil {
		return SoakReport{}, err
	}
	defer pool.Close()

	// Workers, each with a pool and a client of its own (like separate processes), half of them per flow.
	stopNow := cfg.StopNow
	if stopNow == nil {
		stopNow = context.WithoutCancel(ctx)
	}
	var (
		workers []*pgflow.Worker
		clients []*pgflow.Client
		pools   []*pgxpool.Pool
	)
	stopWorkers := func() error {
		errs := make([]error, len(workers))
		var wg sync.WaitGroup
		for i, w := range workers {
			wg.Go(func() {
				if err := w.Stop(stopNow); err != nil {
					errs[i] = fmt.Errorf("reliability: stop soak worker %s: %w", w.ID(), err)
				}
			})
		}
		wg.Wait()
		workers = nil
		return errors.Join(errs...)
	}
	defer func() {
		_ = stopWorkers()
		for _, c := range clients {
			c.Close()
		}
		for _, p := range pools {
			p.Close()
		}
	}()
	rec := DBRecorder{DB: pool}
	for i := range cfg.Workers {
		slug := OneStepFlow
		if i%2 == 1 {
			slug = MapFlow
		}
		wp, err := soakPool(ctx, url, soakApp, int32(cfg.MaxConcurrent+4))
		if err != nil {
			return SoakReport{}, err
		}
		pools = append(pools, wp)
		client, err := pgflow.NewClient(wp, &pgflow.ClientConfig{Logger: cfg.Logger})
		if err != nil {
			return SoakReport{}, err
		}
		clients = append(clients, client)
		flow, err := NewFlow(slug, Handlers{Recorder: rec})
		if err != nil {
			return SoakReport{}, err
		}
		w, err := pgflow.NewWorker(client, &pgflow.WorkerConfig{
			Flows:               []pgflow.WorkerFlow{{Flow: flow}},
			MaxConcurrent:       cfg.MaxConcurrent,
			MaxPollWait:         time.Second,
			PollInterval:        20 * time.Millisecond,
			HeartbeatInterval:   time.Second,
			ShutdownTimeout:     10 * time.Second,
			MaintenanceInterval: time.Second,
			Logger:              cfg.Logger,
		})
		if err != nil {
			return SoakReport{}, err
		}
		if err := w.Start(ctx); err != nil {
			return SoakReport{}, fmt.Errorf("reliability: start soak worker of %s: %w", slug, err)
		}
		workers = append(workers, w)
	}

	rep := SoakReport{Duration: cfg.Duration}
	start := time.Now()
	err = soakLoad(ctx, pool, cfg, &rep)
	if err == nil {
		err = soakDrain(ctx, pool, cfg.DrainTimeout)
	}
	err = errors.Join(err, stopWorkers())
	rep.Elapsed = time.Since(start)
	if err != nil {
		return rep, err
	}

	for _, slug := range []string{OneStepFlow, MapFlow} {
		inv, err := Read(ctx, pool, slug)
		if err != nil {
			return rep, err
		}
		rep.Flows = append(rep.Flows, inv)
		for _, p := range inv.Problems(false) {
			rep.Problems = append(rep.Problems, slug+": "+p)
		}
	}
	rep.OK = len(rep.Problems) == 0
	return rep, nil
}

func soakPool(ctx context.Context, url, app string, size int32) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("reliability: parse the database URL: %w", err)
	}
	pc.ConnConfig.RuntimeParams["application_name"] = app
	pc.MaxConns = size
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("reliability: connect: %w", err)
	}
	return pool, nil
}

// prepareSoakDB installs the schema, the invocation table (and event capture) and fresh copies of both flows.
func prepareSoakDB(ctx context.Context, url string, captureEvents bool) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("reliability: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := schema.InstallPGMQ(ctx, conn, "auto"); err != nil {
		return fmt.Errorf("reliability: install PGMQ: %w", err)
	}
	if _, err := schema.NewMigrator(conn, nil).Up(ctx, ""); err != nil {
		return fmt.Errorf("reliability: migrate: %w", err)
	}
	setup := InvocationsSQL + `truncate reliability.invocations;`
	if captureEvents {
		var ours bool
		err := conn.QueryRow(ctx, `select to_regprocedure('realtime.send(jsonb,text,text,boolean)') is null
		                               or to_regclass('realtime.captured') is not null`).Scan(&ours)
		if err != nil {
			return fmt.Errorf("reliability: look for realtime.send: %w", err)
		}
		if !ours {
			return errors.New("reliability: this database has its own realtime.send (Supabase?); soak does not replace it: run without event capture")
		}
		setup += EventsSQL + `truncate realtime.captured;`
	}
	if _, err := conn.Exec(ctx, setup); err != nil {
		return fmt.Errorf("reliability: set up the soak tables: %w", err)
	}
	for _, slug := range []string{OneStepFlow, MapFlow} {
		if _, err := conn.Exec(ctx, `select pgflow.delete_flow_and_data(f.flow_slug) from pgflow.flows as f where f.flow_slug = $1`, slug); err != nil {
			return fmt.Errorf("reliability: delete the previous soak flow %s: %w", slug, err)
		}
		flow, err := NewFlow(slug, Handlers{Recorder: &MemRecorder{}})
		if err != nil {
			return err
		}
		shape, err := flow.Shape()
		if err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, `select pgflow.ensure_flow_compiled($1, $2::jsonb)`, slug, string(shape)); err != nil {
			return fmt.Errorf("reliability: compile soak flow %s: %w", slug, err)
		}
	}
	return nil
}

// soakLoad keeps cfg.Backlog runs pending for cfg.Duration and injects the faults.
func soakLoad(ctx context.Context, pool *pgxpool.Pool, cfg SoakConfig, rep *SoakReport) error {
	deadline := time.Now().Add(cfg.Duration)
	nextFault := time.Now().Add(cfg.FaultEvery)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for round := 0; time.Now().Before(deadline); round++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if cfg.FaultEvery > 0 && time.Now().After(nextFault) {
			var n int64
			err := pool.QueryRow(ctx, `select count(*) filter (where pg_terminate_backend(a.pid))
			                             from pg_stat_activity as a
			                            where a.datname = current_database() and a.application_name = $1`, soakApp).Scan(&n)
			if err != nil {
				return fmt.Errorf("reliability: terminate the workers' sessions: %w", err)
			}
			rep.Faults++
			rep.Terminated += n
			nextFault = time.Now().Add(cfg.FaultEvery)
		}
		var pending int
		if err := pool.QueryRow(ctx, `select count(*) from pgflow.runs where status = 'started'`).Scan(&pending); err != nil {
			return fmt.Errorf("reliability: count pending runs: %w", err)
		}
		if pending >= cfg.Backlog {
			continue
		}
		inputs := make([]string, 0, 20)
		for range 20 {
			in := Input{SleepMS: rand.IntN(20)}
			if cfg.FailPercent > 0 && rand.IntN(100) < cfg.FailPercent {
				in.FailAttempts = 1
			}
			raw, _ := json.Marshal(in)
			inputs = append(inputs, string(raw))
		}
		b := &pgx.Batch{}
		for _, in := range inputs {
			b.Queue(`select pgflow.start_flow($1, $2::jsonb)`, OneStepFlow, in)
		}
		if round%5 == 0 {
			raw, _ := json.Marshal(Input{Items: 20 + rand.IntN(80), SleepMS: rand.IntN(5)})
			b.Queue(`select pgflow.start_flow($1, $2::jsonb)`, MapFlow, string(raw))
		}
		n := int64(b.Len())
		if err := pool.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("reliability: start soak runs: %w", err)
		}
		rep.RunsStarted += n
	}
	return nil
}

// soakDrain waits until no run is unfinished (stalled-task recovery may need the step timeout + 30 s).
func soakDrain(ctx context.Context, pool *pgxpool.Pool, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var pending int
		if err := pool.QueryRow(ctx, `select count(*) from pgflow.runs where status = 'started'`).Scan(&pending); err != nil {
			return fmt.Errorf("reliability: count pending runs: %w", err)
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return nil // the invariants report the unfinished runs
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
