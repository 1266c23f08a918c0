// Command testworker runs one pgflow worker for a reliability flow (internal/reliability) until SIGINT or
// SIGTERM. The reliability tests build it with `go build` and start, kill, pause and resume it as a real worker
// process. The database URL comes from the environment (RELIABILITY_DATABASE_URL); logs are JSON lines on
// stderr. Handlers record each invocation in reliability.invocations and hang on a release file when the run's
// input asks them to.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/reliability"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(1)
	}
}

func run() error {
	flowSlug := flag.String("flow", reliability.OneStepFlow, "reliability flow to run")
	workerID := flag.String("worker-id", "", "worker id (UUID); empty: random")
	releaseDir := flag.String("release-dir", "", "directory whose 'release' file frees hanging handlers")
	maxConcurrent := flag.Int("max-concurrent", 0, "WorkerConfig.MaxConcurrent (0: default)")
	batchSize := flag.Int("batch-size", 0, "WorkerConfig.BatchSize (0: default)")
	maintenance := flag.Duration("maintenance", 0, "WorkerConfig.MaintenanceInterval (0: maintenance off)")
	poolSize := flag.Int("pool-size", 0, "pool size (0: max-concurrent + 4)")
	logLevel := flag.String("log-level", "debug", "debug, info, warn or error")
	shutdownTimeout := flag.Duration("shutdown-timeout", 0, "WorkerConfig.ShutdownTimeout (0: 5s)")
	flag.Parse()

	url := os.Getenv(reliability.EnvDatabaseURL)
	if url == "" {
		return fmt.Errorf("%s is not set", reliability.EnvDatabaseURL)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("-log-level %q: %w", *logLevel, err)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("parse %s: %w", reliability.EnvDatabaseURL, err)
	}
	conc := *maxConcurrent
	if conc == 0 {
		conc = pgflow.DefaultMaxConcurrent
	}
	cfg.MaxConns = int32(conc + 4)
	if *poolSize > 0 {
		cfg.MaxConns = int32(*poolSize)
	}
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()

	flow, err := reliability.NewFlow(*flowSlug, reliability.Handlers{
		Recorder: reliability.DBRecorder{DB: pool, PID: os.Getpid()},
		Gate:     reliability.FileGate{Dir: *releaseDir},
	})
	if err != nil {
		return err
	}
	wcfg := pgflow.WorkerConfig{
		MaxConcurrent:       *maxConcurrent,
		BatchSize:           *batchSize,
		MaxPollWait:         time.Second,
		PollInterval:        20 * time.Millisecond,
		HeartbeatInterval:   500 * time.Millisecond,
		ShutdownTimeout:     5 * time.Second,
		MaintenanceInterval: *maintenance,
		WorkerID:            *workerID,
		Logger:              logger,
	}
	if *maintenance == 0 {
		wcfg.MaintenanceInterval = -1
	}
	if *shutdownTimeout > 0 {
		wcfg.ShutdownTimeout = *shutdownTimeout
	}
	wcfg.Flows = []pgflow.WorkerFlow{{Flow: flow}}
	client, err := pgflow.NewClient(pool, &pgflow.ClientConfig{Logger: logger})
	if err != nil {
		return err
	}
	defer client.Close()
	w, err := pgflow.NewWorker(client, &wcfg)
	if err != nil {
		return err
	}
	return runUntilSignal(ctx, w, logger)
}

// runUntilSignal runs w until SIGINT or SIGTERM (or until the database deprecates it), then stops it gracefully;
// a second signal during the graceful stop stops it at once (handlers cancelled, their tasks released).
func runUntilSignal(ctx context.Context, w *pgflow.Worker, logger *slog.Logger) error {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	runCtx, endRun := context.WithCancel(ctx)
	defer endRun()
	go func() { // the first signal ends the startup or the run
		select {
		case <-sigs:
			endRun()
		case <-runCtx.Done():
		}
	}()
	if err := w.Start(runCtx); err != nil {
		return err
	}
	select {
	case <-runCtx.Done():
		logger.Info("testworker: graceful shutdown began; a second SIGINT or SIGTERM stops at once")
	case <-w.Stopped(): // deprecated by the database
	}

	stopCtx, stopNow := context.WithCancel(context.WithoutCancel(ctx))
	defer stopNow()
	go func() {
		select {
		case <-sigs:
			logger.Warn("testworker: second signal: stopping at once; interrupted tasks go back to their queue")
			stopNow()
		case <-stopCtx.Done():
		}
	}()
	err := w.Stop(stopCtx)
	if errors.Is(err, context.Canceled) && stopCtx.Err() != nil {
		return nil // stopped at once on request
	}
	return err
}
