package pgflow_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow"
)

type greetInput struct {
	Names []string `json:"names"`
}

// greetFlow fetches the names of a run's input and greets each one in a map step.
func greetFlow() *pgflow.Flow[greetInput] {
	f := pgflow.NewFlow[greetInput]("greet", pgflow.MaxAttempts(3), pgflow.Timeout(30*time.Second))
	names := pgflow.Step(f, "names", func(ctx context.Context, t *pgflow.Task[greetInput]) ([]string, error) {
		in, err := t.FlowInput(ctx)
		return in.Names, err
	})
	pgflow.Map(f, "greet", names, func(ctx context.Context, t *pgflow.Task[greetInput], name string) (string, error) {
		if name == "" {
			return "", errors.New("empty name") // the task fails and is retried up to MaxAttempts
		}
		t.Logger.Info("greeting", "name", name) // carries run_id, step, task_index, attempt, ...
		return "Hello, " + strings.ToUpper(name[:1]) + name[1:] + "!", nil
	})
	return f
}

// RunWorker runs a worker until the process receives SIGINT or SIGTERM, then drains it: in-flight handlers
// finish (up to ShutdownTimeout), their results are recorded, and the worker is marked stopped before
// RunWorker returns. The pool stays open; close it afterwards.
func ExampleRunWorker() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	err = pgflow.RunWorker(ctx, pool, greetFlow(), pgflow.WorkerConfig{
		MaxConcurrent: 20,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	var mismatch *pgflow.ShapeMismatchError
	if errors.As(err, &mismatch) {
		// The database holds another version of the flow and this is not a local database.
		log.Fatalf("flow %q changed:\n%s", mismatch.Flow, strings.Join(mismatch.Differences, "\n"))
	}
	if err != nil {
		log.Fatal(err)
	}
}

// NewWorker validates the configuration up front; Run blocks until its context is cancelled (or the worker is
// deprecated by setting pgflow.workers.deprecated_at) and returns nil after a clean shutdown.
func ExampleNewWorker() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close() // after Run: the worker reports its last results before the pool goes away

	w, err := newFlowWorker(t, pool, greetFlow(), pgflow.WorkerConfig{
		BatchSize:       5,
		ShutdownTimeout: time.Minute,
	})

	if err != nil {
		log.Fatal(err) // e.g. "pgflow: WorkerConfig.BatchSize = -1: must be >= 1 (0 means the default, 10)"
	}
	fmt.Println("worker", w.ID())
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
