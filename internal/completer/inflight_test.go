package completer

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/observe"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/taskrun"
)

// resultGate is a pgx tracer that sees every result call (a batch that runs pgflow.complete_tasks) as it starts
// and ends, and holds the first hold of them at their start until release is closed.
type resultGate struct {
	hold    int
	entered chan struct{} // one value per held call, once it is held
	release chan struct{}

	mu                           sync.Mutex
	calls, inFlight, maxInFlight int
}

type resultCallKey struct{}

func newResultGate(hold int) *resultGate {
	return &resultGate{hold: hold, entered: make(chan struct{}, hold), release: make(chan struct{})}
}

func (g *resultGate) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	isResult := false
	for _, q := range d.Batch.QueuedQueries {
		isResult = isResult || strings.Contains(q.SQL, "pgflow.complete_tasks")
	}
	if !isResult {
		return ctx
	}
	g.mu.Lock()
	g.calls++
	n := g.calls
	g.inFlight++
	g.maxInFlight = max(g.maxInFlight, g.inFlight)
	g.mu.Unlock()
	if n <= g.hold {
		g.entered <- struct{}{}
		<-g.release
	}
	return context.WithValue(ctx, resultCallKey{}, true)
}

func (g *resultGate) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (g *resultGate) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	if ctx.Value(resultCallKey{}) != nil {
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
	}
}

func (g *resultGate) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (g *resultGate) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// waitEntered waits (a minute at most) until one more call is held.
func (g *resultGate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(time.Minute):
		calls, _ := g.counts()
		t.Fatalf("no further result call was held within a minute (%d calls)", calls)
	}
}

// counts returns the result calls so far and the most that were in flight at once.
func (g *resultGate) counts() (calls, maxInFlight int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls, g.maxInFlight
}

// outcomes is a Settler per task that reports each outcome on one channel.
type outcomes struct{ ch chan settled }

type settled struct {
	run     string
	outcome observe.Outcome
}

type settleRun struct {
	o   *outcomes
	run string
}

func (s settleRun) Settle(o observe.Outcome) { s.o.ch <- settled{s.run, o} }

// claimedTasks starts n one-step runs of a new flow and claims their tasks as a registered worker.
func claimedTasks(t *testing.T, db *pgtest.DB, flow string, n int) []taskrun.Meta {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{`select pgflow.create_flow($1)`, `select pgflow.add_step($1, 'only')`} {
		_, err := db.Pool.Exec(ctx, q, flow)
		require.NoError(t, err)
	}
	const worker = "d0000000-0000-4000-8000-000000000001"
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, worker, flow, "completer-test"))
	inputs := make([]json.RawMessage, n)
	for i := range inputs {
		inputs[i] = json.RawMessage(`{}`)
	}
	_, err := sqlapi.StartFlows(ctx, db.Pool, flow, inputs, nil)
	require.NoError(t, err)
	return claimQueued(t, db, flow, worker, n)
}

// claimQueued claims the n tasks queued for flow (in its own queue) as worker and returns what a worker's
// completer knows of them.
func claimQueued(t *testing.T, db *pgtest.DB, flow, worker string, n int) []taskrun.Meta {
	t.Helper()
	claimed, _, _, err := sqlapi.ReadAndStartTasks(context.Background(), db.Pool, flow, flow, worker, n, 60)
	require.NoError(t, err)
	require.Len(t, claimed, n)
	metas := make([]taskrun.Meta, n)
	for i, c := range claimed {
		metas[i] = taskrun.Meta{RunID: c.RunID, FlowSlug: c.FlowSlug, StepSlug: c.StepSlug, TaskIndex: c.TaskIndex,
			Attempt: c.Attempt, MessageID: c.MsgID, WorkerID: worker, QueueName: flow}
	}
	return metas
}

func newGatedCompleter(t *testing.T, db *pgtest.DB, gate *resultGate, queueSize int, stall time.Duration,
	opts ...func(*Config)) *Completer {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = gate
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ctx := context.Background()
	cc := Config{DB: pool, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), QueueSize: queueSize,
		HardStop: ctx, Calls: ctx, Base: ctx, StallAfter: stall}
	for _, o := range opts {
		o(&cc)
	}
	c := New(cc)
	t.Cleanup(func() {
		select {
		case <-gate.release:
		default:
			close(gate.release)
		}
		c.Stop()
	})
	return c
}

// waitOutcomes reads n outcomes (a minute at most) and requires every one to be Completed.
func waitOutcomes(t *testing.T, o *outcomes, n int) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for range n {
		select {
		case s := <-o.ch:
			require.Equal(t, observe.Completed, s.outcome, "run %s", s.run)
			got[s.run] = true
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d outcomes after a minute", len(got), n)
		}
	}
	return got
}

// While a result call is in flight, the results that arrive wait for it and then go out together in one call: a
// worker has one result call in flight at a time. Before, a second flusher took them as they came, in smaller
// batches beside the first (docs/performance.md, fifteenth round).
func TestResultsThatArriveDuringACallGoOutTogetherAfterIt(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const n = 20
	tasks := claimedTasks(t, db, "one_call", n+1)
	gate := newResultGate(1)
	c := newGatedCompleter(t, db, gate, n+1, time.Hour) // never stalled here
	o := &outcomes{ch: make(chan settled, n+1)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	c.CompleteAsync(log, tasks[0], json.RawMessage(`"first"`), settleRun{o, tasks[0].RunID})
	gate.waitEntered(t) // the first call is in flight, held
	for _, m := range tasks[1:] {
		c.CompleteAsync(log, m, json.RawMessage(`"later"`), settleRun{o, m.RunID})
	}
	require.Len(t, c.queue, n, "nothing takes the results that arrived while the first call is in flight")
	calls, _ := gate.counts()
	require.Equal(t, 1, calls)

	close(gate.release)
	require.Len(t, waitOutcomes(t, o, n+1), n+1)
	calls, most := gate.counts()
	require.Equal(t, 2, calls, "the results that waited were recorded in one call")
	require.Equal(t, 1, most, "one result call in flight at a time")
	var completed int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`select count(*) from pgflow.runs where flow_slug = 'one_call' and status = 'completed'`).Scan(&completed))
	require.Equal(t, n+1, completed)
}

// A result call that stalls (here held by the test, as a call waiting for a row lock someone else holds would be)
// holds back the worker's other results for StallAfter only: then they go out in a second call beside it. Two
// stalled calls are the most: what arrives then waits for one of them to return.
func TestAStalledResultCallDoesNotHoldBackTheOthers(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const n, m = 10, 5
	tasks := claimedTasks(t, db, "stalled", 1+n+m)
	gate := newResultGate(2)
	c := newGatedCompleter(t, db, gate, 1+n+m, 20*time.Millisecond)
	o := &outcomes{ch: make(chan settled, 1+n+m)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The first call is held: after StallAfter the next results go out beside it (and are held too).
	c.CompleteAsync(log, tasks[0], json.RawMessage(`1`), settleRun{o, tasks[0].RunID})
	gate.waitEntered(t)
	for _, mt := range tasks[1 : 1+n] {
		c.CompleteAsync(log, mt, json.RawMessage(`2`), settleRun{o, mt.RunID})
	}
	gate.waitEntered(t)
	calls, most := gate.counts()
	require.Equal(t, 2, calls)
	require.Equal(t, 2, most)

	// Two calls stalled: what arrives now waits.
	for _, mt := range tasks[1+n:] {
		c.CompleteAsync(log, mt, json.RawMessage(`3`), settleRun{o, mt.RunID})
	}
	// (The second call took what had arrived when the first had stalled: all n, or the first of them.)
	require.GreaterOrEqual(t, len(c.queue), m, "a third call does not start while two are in flight")
	select {
	case s := <-o.ch:
		t.Fatalf("run %s settled while every call was held", s.run)
	default:
	}

	close(gate.release)
	require.Len(t, waitOutcomes(t, o, 1+n+m), 1+n+m)
	calls, most = gate.counts()
	require.Equal(t, 3, calls)
	require.Equal(t, 2, most)
}
