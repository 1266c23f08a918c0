package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

func TestWorkersCommand(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()

	require.Contains(t, mustCLI(t, "--database-url", db.URL, "workers"), "no workers with a heartbeat in the last 24h0m0s")
	require.Contains(t, mustCLI(t, "--database-url", db.URL, "workers", "--since", "0"), "no workers registered")

	running := startWorker(t, db.Pool, squaresFlow("squares"))
	stopped := startWorker(t, db.Pool, failingFlow("fragile"))
	require.NoError(t, stopped.stop())
	// A worker that vanished without stopping (its last heartbeat is old) and one that is being deprecated.
	const ghost, leaving = "33333333-3333-4333-8333-333333333333", "44444444-4444-4444-8444-444444444444"
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, ghost, "squares", "elsewhere"))
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, leaving, "squares", "elsewhere"))
	_, err := db.Pool.Exec(ctx, `update pgflow.workers set last_heartbeat_at = now() - interval '10 minutes' where worker_id = $1`, ghost)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `update pgflow.workers set deprecated_at = now() where worker_id = $1`, leaving)
	require.NoError(t, err)
	listener := db.SessionPID(t)
	_, err = sqlapi.HeartbeatWorker(ctx, db.Pool, leaving, listener) // it says it listens on its own channel
	require.NoError(t, err)

	docs := decodeJSON[[]workerJSON](t, mustCLI(t, "--database-url", db.URL, "workers", "--json"))
	require.Len(t, docs, 4)
	byID := map[string]workerJSON{}
	for _, d := range docs {
		byID[d.WorkerID] = d
	}
	require.Equal(t, "stopped", docs[3].Status, "stopped workers come last")

	r := byID[running.id]
	require.Equal(t, "alive", r.Status)
	require.Equal(t, "squares", r.QueueName)
	require.Equal(t, "pgflow-go", r.FunctionName)
	require.Nil(t, r.StoppedAt)
	require.Less(t, r.HeartbeatAgeSeconds, 30.0)

	s := byID[stopped.id]
	require.Equal(t, "stopped", s.Status)
	require.Equal(t, "fragile", s.QueueName)
	require.NotNil(t, s.StoppedAt)

	require.Equal(t, "unresponsive", byID[ghost].Status)
	require.Nil(t, byID[ghost].ListensAt, "registered through pgflow's signature: not listening")
	require.NotNil(t, byID[leaving].ListensAt)
	require.Nil(t, byID[ghost].ListenerPID)
	require.Equal(t, &listener, byID[leaving].ListenerPID, "the session it listens in")
	require.GreaterOrEqual(t, byID[ghost].HeartbeatAgeSeconds, 600.0)
	require.Equal(t, "stopping", byID[leaving].Status)
	require.NotNil(t, byID[leaving].DeprecatedAt)

	// --since leaves out the old heartbeat; --stale-after moves the line between alive and unresponsive.
	recent := decodeJSON[[]workerJSON](t, mustCLI(t, "--database-url", db.URL, "workers", "--json", "--since", "5m"))
	require.Len(t, recent, 3)
	for _, d := range recent {
		require.NotEqual(t, ghost, d.WorkerID)
	}
	lenient := decodeJSON[[]workerJSON](t, mustCLI(t, "--database-url", db.URL, "workers", "--json", "--stale-after", "1h"))
	for _, d := range lenient {
		if d.WorkerID == ghost {
			require.Equal(t, "alive", d.Status)
		}
	}

	out := mustCLI(t, "--database-url", db.URL, "workers")
	require.Regexp(t, `WORKER\s+STATUS\s+QUEUE\s+LAST_HEARTBEAT\s+STARTED\s+TASKS\s+FUNCTION`, out)
	require.Regexp(t, running.id+`\s+alive\s+squares\s+\S+ ago\s+\S+ \S+\s+0\s+pgflow-go`, out)
	require.Regexp(t, stopped.id+`\s+stopped\s+fragile\s+`, out)
	require.Regexp(t, ghost+`\s+unresponsive\s+squares\s+10m\d\ds ago`, out)

	r2 := runCLI(t, "", "--database-url", db.URL, "workers", "--since", "-1s")
	require.ErrorContains(t, r2.err, "--since must be >= 0")
}

func TestWorkerStatus(t *testing.T) {
	t.Parallel()
	now := time.Now()
	require.Equal(t, "alive", workerStatus(sqlapi.WorkerRow{HeartbeatAge: time.Second}, 30*time.Second))
	require.Equal(t, "unresponsive", workerStatus(sqlapi.WorkerRow{HeartbeatAge: time.Minute}, 30*time.Second))
	require.Equal(t, "stopping", workerStatus(sqlapi.WorkerRow{DeprecatedAt: &now}, 30*time.Second))
	require.Equal(t, "stopped", workerStatus(sqlapi.WorkerRow{DeprecatedAt: &now, StoppedAt: &now, HeartbeatAge: time.Hour}, 30*time.Second))
}
