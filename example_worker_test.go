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

// A worker serving two flows until SIGINT or SIGTERM: the first signal begins a graceful shutdown (in-flight
// handlers finish, up to ShutdownTimeout, and their results are recorded); a second one stops at once, and the
// tasks still running go back to their queue without spending an attempt. Signal handling belongs to the
// program, not to the library.
func ExampleWorker_Run() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close() // after the worker stopped: it reports its last results first
	client, err := pgflow.NewClient(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	w, err := pgflow.NewWorker(client, &pgflow.WorkerConfig{
		Flows:         []pgflow.WorkerFlow{{Flow: greetFlow()}, {Flow: signupFlowOnly(), MaxConcurrent: 5}},
		MaxConcurrent: 20,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		log.Fatal(err) // e.g. "pgflow: WorkerConfig.BatchSize = -1: must be >= 1 (0 means the default, 10)"
	}
	err = w.Start(ctx)
	var mismatch *pgflow.ShapeMismatchError
	if errors.As(err, &mismatch) {
		// The database holds another version of the flow and this is not a local database.
		log.Fatalf("flow %q changed:\n%s", mismatch.Flow, strings.Join(mismatch.Differences, "\n"))
	}
	if err != nil {
		log.Fatal(err)
	}

	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	<-signals
	log.Print("shutting down gracefully; send the signal again to stop at once")
	stopCtx, stopNow := context.WithCancel(ctx)
	go func() {
		<-signals
		stopNow()
	}()
	if err := w.Stop(stopCtx); err != nil {
		log.Print("stopped at once: ", err)
	}
	fmt.Println("worker stopped", w.ID())
}

func signupFlowOnly() *pgflow.Flow[signupInput] {
	f, _, _ := signupFlow()
	return f
}
