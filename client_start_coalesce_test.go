package pgflow

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// holdFlowLock takes the flow's compilation lock exclusively in an open transaction, so that a start of the flow
// waits for it (start_flows takes it shared); release ends the transaction.
func holdFlowLock(t *testing.T, db *pgtest.DB, flow string) (release func()) {
	t.Helper()
	ctx := clCtx(t)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `select pg_advisory_xact_lock(1, hashtext(lower($1)))`, flow)
	require.NoError(t, err)
	var once sync.Once
	release = func() { once.Do(func() { require.NoError(t, tx.Commit(ctx)) }) }
	t.Cleanup(release)
	return release
}

// waitBlockedOnFlowLock waits until n backends wait for the flow lock held by holdFlowLock (in this test's
// database: pg_locks shows the whole cluster's, and tests run in parallel).
func waitBlockedOnFlowLock(t *testing.T, db *pgtest.DB, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d start(s) wait for the flow lock", n), func() bool {
		var waiting int
		require.NoError(t, db.Pool.QueryRow(clCtx(t),
			`select count(*) from pg_locks
			  where locktype = 'advisory' and not granted
			    and database = (select oid from pg_database where datname = current_database())`).Scan(&waiting))
		return waiting == n
	})
}

type startResult struct {
	input string
	run   *Run
	err   error
}

// startConcurrently starts one run per input of flow in its own goroutine and returns a channel of the results.
func startConcurrently(ctx context.Context, c *Client, flow string, inputs ...string) <-chan startResult {
	out := make(chan startResult, len(inputs))
	for _, in := range inputs {
		go func() {
			run, err := c.StartRunJSON(ctx, flow, json.RawMessage(in), nil)
			out <- startResult{input: in, run: run, err: err}
		}()
	}
	return out
}

// startInFlight makes a database with clFlows and a client, and starts one run of flow (input) that waits in the
// database for the flow lock until release is called: later starts of the flow queue behind it.
func startInFlight(t *testing.T, flow, input string) (db *pgtest.DB, c *Client, ctx context.Context, release func(), first <-chan startResult) {
	t.Helper()
	db = pgtest.New(t)
	clFlows(t, db.Pool)
	c = clClient(t, db)
	ctx = clCtx(t)
	release = holdFlowLock(t, db, flow)
	first = startConcurrently(ctx, c, flow, input)
	waitBlockedOnFlowLock(t, db, 1)
	return db, c, ctx, release, first
}

// StartRun calls that arrive while a start of the same flow is in flight start together: one transaction for all
// of them, each call getting its own run (its input, its step states) as a lone start would return it.
func TestClientCoalescesConcurrentStarts(t *testing.T) {
	t.Parallel()
	db, c, ctx, release, first := startInFlight(t, "chain", `{"n": 0}`)
	const n = 20
	inputs := make([]string, n)
	for i := range inputs {
		inputs[i] = fmt.Sprintf(`{"n": %d}`, i+1)
	}
	rest := startConcurrently(ctx, c, "chain", inputs...)
	waitFor(t, "every later start waits for the one in flight", func() bool { return c.starts.Waiting("chain") == n })
	release()

	r := <-first
	require.NoError(t, r.err)
	lone, err := c.GetRun(ctx, r.run.ID)
	require.NoError(t, err)
	require.Equal(t, lone, r.run, "the run as a read returns it")

	ids := make([]string, 0, n)
	for range n {
		r := <-rest
		require.NoError(t, r.err, r.input)
		require.JSONEq(t, r.input, string(r.run.Input))
		require.Equal(t, RunStarted, r.run.Status)
		require.Len(t, r.run.Steps, 2)
		require.Equal(t, StepStarted, r.run.Steps[0].Status)
		require.Equal(t, StepCreated, r.run.Steps[1].Status)
		ids = append(ids, r.run.ID)
	}
	var runs, transactions int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*), count(distinct xmin::text) from pgflow.runs where run_id = any ($1::uuid[])`,
		ids).Scan(&runs, &transactions))
	require.Equal(t, n, runs, "one run per call")
	require.Equal(t, 1, transactions, "the calls that waited started in one transaction")
	var tasks int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.step_tasks where run_id = any ($1::uuid[])`, ids).Scan(&tasks))
	require.Equal(t, n, tasks, "each run's first step has its task")
}

// When a full batch of starts waits behind the start in flight, a second call of the flow starts beside it (both
// wait for the flow lock here); further calls wait for one of them, and every call gets its run.
func TestClientStartsAFullBatchBesideTheOneInFlight(t *testing.T) {
	t.Parallel()
	db, c, ctx, release, first := startInFlight(t, "chain", `{"n": 0}`)
	full := make([]string, maxCoalescedStarts)
	for i := range full {
		full[i] = fmt.Sprintf(`{"n": %d}`, i+1)
	}
	second := startConcurrently(ctx, c, "chain", full...)
	waitBlockedOnFlowLock(t, db, 2)
	third := startConcurrently(ctx, c, "chain", `{"n": -1}`, `{"n": -2}`)
	waitFor(t, "the next calls wait: two starts are in flight", func() bool { return c.starts.Waiting("chain") == 2 })
	waitBlockedOnFlowLock(t, db, 2)
	release()

	ids := make([]string, 0, maxCoalescedStarts+3)
	collect := func(results <-chan startResult, n int) {
		for range n {
			r := <-results
			require.NoError(t, r.err, r.input)
			require.JSONEq(t, r.input, string(r.run.Input))
			ids = append(ids, r.run.ID)
		}
	}
	collect(first, 1)
	collect(second, maxCoalescedStarts)
	collect(third, 2)
	var runs, transactions int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*), count(distinct xmin::text) from pgflow.runs where run_id = any ($1::uuid[])`,
		ids).Scan(&runs, &transactions))
	require.Equal(t, maxCoalescedStarts+3, runs, "one run per call")
	require.Equal(t, 3, transactions, "the lone first start, the full batch beside it, then the two that waited")
}

// Large inputs go in smaller calls: three inputs of 1.5 MiB behind the start in flight weigh more than a call's
// 4 MiB, so two of them start beside it and the third waits for its own call.
func TestClientCoalescedStartsStayWithinTheirBytes(t *testing.T) {
	t.Parallel()
	db, c, ctx, release, first := startInFlight(t, "chain", `{"n": 0}`)
	large := func(n int) string { return fmt.Sprintf(`{"n": %d, "pad": "%s"}`, n, strings.Repeat("x", 3<<19)) }
	second := startConcurrently(ctx, c, "chain", large(1), large(2))
	waitFor(t, "two large starts wait", func() bool { return c.starts.Waiting("chain") == 2 })
	waitBlockedOnFlowLock(t, db, 1) // 3 MiB waiting: no second call yet
	third := startConcurrently(ctx, c, "chain", large(3))
	waitBlockedOnFlowLock(t, db, 2) // 4.5 MiB: a call of the first two starts beside the one in flight
	waitFor(t, "the third large start waits for a call of its own", func() bool { return c.starts.Waiting("chain") == 1 })
	release()

	ids := make([]string, 0, 4)
	for _, results := range []<-chan startResult{first, second, second, third} {
		r := <-results
		require.NoError(t, r.err)
		ids = append(ids, r.run.ID)
	}
	var runs, transactions int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*), count(distinct xmin::text) from pgflow.runs where run_id = any ($1::uuid[])`,
		ids).Scan(&runs, &transactions))
	require.Equal(t, 4, runs)
	require.Equal(t, 3, transactions, "the first alone, the first two large ones together, the third alone")
}

// When a coalesced start is refused (here one input is not the array a root map needs), nothing of it is kept and
// every call starts alone: the bad input gets its own error, the others their runs, none twice.
func TestClientCoalescedStartRefusedStartsEachAlone(t *testing.T) {
	t.Parallel()
	db, c, ctx, release, first := startInFlight(t, "rootmap", `[0]`)
	rest := startConcurrently(ctx, c, "rootmap", `[1, 2]`, `{"not": "an array"}`, `[3]`)
	waitFor(t, "three starts wait", func() bool { return c.starts.Waiting("rootmap") == 3 })
	release()

	require.NoError(t, (<-first).err)
	for range 3 {
		r := <-rest
		if r.input == `{"not": "an array"}` {
			require.ErrorContains(t, r.err, `pgflow: start run of flow "rootmap": Flow rootmap has root map steps but input is not an array (got object)`)
			continue
		}
		require.NoError(t, r.err, r.input)
		require.JSONEq(t, r.input, string(r.run.Input))
	}
	var runs int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = 'rootmap'`).Scan(&runs))
	require.Equal(t, 3, runs, "the first run and the two good inputs, each once")
}

// A call whose context ends while it waits for the start in flight is withdrawn: it returns its context's error
// and its run is never started.
func TestClientCoalescedStartWithdrawnWhileWaiting(t *testing.T) {
	t.Parallel()
	db, c, ctx, release, first := startInFlight(t, "chain", `{"who": "first"}`)
	gone, cancel := context.WithCancel(ctx)
	withdrawn := startConcurrently(gone, c, "chain", `{"who": "withdrawn"}`)
	kept := startConcurrently(ctx, c, "chain", `{"who": "kept"}`)
	waitFor(t, "two starts wait", func() bool { return c.starts.Waiting("chain") == 2 })
	cancel()
	require.ErrorIs(t, (<-withdrawn).err, context.Canceled)
	waitFor(t, "the withdrawn start leaves the queue", func() bool { return c.starts.Waiting("chain") == 1 })
	release()

	require.NoError(t, (<-first).err)
	require.NoError(t, (<-kept).err)
	rows, err := db.Pool.Query(ctx, `select input ->> 'who' from pgflow.runs where flow_slug = 'chain' order by 1`)
	require.NoError(t, err)
	who, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"first", "kept"}, who)
}
