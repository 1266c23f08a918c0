package pgflow_test

// PostgreSQL restarted under load (issue 6, "Faults"): `pg_ctl restart -m fast` on a cluster of the test's own.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgcluster"
	"github.com/pgflow-go/pgflow/internal/reliability"
	"github.com/pgflow-go/pgflow/schema"
)

// ownCluster starts a throwaway cluster for one test (one that can be restarted without disturbing the other
// tests) with the pgflow schema migrated into database "rel", and returns it with the database's URL.
func ownCluster(t *testing.T) (*pgcluster.Cluster, string) {
	t.Helper()
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	admin, err := pgx.Connect(ctx, c.AdminURL())
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `create database rel`)
	require.NoError(t, err)
	require.NoError(t, admin.Close(ctx))
	url := c.URL("rel")
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = schema.InstallPGMQ(ctx, conn, "auto")
	require.NoError(t, err)
	_, err = schema.NewMigrator(conn, nil).Up(ctx, "")
	require.NoError(t, err)
	return c, url
}

func newPool(t *testing.T, url string, size int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = size
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// Two workers run a load of one-step runs while the server is restarted with `pg_ctl restart -m fast` (every
// session is terminated, in-flight transactions roll back). The workers retry with capped backoff and carry on;
// runs started after the restart complete too; clients blocked in WaitRun across the restart get their completed
// runs. At the end every run completed, every completed task holds the result of one invocation of that task,
// no run or step completed twice (exact event counts), and no message is left in the queue.
func TestReliabilityPostgresRestartMidLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, url := ownCluster(t)
	setupPool := newPool(t, url, 4)
	require.NoError(t, reliability.SetupEvents(ctx, setupPool))
	compileRelFlow(t, setupPool, reliability.OneStepFlow)

	rec := &reliability.MemRecorder{}
	flow := relFlow(t, reliability.OneStepFlow, reliability.Handlers{Recorder: rec})
	var workerLogs []*relLogs
	for i := range 2 {
		logger, logs := newRelLogger(t, fmt.Sprintf("worker %d", i))
		workerLogs = append(workerLogs, logs)
		cfg := relWorkerConfig(logger)
		cfg.MaxConcurrent = 8
		cfg.MaintenanceInterval = 500 * time.Millisecond // recovers a claim whose reply the restart swallowed
		runInProc(t, newPool(t, url, 14), flow, cfg)
	}

	const before, after = 300, 50
	runs := startRelRuns(t, setupPool, reliability.OneStepFlow, reliability.Input{SleepMS: 5}, before)

	clientLogger, _ := newRelLogger(t, "client")
	client := newClient(t, newPool(t, url, 4), &pgflow.ClientConfig{Logger: clientLogger, PollInterval: 200 * time.Millisecond})
	defer client.Close()
	waited := runs[len(runs)-5:]
	results := make([]*pgflow.Run, len(waited))
	errs := make([]error, len(waited))
	var wg sync.WaitGroup
	waitCtx, cancelWait := context.WithTimeout(ctx, relWait)
	defer cancelWait()
	for i, id := range waited {
		wg.Go(func() { results[i], errs[i] = client.WaitRun(waitCtx, id) })
	}

	eventually(t, relWait, "a quarter of the runs to complete before the restart", func() bool {
		return queryInt(t, setupPool, `select count(*) from pgflow.runs where status = 'completed'`) >= before/4
	})
	done := queryInt(t, setupPool, `select count(*) from pgflow.runs where status = 'completed'`)
	require.Less(t, done, int64(before), "the restart must happen mid-load")
	require.NoError(t, cluster.Restart(ctx))
	t.Logf("restarted the server with %d of %d runs completed", done, before)

	// The setup pool's connections died with the restart; the pool replaces them.
	eventually(t, relWait, "the setup pool to reconnect", func() bool {
		return setupPool.Ping(ctx) == nil
	})
	startRelRuns(t, setupPool, reliability.OneStepFlow, reliability.Input{SleepMS: 5}, after)
	waitRunsDone(t, setupPool, reliability.OneStepFlow, relWait)
	wg.Wait()
	for i := range waited {
		require.NoError(t, errs[i], "WaitRun(%s) across the restart", waited[i])
		require.Equal(t, pgflow.RunCompleted, results[i].Status)
	}

	retried := 0
	for _, l := range workerLogs {
		retried += l.Count("level=WARN")
	}
	require.Positive(t, retried, "the restart should have broken the workers' connections (retry warnings)")

	inv := requireInvariants(t, setupPool, reliability.OneStepFlow, false)
	require.EqualValues(t, before+after, inv.Runs)
	// Every completed task's result is one of its own invocations, and no invocation is claimed by two tasks.
	byID := map[string]pgflow.TaskMeta{}
	for _, in := range rec.List() {
		byID[in.ID] = in.Meta
	}
	seen := map[string]bool{}
	for _, task := range relTasks(t, setupPool, reliability.OneStepFlow, "work") {
		require.True(t, task.HasOutput)
		m, ok := byID[task.Output.Invocation]
		require.True(t, ok, "task of run %s: result %q is not a recorded invocation", task.RunID, task.Output.Invocation)
		require.Equal(t, task.RunID, m.RunID)
		require.False(t, seen[task.Output.Invocation])
		seen[task.Output.Invocation] = true
		require.GreaterOrEqual(t, task.Attempts, 1)
	}
	require.GreaterOrEqual(t, len(rec.List()), before+after)
}
