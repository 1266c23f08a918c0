package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// waitLimit bounds every wait in these tests; it is a deadline for something to happen, not a timing assertion.
const waitLimit = 60 * time.Second

// cliResult is what one in-process run of the CLI printed and returned.
type cliResult struct {
	stdout, stderr string
	err            error
}

// runCLI runs the root command in-process with args (and stdin, if given) and captures its output.
func runCLI(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return cliResult{stdout: out.String(), stderr: errOut.String(), err: err}
}

// mustCLI runs the CLI and requires success.
func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	r := runCLI(t, "", args...)
	require.NoError(t, r.err, "pgflow %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.stdout, r.stderr)
	return r.stdout
}

// decodeJSON decodes a --json document.
func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(s), &v), "output:\n%s", s)
	return v
}

// squaresFlow maps over its input array ("square", one task per number) and sums the squares ("sum").
func squaresFlow(slug string) *pgflow.Flow[[]int] {
	f := pgflow.NewFlow[[]int](slug, pgflow.MaxAttempts(2), pgflow.BaseDelay(time.Second), pgflow.Timeout(10*time.Second))
	sq := pgflow.MapInput(f, "square", func(ctx context.Context, t *pgflow.Task[[]int], n int) (int, error) {
		return n * n, nil
	})
	pgflow.Step(f, "sum", func(ctx context.Context, t *pgflow.Task[[]int]) (int, error) {
		all, err := sq.Output(t)
		total := 0
		for _, v := range all {
			total += v
		}
		return total, err
	}, pgflow.DependsOn(sq))
	return f
}

// failingFlow has a root step "ok" and a step "boom" after it that always fails, with one attempt.
func failingFlow(slug string) *pgflow.Flow[map[string]any] {
	f := pgflow.NewFlow[map[string]any](slug, pgflow.MaxAttempts(1))
	ok := pgflow.Step(f, "ok", func(ctx context.Context, t *pgflow.Task[map[string]any]) (bool, error) {
		return true, nil
	})
	pgflow.Step(f, "boom", func(ctx context.Context, t *pgflow.Task[map[string]any]) (int, error) {
		return 0, errors.New("the printer is on fire")
	}, pgflow.DependsOn(ok))
	return f
}

// compileFlow creates flow in the database from its CompileSQL statements, without a worker.
func compileFlow(t *testing.T, pool *pgxpool.Pool, flow pgflow.AnyFlow) {
	t.Helper()
	stmts, err := flow.CompileSQL()
	require.NoError(t, err)
	for _, q := range stmts {
		_, err := pool.Exec(context.Background(), q)
		require.NoError(t, err, q)
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer = testutil.SyncBuffer

// testWorker is a real worker running in the test process.
type testWorker struct {
	id   string
	stop func() error
}

// startWorker runs a worker for flow against pool until stop is called or the test ends; it returns once the
// worker runs (its flow is then compiled).
func startWorker(t *testing.T, pool *pgxpool.Pool, flow pgflow.AnyFlow) *testWorker {
	t.Helper()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	client, err := pgflow.NewClient(pool, &pgflow.ClientConfig{Logger: logger})
	require.NoError(t, err)
	w, err := pgflow.NewWorker(client, &pgflow.WorkerConfig{
		Flows:               []pgflow.WorkerFlow{{Flow: flow}},
		MaxPollWait:         time.Second,
		PollInterval:        20 * time.Millisecond,
		HeartbeatInterval:   200 * time.Millisecond,
		ShutdownTimeout:     20 * time.Second,
		MaintenanceInterval: -1,
		Logger:              logger,
	})
	require.NoError(t, err)
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			stopErr = w.Stop(ctx)
			client.Close()
		})
		return stopErr
	}
	t.Cleanup(func() {
		_ = stop()
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	require.NoError(t, w.Start(ctx), "worker logs:\n%s", logs.String())
	return &testWorker{id: w.ID(), stop: stop}
}

// waitTerminal waits until a run is completed or failed.
func waitTerminal(t *testing.T, pool *pgxpool.Pool, runID string) *pgflow.Run {
	t.Helper()
	client, err := pgflow.NewClient(pool, nil)
	require.NoError(t, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	run, err := client.WaitRun(ctx, runID)
	require.NoError(t, err)
	return run
}
