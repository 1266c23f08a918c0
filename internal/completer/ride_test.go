package completer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/observe"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/taskrun"
)

const rideWorker = "d0000000-0000-4000-8000-000000000001" // the worker claimedTasks registers

// startRuns starts n more runs of flow, whose tasks wait in its queue.
func startRuns(t *testing.T, db *pgtest.DB, flow string, n int) {
	t.Helper()
	inputs := make([]json.RawMessage, n)
	for i := range inputs {
		inputs[i] = json.RawMessage(`{}`)
	}
	_, err := sqlapi.StartFlows(context.Background(), db.Pool, flow, inputs, nil)
	require.NoError(t, err)
}

// sendRide sends a claim of up to n tasks of flow through c.Ride on a goroutine of its own, and waits until it is on
// its way (handed over or waiting for the completer's next call) or has already returned: with no call to wait
// for, a ride may go out and return between two looks at the counter.
func sendRide(t *testing.T, c *Completer, flow string, n int, r *sqlapi.ReadAndStart) <-chan error {
	t.Helper()
	rode := make(chan error, 1)
	go func() {
		rode <- c.Ride(func(b *pgx.Batch) { sqlapi.QueueReadAndStartTasks(b, flow, flow, rideWorker, n, 60, r) })
	}()
	require.Eventually(t, func() bool { return c.riding.Load() == 1 || len(rode) == 1 }, time.Minute, time.Millisecond)
	return rode
}

func waitRide(t *testing.T, rode <-chan error) error {
	t.Helper()
	select {
	case err := <-rode:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the ride did not return within a minute")
		return nil
	}
}

// A claim that rides while the worker's result call is in flight waits for it, then goes out with the results
// that waited meanwhile: one call, one transaction (the rows both wrote carry one transaction id).
func TestARideGoesOutWithTheWaitingResultsInOneTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const n, m = 10, 7
	tasks := claimedTasks(t, db, "ride", 1+n)
	startRuns(t, db, "ride", m)
	gate := newResultGate(1)
	c := newGatedCompleter(t, db, gate, 1+n, time.Hour) // never stalled here
	o := &outcomes{ch: make(chan settled, 1+n)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	c.CompleteAsync(log, tasks[0], json.RawMessage(`"first"`), settleRun{o, tasks[0].RunID})
	gate.waitEntered(t) // the first call is in flight, held
	for _, mt := range tasks[1:] {
		c.CompleteAsync(log, mt, json.RawMessage(`"later"`), settleRun{o, mt.RunID})
	}
	var r sqlapi.ReadAndStart
	rode := sendRide(t, c, "ride", m, &r)
	select {
	case err := <-rode:
		t.Fatalf("the ride went out beside the result call in flight (error %v)", err)
	default:
	}

	close(gate.release)
	require.NoError(t, waitRide(t, rode))
	require.Len(t, r.Claimed, m)
	require.Equal(t, m, r.Read)
	require.Len(t, waitOutcomes(t, o, 1+n), 1+n)
	calls, most := gate.counts()
	require.Equal(t, 2, calls, "the ride went with the second result call, not in a call of its own")
	require.Equal(t, 1, most)

	// The n results of the second call and the m claims: one transaction wrote all of those rows.
	var rows, xids int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		select count(*), count(distinct xmin::text) from pgflow.step_tasks
		 where flow_slug = 'ride' and run_id <> $1::uuid and status in ('completed', 'started')`, tasks[0].RunID).
		Scan(&rows, &xids))
	require.Equal(t, n+m, rows)
	require.Equal(t, 1, xids)
}

// When the database refuses a result of the call a claim rides with, nothing of that call commits: the ride gets
// the error (its caller claims again alone) and the results are recorded without it, the refused one failed on
// its own.
func TestARideFailsWithItsCallAndTheResultsAreRecordedWithoutIt(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const m = 4
	tasks := claimedTasks(t, db, "ride_refused", 3)
	startRuns(t, db, "ride_refused", m)
	gate := newResultGate(1)
	c := newGatedCompleter(t, db, gate, 3, time.Hour)
	o := &outcomes{ch: make(chan settled, 3)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	c.CompleteAsync(log, tasks[0], json.RawMessage(`1`), settleRun{o, tasks[0].RunID})
	gate.waitEntered(t)
	c.CompleteAsync(log, tasks[1], json.RawMessage(`{"a": "x\u0000y"}`), settleRun{o, tasks[1].RunID}) // jsonb refuses it
	c.CompleteAsync(log, tasks[2], json.RawMessage(`3`), settleRun{o, tasks[2].RunID})
	var r sqlapi.ReadAndStart
	rode := sendRide(t, c, "ride_refused", m, &r)
	close(gate.release)

	err := waitRide(t, rode)
	require.ErrorContains(t, err, "pgflow.complete_tasks(2 tasks")
	require.ErrorContains(t, err, "22P05") // unsupported Unicode escape sequence
	got := map[string]observe.Outcome{}
	for range 3 {
		select {
		case s := <-o.ch:
			got[s.run] = s.outcome
		case <-time.After(time.Minute):
			t.Fatalf("%d of 3 outcomes after a minute", len(got))
		}
	}
	require.Equal(t, map[string]observe.Outcome{tasks[0].RunID: observe.Completed, tasks[1].RunID: observe.Failed,
		tasks[2].RunID: observe.Completed}, got)
	var queued int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`select count(*) from pgflow.step_tasks where flow_slug = 'ride_refused' and status = 'queued'`).Scan(&queued))
	require.Equal(t, m, queued, "the failed call claimed nothing")
}

// Once the completer has stopped, a ride is refused at once: nothing is sent.
func TestARideAfterTheCompleterStoppedIsRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	c := newGatedCompleter(t, db, newResultGate(0), 1, time.Hour)
	c.Stop()
	sent := false
	err := c.Ride(func(*pgx.Batch) { sent = true })
	require.ErrorIs(t, err, ErrStopped)
	require.False(t, sent)
}

// A ride waits for a call to carry it only as long as a call may run before the next goes out beside it: with
// both result calls stalled (held here, as calls waiting for row locks someone else holds would be), it is refused
// after StallAfter, nothing sent, and its caller goes alone.
func TestARideIsRefusedWhileTheResultCallsAreStalled(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	tasks := claimedTasks(t, db, "ride_stalled", 2)
	gate := newResultGate(2)
	c := newGatedCompleter(t, db, gate, 2, 20*time.Millisecond)
	o := &outcomes{ch: make(chan settled, 2)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c.CompleteAsync(log, tasks[0], json.RawMessage(`1`), settleRun{o, tasks[0].RunID})
	gate.waitEntered(t)
	c.CompleteAsync(log, tasks[1], json.RawMessage(`2`), settleRun{o, tasks[1].RunID})
	gate.waitEntered(t) // two calls in flight, both held: the completer takes nothing more

	sent := false
	err := c.Ride(func(*pgx.Batch) { sent = true })
	require.ErrorIs(t, err, errLaneStalled)
	require.False(t, sent)

	close(gate.release)
	require.Len(t, waitOutcomes(t, o, 2), 2)
}

// A result call that finds a ride announced (Expect) waits for it and asks for it on wanted (the poller then stops
// gathering slots: the results that wait may be what holds them), then takes it along: one call. When the
// announcement ends without a ride, the results go out alone.
func TestAResultCallWaitsForAnAnnouncedRide(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const m = 3
	tasks := claimedTasks(t, db, "ride_wanted", 2)
	startRuns(t, db, "ride_wanted", m)
	gate := newResultGate(0)
	// Only the ride or the end of the announcement ends the wait.
	c := newGatedCompleter(t, db, gate, 2, time.Hour, func(cfg *Config) { cfg.RideWait = time.Hour })
	o := &outcomes{ch: make(chan settled, 2)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	waitWanted := func(wanted <-chan struct{}) {
		t.Helper()
		select {
		case <-wanted:
		case <-time.After(time.Minute):
			t.Fatal("the result call did not ask for the announced ride within a minute")
		}
	}

	wanted, done := c.Expect()
	c.CompleteAsync(log, tasks[0], json.RawMessage(`1`), settleRun{o, tasks[0].RunID})
	waitWanted(wanted)
	var r sqlapi.ReadAndStart
	require.NoError(t, waitRide(t, sendRide(t, c, "ride_wanted", m, &r)))
	done()
	require.Len(t, r.Claimed, m)
	require.Len(t, waitOutcomes(t, o, 1), 1)
	calls, _ := gate.counts()
	require.Equal(t, 1, calls, "the result waited for the ride and went out with it")

	wanted, done = c.Expect()
	c.CompleteAsync(log, tasks[1], json.RawMessage(`2`), settleRun{o, tasks[1].RunID})
	waitWanted(wanted)
	done() // no ride after all
	require.Len(t, waitOutcomes(t, o, 1), 1)
	calls, _ = gate.counts()
	require.Equal(t, 2, calls)
}

// claimedMapTasks starts one run of a new flow whose only step maps over n elements and claims its n tasks as a
// worker of its own.
func claimedMapTasks(t *testing.T, db *pgtest.DB, flow string, n int) []taskrun.Meta {
	t.Helper()
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `select pgflow.create_flow($1)`, flow)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `select pgflow.add_step($1, 'items', step_type => 'map')`, flow)
	require.NoError(t, err)
	const worker = "d0000000-0000-4000-8000-000000000002"
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, worker, flow, "completer-test"))
	elements := make([]int, n)
	_, err = sqlapi.StartFlows(ctx, db.Pool, flow, []json.RawMessage{mustJSON(t, elements)}, nil)
	require.NoError(t, err)
	return claimQueued(t, db, flow, worker, n)
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

// mapResultsWaiting holds a completer's first result call (a one-step task of firstFlow) in flight and queues the
// results of n claimed tasks of a new map flow behind it; the caller sends a ride, then releases the gate.
func mapResultsWaiting(t *testing.T, db *pgtest.DB, firstFlow, mapFlow string, n int) (
	c *Completer, gate *resultGate, o *outcomes, first taskrun.Meta) {
	t.Helper()
	first = claimedTasks(t, db, firstFlow, 1)[0]
	tasks := claimedMapTasks(t, db, mapFlow, n)
	gate = newResultGate(1)
	c = newGatedCompleter(t, db, gate, 1+n, time.Hour)
	o = &outcomes{ch: make(chan settled, 1+n)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c.CompleteAsync(log, first, json.RawMessage(`"first"`), settleRun{o, first.RunID})
	gate.waitEntered(t)
	for _, mt := range tasks {
		c.CompleteAsync(log, mt, json.RawMessage(`1`), settleRun{o, taskLabel(mt)})
	}
	return c, gate, o, first
}

// taskLabel names a task in outcomes (a map step's tasks share their run).
func taskLabel(m taskrun.Meta) string {
	return fmt.Sprintf("%s/%s/%d", m.RunID, m.StepSlug, m.TaskIndex)
}

// With a task of a map step among the results, the results commit before the claim that rides with them runs, in
// the same call: the claim holds none of the locks on the step state and run that other workers' completions of
// the same step wait for. The claimed rows carry a later transaction than the completed ones.
func TestMapResultsCommitBeforeTheirRide(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const n, m = 6, 5
	c, gate, o, first := mapResultsWaiting(t, db, "ride_map_first", "ride_map", n)
	startRuns(t, db, "ride_map_first", m)
	var r sqlapi.ReadAndStart
	rode := sendRide(t, c, "ride_map_first", m, &r)
	close(gate.release)
	require.NoError(t, waitRide(t, rode))
	require.Len(t, r.Claimed, m)
	require.Len(t, waitOutcomes(t, o, 1+n), 1+n)
	calls, _ := gate.counts()
	require.Equal(t, 2, calls, "the ride went with the second result call, not in a call of its own")

	var resultXIDs, claimXIDs, later int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		with done as (select xmin::text::bigint as x from pgflow.step_tasks where flow_slug = 'ride_map' and status = 'completed'),
		     claimed as (select xmin::text::bigint as x from pgflow.step_tasks
		                  where flow_slug = 'ride_map_first' and run_id <> $1::uuid and status = 'started')
		select (select count(distinct x) from done), (select count(distinct x) from claimed),
		       (select count(*) from claimed where x > (select max(x) from done))`, first.RunID).
		Scan(&resultXIDs, &claimXIDs, &later))
	require.Equal(t, 1, resultXIDs, "the map results commit together")
	require.Equal(t, 1, claimXIDs)
	require.Equal(t, m, later, "the claim ran in a transaction after the results'")
	var status string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`select status from pgflow.runs where flow_slug = 'ride_map'`).Scan(&status))
	require.Equal(t, "completed", status)
}

// A ride that fails after the map results it went with committed gets its own error; the results stay recorded,
// are settled once, and are not sent again.
func TestARideFailingAfterMapResultsCommittedFailsAlone(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const n = 3
	c, gate, o, _ := mapResultsWaiting(t, db, "ride_map_fail_first", "ride_map_fail", n)
	rode := make(chan error, 1)
	go func() { rode <- c.Ride(func(b *pgx.Batch) { b.Queue(`select 1 / 0`) }) }()
	require.Eventually(t, func() bool { return c.riding.Load() == 1 }, time.Minute, time.Millisecond)
	close(gate.release)

	require.ErrorContains(t, waitRide(t, rode), "22012") // division by zero
	require.Len(t, waitOutcomes(t, o, 1+n), 1+n)
	calls, _ := gate.counts()
	require.Equal(t, 2, calls, "the recorded results were not sent again")
	var completed int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`select count(*) from pgflow.step_tasks where flow_slug = 'ride_map_fail' and status = 'completed'`).Scan(&completed))
	require.Equal(t, n, completed)
}

// When the database refuses a result of a call that would have committed map results before its ride, nothing of
// it commits and the ride never runs: the ride gets the error, the results are recorded without it (the refused
// one failed on its own), and the completer's later calls work (the pool drops the connection left in a failed
// transaction block).
func TestARideFailsWithRefusedMapResultsAndLaterCallsWork(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const n, m = 2, 3
	single := claimedTasks(t, db, "ride_map_refused_single", 2)
	tasks := claimedMapTasks(t, db, "ride_map_refused", n)
	startRuns(t, db, "ride_map_refused_single", m)
	gate := newResultGate(1)
	c := newGatedCompleter(t, db, gate, 2+n, time.Hour)
	o := &outcomes{ch: make(chan settled, 2+n)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	c.CompleteAsync(log, single[0], json.RawMessage(`1`), settleRun{o, single[0].RunID})
	gate.waitEntered(t)
	for _, mt := range tasks {
		c.CompleteAsync(log, mt, json.RawMessage(`1`), settleRun{o, taskLabel(mt)})
	}
	c.CompleteAsync(log, single[1], json.RawMessage(`{"a": "x\u0000y"}`), settleRun{o, single[1].RunID}) // jsonb refuses it
	var r sqlapi.ReadAndStart
	rode := sendRide(t, c, "ride_map_refused_single", m, &r)
	close(gate.release)

	err := waitRide(t, rode)
	require.ErrorContains(t, err, "pgflow.complete_tasks(3 tasks")
	require.ErrorContains(t, err, "22P05")
	got := map[string]observe.Outcome{}
	for range 2 + n {
		select {
		case s := <-o.ch:
			got[s.run] = s.outcome
		case <-time.After(time.Minute):
			t.Fatalf("%d of %d outcomes after a minute", len(got), 2+n)
		}
	}
	want := map[string]observe.Outcome{single[0].RunID: observe.Completed, single[1].RunID: observe.Failed}
	for _, mt := range tasks {
		want[taskLabel(mt)] = observe.Completed
	}
	require.Equal(t, want, got)
	var queued int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`select count(*) from pgflow.step_tasks where flow_slug = 'ride_map_refused_single' and status = 'queued'`).Scan(&queued))
	require.Equal(t, m, queued, "the failed call claimed nothing")

	// The completer goes on: a ride now claims the queued tasks.
	rode = sendRide(t, c, "ride_map_refused_single", m, &r)
	require.NoError(t, waitRide(t, rode))
	require.Len(t, r.Claimed, m)
}
