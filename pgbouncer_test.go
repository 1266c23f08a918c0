package pgflow_test

// pgflow-go behind a real PgBouncer in transaction pooling mode (docs/deploy.md): the migrator, the client and
// the workers talk to the database only through the bouncer; LISTEN goes over a direct connection given as
// ClientConfig.ListenConfig, and a PollOnly worker needs none.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgcluster"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/testutil"
	"github.com/pgflow-go/pgflow/pgflowtest"
	"github.com/pgflow-go/pgflow/schema"
)

// bouncerWait bounds every wait of these tests: a deadline for something to happen, not a timing assertion.
const bouncerWait = 90 * time.Second

// startTestBouncer starts a throwaway PgBouncer (transaction mode) in front of the tests' PostgreSQL server,
// stopped when the test ends. A missing pgbouncer fails the test naming `apt-get install pgbouncer`.
func startTestBouncer(t *testing.T) *pgcluster.PgBouncer {
	t.Helper()
	b, err := pgcluster.StartPgBouncer(context.Background(), pgcluster.PgBouncerOptions{
		ServerURL: pgtest.AdminURL(t), PoolMode: "transaction", DefaultPoolSize: 20,
	})
	if errors.Is(err, pgcluster.ErrPgBouncerMissing) {
		t.Fatalf("these tests run pgflow behind a real PgBouncer: %v (make test installs it: .ci/setup)", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pgbouncer %s log:\n%s", b.Version(), b.Log())
		}
		b.Stop()
	})
	return b
}

// bouncerModes are the pgx query modes a pool behind this PgBouncer may use: "exec" (what docs/deploy.md
// recommends for any PgBouncer version), "cache_describe", and pgx's default only when the bouncer keeps prepared
// statements itself (PgBouncer >= 1.21 with max_prepared_statements > 0). internal/pgcluster's
// TestPgBouncerQueryExecModes shows the default failing without that.
func bouncerModes(b *pgcluster.PgBouncer) []string {
	modes := []string{"exec", "cache_describe"}
	if b.MaxPreparedStatements() > 0 {
		modes = append(modes, "cache_statement")
	}
	return modes
}

type bouncerInput struct {
	N int `json:"n"`
}

// newBouncerFlow is a flow with a root step, a map step over its output, a step that fails its first attempt
// (so fail_task and the retry path go through the bouncer too) and a join reading the flow input.
func newBouncerFlow(slug string) *pgflow.Flow[bouncerInput] {
	f := pgflow.NewFlow[bouncerInput](slug, pgflow.BaseDelay(time.Second), pgflow.MaxAttempts(3))
	items := pgflow.Step(f, "items", func(ctx context.Context, t *pgflow.Task[bouncerInput]) ([]int, error) {
		in, err := t.FlowInput(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]int, 3)
		for i := range out {
			out[i] = in.N + i
		}
		return out, nil
	})
	squares := pgflow.Map(f, "square", items, func(_ context.Context, _ *pgflow.Task[bouncerInput], v int) (int, error) {
		return v * v, nil
	})
	flaky := pgflow.Step(f, "flaky", func(_ context.Context, t *pgflow.Task[bouncerInput]) (int, error) {
		if t.Attempt == 1 {
			return 0, errors.New("first attempt fails on purpose")
		}
		return t.Attempt, nil
	})
	pgflow.Step(f, "total", func(ctx context.Context, t *pgflow.Task[bouncerInput]) (int, error) {
		in, err := t.FlowInput(ctx)
		if err != nil {
			return 0, err
		}
		sq, err := squares.Output(t)
		if err != nil {
			return 0, err
		}
		attempt, err := flaky.Output(t)
		if err != nil {
			return 0, err
		}
		sum := 0
		for _, v := range sq {
			sum += v
		}
		return sum*1000 + attempt*100 + in.N, nil
	}, pgflow.DependsOn(squares, flaky))
	return f
}

// bouncerTotal is what the flow's "total" step returns for input n.
func bouncerTotal(n int) int {
	return (n*n+(n+1)*(n+1)+(n+2)*(n+2))*1000 + 2*100 + n
}

// countingDialer records every connection the LISTEN connection opens (to the server directly, not through the
// bouncer); refuse makes it fail them instead.
type countingDialer struct {
	dials  atomic.Int64
	refuse bool
}

func (d *countingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.dials.Add(1)
	if d.refuse {
		return nil, fmt.Errorf("this client must not open a LISTEN connection (dial %s %s)", network, addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// newBouncerLogger collects slog output of the test's clients and workers, printed when the test fails.
func newBouncerLogger(t *testing.T) (*slog.Logger, *testutil.SyncBuffer) {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	return slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), logs
}

// A flow runs end to end with every SQL call going through PgBouncer in transaction mode: PGMQ and the schema are
// installed through it, the flow is compiled with Client.EnsureFlow, runs are started with StartRun and StartRuns,
// a listening worker (LISTEN over a direct ListenConfig connection, with stalled-task maintenance) and then a
// PollOnly worker (no direct connection at all) complete them, WaitRun and Subscribe follow them, and the runs
// are read back.
func TestPgBouncerFlowEndToEnd(t *testing.T) {
	t.Parallel()
	b := startTestBouncer(t)
	t.Logf("PgBouncer %s, max_prepared_statements %d", b.Version(), b.MaxPreparedStatements())
	for _, mode := range bouncerModes(b) {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			runFlowThroughBouncer(t, b, mode)
		})
	}
}

func runFlowThroughBouncer(t *testing.T, b *pgcluster.PgBouncer, mode string) {
	ctx, cancel := context.WithTimeout(context.Background(), bouncerWait)
	defer cancel()
	logger, logs := newBouncerLogger(t)
	db := pgtest.NewEmpty(t) // db.Pool and db.URL are direct: the test's own checks and the LISTEN connection
	bouncerURL := b.URL(db.Name) + "&default_query_exec_mode=" + mode

	// 1. Install PGMQ and migrate, through the bouncer (one *pgx.Conn, transaction-level advisory locks).
	conn, err := pgx.Connect(ctx, bouncerURL)
	require.NoError(t, err)
	pgmqPref := os.Getenv(pgtest.EnvPGMQ)
	_, err = schema.InstallPGMQ(ctx, conn, pgmqPref)
	require.NoError(t, err)
	report, err := schema.NewMigrator(conn, nil).Up(ctx, "")
	require.NoError(t, err)
	status, err := schema.NewMigrator(conn, nil).Status(ctx)
	require.NoError(t, err)
	require.Equal(t, report.Current, status.Current)
	require.NoError(t, conn.Close(ctx))

	// 2. The application's pool goes through the bouncer; LISTEN goes to the server directly.
	poolCfg, err := pgxpool.ParseConfig(bouncerURL)
	require.NoError(t, err)
	poolCfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var port int
	require.NoError(t, pool.QueryRow(ctx, `select inet_server_port()`).Scan(&port))
	require.NotEqual(t, b.Port(), port, "sanity: the server's own port, reached through the bouncer")

	listenCfg, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	direct := &countingDialer{}
	listenCfg.DialFunc = direct.dial
	client, err := pgflow.NewClient(pool, &pgflow.ClientConfig{Logger: logger, ListenConfig: listenCfg, PollInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(client.Close)

	// A second client for the PollOnly worker: its LISTEN connection would fail, and is never opened.
	noListen, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	refused := &countingDialer{refuse: true}
	noListen.DialFunc = refused.dial
	pollClient, err := pgflow.NewClient(pool, &pgflow.ClientConfig{Logger: logger, ListenConfig: noListen})
	require.NoError(t, err)
	t.Cleanup(pollClient.Close)

	// 3. Compile, then start runs (single and bulk) through the bouncer.
	flow := newBouncerFlow("bouncer_flow")
	require.NoError(t, client.EnsureFlow(ctx, flow, nil))
	require.NoError(t, client.EnsureFlow(ctx, flow, nil), "verifying an identical flow")

	// A run whose root task a dead worker claimed an hour ago: only stalled-task maintenance brings it back.
	stalled, err := pgflow.StartRun(ctx, client, flow, bouncerInput{N: 100}, nil)
	require.NoError(t, err)
	claimAsDeadWorker(ctx, t, db.Pool, stalled.ID)

	first, err := pgflow.StartRun(ctx, client, flow, bouncerInput{N: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, pgflow.RunStarted, first.Status)
	var inputs []bouncerInput
	for n := 2; n <= 11; n++ {
		inputs = append(inputs, bouncerInput{N: n})
	}
	bulk, err := pgflow.StartRuns(ctx, client, flow, inputs, nil)
	require.NoError(t, err)
	require.Len(t, bulk, len(inputs))

	// 4. A listening worker with maintenance completes them, the stalled one included.
	listening, err := pgflow.NewWorker(client, &pgflow.WorkerConfig{
		Flows: []pgflow.WorkerFlow{{Flow: flow}}, MaxConcurrent: 8, MaxPollWait: time.Second,
		HeartbeatInterval: 200 * time.Millisecond, MaintenanceInterval: 100 * time.Millisecond, Logger: logger,
	})
	require.NoError(t, err)
	require.NoError(t, listening.Start(ctx))
	ids := append([]string{stalled.ID, first.ID}, bulk...)
	want := append([]int{100, 1}, ns(inputs)...)
	for i, id := range ids {
		requireBouncerRunDone(ctx, t, client, id, want[i])
	}
	require.NoError(t, listening.Stop(ctx))
	require.Positive(t, direct.dials.Load(), "the listener connected directly, not through the bouncer")
	var requeued int
	require.NoError(t, db.Pool.QueryRow(ctx, `select requeued_count from pgflow.step_tasks
		where run_id = $1::uuid and step_slug = 'items'`, stalled.ID).Scan(&requeued))
	require.Equal(t, 1, requeued, "stalled-task maintenance requeued the dead worker's task")
	require.Contains(t, logs.String(), "requeued")

	// 5. With no worker running, start more runs and subscribe to one (the direct LISTEN connection), then a
	// PollOnly worker completes them without any connection but the bouncer's.
	more, err := pgflow.StartRuns(ctx, client, flow, []bouncerInput{{N: 20}, {N: 21}}, nil)
	require.NoError(t, err)
	followed, err := pgflow.StartRun(ctx, client, flow, bouncerInput{N: 22}, nil)
	require.NoError(t, err)
	events, err := client.Subscribe(ctx, followed.ID)
	require.NoError(t, err)

	polling, err := pgflow.NewWorker(pollClient, &pgflow.WorkerConfig{
		Flows: []pgflow.WorkerFlow{{Flow: flow}}, MaxConcurrent: 4, PollOnly: true, MaxPollWait: time.Second,
		PollInterval: 20 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond,
		MaintenanceInterval: 100 * time.Millisecond, Logger: logger,
	})
	require.NoError(t, err)
	require.NoError(t, polling.Start(ctx))
	var got []pgflow.Event
	for ev := range events {
		got = append(got, ev)
	}
	require.NotEmpty(t, got, "events arrive over the direct LISTEN connection")
	require.Equal(t, pgflow.EventRunCompleted, got[len(got)-1].Type, "events: %v", got)
	requireBouncerRunDone(ctx, t, client, followed.ID, 22)
	requireBouncerRunDone(ctx, t, client, more[0], 20)
	requireBouncerRunDone(ctx, t, client, more[1], 21)
	require.NoError(t, polling.Stop(ctx))
	require.Zero(t, refused.dials.Load(), "a PollOnly worker opens no LISTEN connection")

	// 6. Reads through the bouncer: GetRun, the monitoring lists, and the workers marked stopped.
	run, err := client.GetRun(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, pgflow.RunCompleted, run.Status)
	require.Len(t, run.Steps, 4)
	flows, err := client.ListFlows(ctx)
	require.NoError(t, err)
	require.Len(t, flows, 1)
	_, err = client.ListQueues(ctx)
	require.NoError(t, err)
	workers, err := client.ListWorkers(ctx, time.Hour)
	require.NoError(t, err)
	stopped := map[string]bool{}
	for _, w := range workers {
		stopped[w.ID] = w.StoppedAt != nil
	}
	require.True(t, stopped[listening.ID()], "workers: %+v", workers)
	require.True(t, stopped[polling.ID()], "workers: %+v", workers)
	list, err := client.ListRuns(ctx, &pgflow.ListRunsOpts{Flow: flow.Slug(), Limit: 100})
	require.NoError(t, err)
	require.Len(t, list.Runs, len(ids)+3)

	// 7. The test kit drives a run synchronously through the same pool.
	kitRun, err := pgflowtest.RunFlow(ctx, pool, newBouncerFlow("bouncer_kit"), bouncerInput{N: 5}, nil)
	require.NoError(t, err)
	total, err := pgflow.RunOutput[map[string]int](kitRun)
	require.NoError(t, err)
	require.Equal(t, bouncerTotal(5), total["total"])
}

func ns(inputs []bouncerInput) []int {
	out := make([]int, len(inputs))
	for i, in := range inputs {
		out[i] = in.N
	}
	return out
}

// requireBouncerRunDone waits for the run with WaitRun and checks its output.
func requireBouncerRunDone(ctx context.Context, t *testing.T, c *pgflow.Client, runID string, n int) {
	t.Helper()
	run, err := c.WaitRun(ctx, runID)
	require.NoError(t, err, "run %s (n=%d)", runID, n)
	require.Equal(t, pgflow.RunCompleted, run.Status, "run %s: %v", runID, run.Err())
	var out struct {
		Total int `json:"total"`
	}
	require.NoError(t, json.Unmarshal(run.Output, &out))
	require.Equal(t, bouncerTotal(n), out.Total, "run %s (n=%d)", runID, n)
}

// claimAsDeadWorker claims the run's root task ("items") for a registered worker that then vanishes, and moves
// the claim an hour into the past, as if the worker died long ago.
func claimAsDeadWorker(ctx context.Context, t *testing.T, direct *pgxpool.Pool, runID string) {
	t.Helper()
	const deadWorker = "00000000-0000-4000-8000-00000000dead"
	var queue string
	var msgID int64
	require.NoError(t, direct.QueryRow(ctx, `select queue_name, message_id from pgflow.step_tasks
		where run_id = $1::uuid and step_slug = 'items'`, runID).Scan(&queue, &msgID))
	_, err := direct.Exec(ctx, `select pgflow.register_worker($1::uuid, $2::text, 'dead-worker')`, deadWorker, queue)
	require.NoError(t, err)
	rows, err := direct.Query(ctx, `select step_slug from pgflow.start_tasks($1::text, array[$2::bigint], $3::uuid, $4::text)`,
		"bouncer_flow", msgID, deadWorker, queue)
	require.NoError(t, err)
	claimed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"items"}, claimed)
	tag, err := direct.Exec(ctx, `update pgflow.step_tasks
		set queued_at = now() - interval '61 minutes', started_at = now() - interval '1 hour'
		where run_id = $1::uuid and step_slug = 'items' and status = 'started'`, runID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// A worker's result call holding tasks of a map step commits them before the claim riding with it (begin,
// completions, commit, claim: one pipeline, two transactions). Through a transaction-mode bouncer in every query
// mode a pool there may use: the results and the claim are recorded, a claim failing after the commit leaves the
// results recorded, and a refused result rolls the call back and leaves the pool working.
func TestPgBouncerMapResultsCommitBeforeTheirRide(t *testing.T) {
	t.Parallel()
	b := startTestBouncer(t)
	for _, mode := range append(bouncerModes(b), "simple_protocol") {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), bouncerWait)
			defer cancel()
			db := pgtest.New(t)
			pool, err := pgxpool.New(ctx, b.URL(db.Name)+"&default_query_exec_mode="+mode)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			for _, q := range []string{
				`select pgflow.create_flow('bouncer_map')`,
				`select pgflow.add_step('bouncer_map', 'items', step_type => 'map')`,
				`select pgflow.create_flow('bouncer_next')`,
				`select pgflow.add_step('bouncer_next', 'only')`,
			} {
				_, err := pool.Exec(ctx, q)
				require.NoError(t, err)
			}
			const worker = "d0000000-0000-4000-8000-0000000000b1"
			require.NoError(t, sqlapi.RegisterWorker(ctx, pool, worker, "bouncer_map", "bouncer-test"))
			_, err = sqlapi.StartFlows(ctx, pool, "bouncer_map", []json.RawMessage{json.RawMessage(`[1, 2, 3, 4]`)}, nil)
			require.NoError(t, err)
			_, err = sqlapi.StartFlows(ctx, pool, "bouncer_next", []json.RawMessage{json.RawMessage(`{}`), json.RawMessage(`{}`)}, nil)
			require.NoError(t, err)
			claimed, _, _, err := sqlapi.ReadAndStartTasks(ctx, pool, "bouncer_map", "bouncer_map", worker, 4, 60)
			require.NoError(t, err)
			require.Len(t, claimed, 4)
			results := func(from, to int, output string) []sqlapi.TaskResult {
				var rs []sqlapi.TaskResult
				for _, c := range claimed[from:to] {
					rs = append(rs, sqlapi.TaskResult{RunID: c.RunID, StepSlug: c.StepSlug, TaskIndex: c.TaskIndex,
						Output: json.RawMessage(output), Attempt: c.Attempt})
				}
				return rs
			}
			completed := func() (n int) {
				require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.step_tasks
					where flow_slug = 'bouncer_map' and status = 'completed'`).Scan(&n))
				return n
			}

			// A refused result: nothing commits, the claim never runs, and the pool goes on working.
			var r sqlapi.ReadAndStart
			_, _, rideErr, err := sqlapi.CompleteTasksWith(ctx, pool, results(0, 2, `{"a": "x\u0000y"}`), func(b *pgx.Batch) {
				sqlapi.QueueReadAndStartTasks(b, "bouncer_next", "bouncer_next", worker, 1, 60, &r)
			}, true)
			require.ErrorContains(t, err, "22P05")
			require.Error(t, rideErr)
			require.Zero(t, completed())
			require.Empty(t, r.Claimed)

			// Results first, committed; then the claim, in a transaction of its own.
			done, _, rideErr, err := sqlapi.CompleteTasksWith(ctx, pool, results(0, 2, `1`), func(b *pgx.Batch) {
				sqlapi.QueueReadAndStartTasks(b, "bouncer_next", "bouncer_next", worker, 1, 60, &r)
			}, true)
			require.NoError(t, err)
			require.NoError(t, rideErr)
			require.Len(t, done, 2)
			require.Len(t, r.Claimed, 1)
			require.Equal(t, 2, completed())

			// A claim failing after the commit: the results stay recorded.
			done, _, rideErr, err = sqlapi.CompleteTasksWith(ctx, pool, results(2, 4, `1`), func(b *pgx.Batch) {
				b.Queue(`select 1 / 0`)
			}, true)
			require.NoError(t, err)
			require.ErrorContains(t, rideErr, "22012")
			require.Len(t, done, 2)
			require.Equal(t, 4, completed())
			var status string
			require.NoError(t, db.Pool.QueryRow(ctx, `select status from pgflow.runs where flow_slug = 'bouncer_map'`).Scan(&status))
			require.Equal(t, "completed", status)
		})
	}
}
