package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// startRunAt starts a run of flow without a worker and sets its start time, so listings have a known order.
func startRunAt(t *testing.T, db *pgtest.DB, flow, input string, at time.Time) string {
	t.Helper()
	doc := decodeJSON[runJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "start", flow, "--input", input, "--json"))
	_, err := db.Pool.Exec(context.Background(), `update pgflow.runs set started_at = $2 where run_id = $1::uuid`, doc.RunID, at)
	require.NoError(t, err)
	return doc.RunID
}

func TestRunsList(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	compileFlow(t, db.Pool, squaresFlow("squares"))
	compileFlow(t, db.Pool, failingFlow("boom"))
	base := time.Date(2025, 11, 30, 3, 0, 0, 0, time.UTC)
	a := startRunAt(t, db, "squares", "[1]", base)
	b := startRunAt(t, db, "boom", "{}", base.Add(time.Minute))
	c := startRunAt(t, db, "squares", "[2]", base.Add(2*time.Minute))
	mustCLI(t, "--database-url", db.URL, "runs", "cancel", b, "--reason", "testing")

	// Newest first, ids as strings.
	doc := decodeJSON[runListJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "list", "--json"))
	require.Equal(t, []string{c, b, a}, listIDs(doc))
	require.Nil(t, doc.NextCursor)
	require.Equal(t, "cancelled", doc.Runs[1].Status)
	require.Contains(t, mustCLI(t, "--database-url", db.URL, "runs", "list", "--json"), `"run_id": "`+c+`"`)

	// Filters.
	doc = decodeJSON[runListJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "list", "--flow", "squares", "--json"))
	require.Equal(t, []string{c, a}, listIDs(doc))
	doc = decodeJSON[runListJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "list", "--status", "cancelled", "--json"))
	require.Equal(t, []string{b}, listIDs(doc))
	doc = decodeJSON[runListJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "list", "--json",
		"--started-after", base.Add(30*time.Second).Format(time.RFC3339), "--started-before", base.Add(90*time.Second).Format(time.RFC3339)))
	require.Equal(t, []string{b}, listIDs(doc))
	doc = decodeJSON[runListJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "list", "--json", "--started-after", "1h"))
	require.Empty(t, doc.Runs, "every run started in 2025")

	// Paging with the cursor: one run per page, the same order, then the end.
	var paged []string
	args := []string{"--database-url", db.URL, "runs", "list", "--limit", "1", "--json"}
	for page := 0; page < 5; page++ {
		doc = decodeJSON[runListJSON](t, mustCLI(t, args...))
		paged = append(paged, listIDs(doc)...)
		if doc.NextCursor == nil {
			break
		}
		args = []string{"--database-url", db.URL, "runs", "list", "--limit", "1", "--json", "--cursor", *doc.NextCursor}
	}
	require.Equal(t, []string{c, b, a}, paged[:3])

	// Text: a table and the command for the next page.
	out := mustCLI(t, "--database-url", db.URL, "runs", "list", "--limit", "2", "--flow", "squares")
	require.Regexp(t, `RUN\s+FLOW\s+STATUS\s+STEPS\s+STARTED\s+TIME\s+ERROR`, out)
	require.Regexp(t, c+`\s+squares\s+started\s+0/2\s+2025-11-30 03:02:00Z`, out)
	require.Contains(t, out, "more runs: pgflow runs list --flow squares --limit 2 --cursor ")
	require.Contains(t, mustCLI(t, "--database-url", db.URL, "runs", "list", "--flow", "nope"), "no runs match")

	// Bad values are named.
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--status", "done"}, `--status "done": must be one of started, completed, failed, cancelled`},
		{[]string{"--limit", "0"}, "--limit 0: must be from 1 to 1000"},
		{[]string{"--started-after", "yesterday"}, `--started-after "yesterday": not an RFC 3339 time`},
		{[]string{"--cursor", "garbage!"}, `"garbage!"`},
	} {
		r := runCLI(t, "", append([]string{"--database-url", db.URL, "runs", "list"}, tc.args...)...)
		require.Error(t, r.err, tc.args)
		require.Contains(t, r.err.Error(), tc.msg)
	}
}

func listIDs(doc runListJSON) []string {
	ids := make([]string, len(doc.Runs))
	for i, r := range doc.Runs {
		ids[i] = r.RunID
	}
	return ids
}

func TestRunsCancel(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	compileFlow(t, db.Pool, squaresFlow("squares"))
	id := decodeJSON[runJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "start", "squares", "--input", "[1, 2]", "--json")).RunID

	out := mustCLI(t, "--database-url", db.URL, "runs", "cancel", id, "--reason", "wrong input")
	require.Contains(t, out, "cancelled run "+id)
	require.Contains(t, out, "Status    cancelled")
	require.Regexp(t, `square\s+map\s+skipped\s+.*not run \(run cancelled\)`, out)
	require.Regexp(t, `sum\s+single\s+skipped\s+.*not run \(run cancelled\)`, out)
	require.Contains(t, out, `run `+id+` of flow "squares" was cancelled: wrong input`)

	doc := decodeJSON[runJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "show", id, "--json", "--tasks"))
	require.Equal(t, "cancelled", doc.Status)
	require.NotNil(t, doc.CancelledAt)
	require.Equal(t, "wrong input", *doc.CancelReason)
	require.Empty(t, doc.Warnings, "a cancelled run waits on nothing")
	for _, s := range doc.Steps {
		require.Equal(t, "skipped", s.Status)
		require.Equal(t, "run_cancelled", *s.SkipReason)
	}
	for _, task := range doc.Steps[0].TaskList {
		require.Equal(t, "cancelled", task.Status)
	}

	// Cancelling again changes nothing and says why; unknown and malformed ids are named.
	r := runCLI(t, "", "--database-url", db.URL, "runs", "cancel", id)
	require.ErrorContains(t, r.err, "cannot cancel run "+id)
	require.ErrorContains(t, r.err, "cancelled")
	const unknown = "0f8fad5b-d9cb-469f-a165-70867728950e"
	require.ErrorContains(t, runCLI(t, "", "--database-url", db.URL, "runs", "cancel", unknown).err, "run "+unknown+" not found")
	require.ErrorContains(t, runCLI(t, "", "--database-url", db.URL, "runs", "cancel", "x").err, `RUN_ID "x" is not a run id`)

	// watch on a cancelled run prints it at once and exits with status 1.
	r = runCLI(t, "", "--database-url", db.URL, "runs", "watch", id, "--plain")
	require.Equal(t, exitError{code: 1}, r.err)
	require.Contains(t, r.stdout, "square not run (run cancelled)")
	require.Contains(t, r.stdout, "run cancelled")
	require.Contains(t, r.stdout, "was cancelled: wrong input")
}

// flakyFlow: "ok" counts its calls; "flaky" after it fails while broken is set (one attempt).
func flakyFlow(slug string, okCalls *atomic.Int32, broken *atomic.Bool) *pgflow.Flow[map[string]any] {
	f := pgflow.NewFlow[map[string]any](slug, pgflow.MaxAttempts(1))
	ok := pgflow.Step(f, "ok", func(ctx context.Context, t *pgflow.Task[map[string]any]) (int, error) {
		return int(okCalls.Add(1)), nil
	})
	pgflow.Step(f, "flaky", func(ctx context.Context, t *pgflow.Task[map[string]any]) (int, error) {
		if broken.Load() {
			return 0, errors.New("the printer is on fire")
		}
		n, err := ok.Output(t)
		return n * 10, err
	}, pgflow.DependsOn(ok))
	pgflow.Step(f, "after", func(ctx context.Context, t *pgflow.Task[map[string]any]) (bool, error) {
		return true, nil
	}, pgflow.DependsOn(ok))
	return f
}

func TestRunsRetry(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var okCalls atomic.Int32
	var broken atomic.Bool
	broken.Store(true)
	flow := flakyFlow("flaky", &okCalls, &broken)
	compileFlow(t, db.Pool, flow)
	id := decodeJSON[runJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "start", "flaky", "--json")).RunID
	w := startWorker(t, db.Pool, flow)
	require.Equal(t, pgflow.RunFailed, waitTerminal(t, db.Pool, id).Status)
	require.NoError(t, w.stop())

	// The failed run shows its error; retry resumes it in place.
	out := mustCLI(t, "--database-url", db.URL, "runs", "show", id)
	require.Contains(t, out, "Status    failed after ")
	require.Contains(t, out, "the printer is on fire")

	broken.Store(false)
	// --fresh starts a new run with the same input; the failed run stays failed.
	out = mustCLI(t, "--database-url", db.URL, "runs", "retry", id, "--fresh", "--json")
	fresh := decodeJSON[runJSON](t, out)
	require.NotEqual(t, id, fresh.RunID)
	startWorker(t, db.Pool, flow)
	require.Equal(t, pgflow.RunCompleted, waitTerminal(t, db.Pool, fresh.RunID).Status)
	require.Equal(t, int32(2), okCalls.Load(), "the fresh run ran every step")
	require.Equal(t, "failed", decodeJSON[runJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "show", id, "--json")).Status)

	// Resuming in place: the run completes, its completed step is not run again, and the dependent step saw the
	// stored output.
	out = mustCLI(t, "--database-url", db.URL, "runs", "retry", id)
	require.Contains(t, out, "resumed run "+id)
	require.Equal(t, pgflow.RunCompleted, waitTerminal(t, db.Pool, id).Status)
	require.Equal(t, int32(2), okCalls.Load(), "the completed step is not run again")
	doc := decodeJSON[runJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "show", id, "--json"))
	require.JSONEq(t, `10`, string(doc.Steps[1].Output), "flaky saw ok's stored output (1)")

	// A completed run can be neither resumed nor retried fresh.
	r := runCLI(t, "", "--database-url", db.URL, "runs", "retry", id)
	require.ErrorContains(t, r.err, "cannot retry run "+id)
	require.ErrorContains(t, r.err, "is completed")
	r = runCLI(t, "", "--database-url", db.URL, "runs", "retry", id, "--fresh")
	require.ErrorContains(t, r.err, "is completed")
}

func TestRunsShowFailedRunNotRun(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	flow := failingFlow("fails")
	compileFlow(t, db.Pool, flow)
	// ok -> boom, plus "later" after boom, which never runs.
	_, err := db.Pool.Exec(context.Background(), `select pgflow.add_step('fails', 'later', array['boom'])`)
	require.NoError(t, err)
	id := decodeJSON[runJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "start", "fails", "--json")).RunID
	worker := startWorkerRow(t, db, "fails", false)
	for i := 0; i < 2; i++ {
		for _, c := range testutil.ClaimAll(t, db.Pool, "fails", worker) {
			if c.StepSlug == "boom" {
				testutil.FailTask(t, db.Pool, c, "the printer is on fire")
			} else {
				testutil.CompleteTask(t, db.Pool, c, `true`)
			}
		}
	}
	out := mustCLI(t, "--database-url", db.URL, "runs", "show", id)
	require.Contains(t, out, "Status    failed after ")
	require.Regexp(t, `later\s+single\s+skipped\s+.*not run \(run failed\)`, out)
}

// startWorkerRow registers a worker row for queue (no process behind it); stale makes its last heartbeat an hour
// old, so it counts as unresponsive.
func startWorkerRow(t *testing.T, db *pgtest.DB, queue string, stale bool) string {
	t.Helper()
	var id string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `select gen_random_uuid()::text`).Scan(&id))
	_, err := db.Pool.Exec(context.Background(), `select pgflow.register_worker($1::uuid, $2, 'cli-test')`, id, queue)
	require.NoError(t, err)
	if stale {
		_, err = db.Pool.Exec(context.Background(),
			`update pgflow.workers set last_heartbeat_at = now() - interval '1 hour' where worker_id = $1::uuid`, id)
		require.NoError(t, err)
	}
	return id
}

func TestRunsSayWhatTheRunWaitsOn(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	compileFlow(t, db.Pool, squaresFlow("squares"))

	// No worker at all: --wait says so on standard error before it waits (and gives up at --timeout).
	r := runCLI(t, "", "--database-url", db.URL, "runs", "start", "squares", "--input", "[1, 2]", "--wait", "--timeout", "200ms")
	require.ErrorContains(t, r.err, "still running after --timeout 200ms")
	require.Contains(t, r.stderr, `no alive worker serves queue "squares", which this run waits on (2 queued, 0 started tasks; no worker ever served it)`)
	id := strings.Fields(strings.TrimPrefix(r.err.Error(), "run "))[0]

	out := mustCLI(t, "--database-url", db.URL, "runs", "show", id)
	require.Contains(t, out, `warning: no alive worker serves queue "squares"`)
	doc := decodeJSON[runJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "show", id, "--json"))
	require.Len(t, doc.Warnings, 1)
	require.Equal(t, "no_worker", doc.Warnings[0].Kind)

	// A worker took both tasks, then stopped heartbeating an hour ago: the tasks outlived their timeout (10s) and
	// wait for stalled-task recovery; the queue still has no alive worker.
	dead := startWorkerRow(t, db, "squares", false)
	cs := testutil.ClaimAll(t, db.Pool, "squares", dead)
	require.Len(t, cs, 2)
	_, err := db.Pool.Exec(context.Background(),
		`update pgflow.workers set last_heartbeat_at = now() - interval '1 hour' where worker_id = $1::uuid`, dead)
	require.NoError(t, err)
	_, err = db.Pool.Exec(context.Background(),
		`update pgflow.step_tasks set queued_at = now() - interval '2 hours', started_at = now() - interval '1 hour'
		 where run_id = $1::uuid`, id)
	require.NoError(t, err)
	out = mustCLI(t, "--database-url", db.URL, "runs", "show", id)
	require.Contains(t, out, `warning: no alive worker serves queue "squares"`)
	require.Contains(t, out, `warning: task 0 of step "square" waits for stalled-task recovery: attempt 1 started 1h00m ago on worker `+dead)
	require.Contains(t, out, `warning: task 1 of step "square" waits for stalled-task recovery`)

	// An alive worker on the queue: the queue warning goes, the stalled tasks stay.
	startWorkerRow(t, db, "squares", false)
	out = mustCLI(t, "--database-url", db.URL, "runs", "show", id)
	require.NotContains(t, out, "no alive worker")
	require.Contains(t, out, "waits for stalled-task recovery")

	// watch shows the warnings too, and ends when the run is cancelled.
	id2 := decodeJSON[runJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "start", "squares", "--input", "[3]", "--json")).RunID
	_, err = db.Pool.Exec(context.Background(), `update pgflow.workers set stopped_at = now()`)
	require.NoError(t, err)
	out2 := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		root := newRootCmd()
		root.SetOut(out2)
		root.SetErr(out2)
		root.SetArgs([]string{"--database-url", db.URL, "runs", "watch", id2, "--plain", "--poll-interval", "50ms"})
		done <- root.ExecuteContext(context.Background())
	}()
	testutil.WaitFor(t, "watch to warn about the queue", func() bool {
		return strings.Contains(out2.String(), "warning: no alive worker serves queue")
	})
	mustCLI(t, "--database-url", db.URL, "runs", "cancel", id2)
	select {
	case err := <-done:
		require.Equal(t, exitError{code: 1}, err)
	case <-time.After(waitLimit):
		t.Fatal("watch did not end after the run was cancelled")
	}
	require.Contains(t, out2.String(), "run cancelled")
}
