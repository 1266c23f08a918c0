package pgflowtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/pgflowtest"
)

// sumFlow is a 3-step DAG with a map: split the input into numbers, square each (map), add them up.
type sumFlow struct {
	f       *pgflow.Flow[string]
	split   pgflow.StepHandle[[]int]
	squares pgflow.StepHandle[[]int]
	total   pgflow.StepHandle[int]
}

func newSumFlow(slug string) *sumFlow {
	s := &sumFlow{f: pgflow.NewFlow[string](slug)}
	s.split = pgflow.Step(s.f, "split", func(ctx context.Context, t *pgflow.Task[string]) ([]int, error) {
		in, err := t.FlowInput(ctx)
		if err != nil {
			return nil, err
		}
		out := []int{} // not nil: a map over a null output fails the run
		for _, f := range strings.Fields(in) {
			var n int
			if _, err := fmt.Sscan(f, &n); err != nil {
				return nil, pgflow.Permanent(fmt.Errorf("not a number: %q", f))
			}
			out = append(out, n)
		}
		return out, nil
	})
	s.squares = pgflow.Map(s.f, "squares", s.split, func(ctx context.Context, t *pgflow.Task[string], n int) (int, error) {
		return n * n, nil
	})
	s.total = pgflow.Step(s.f, "total", func(ctx context.Context, t *pgflow.Task[string]) (int, error) {
		sq, err := s.squares.Output(t)
		if err != nil {
			return 0, err
		}
		in, err := t.FlowInput(ctx) // a dependent step loads the input from the database
		if err != nil {
			return 0, err
		}
		sum := 0
		for _, v := range sq {
			sum += v
		}
		if in == "1 2 3" && sum != 14 {
			return 0, errors.New("wrong sum")
		}
		return sum, nil
	}, pgflow.DependsOn(s.squares))
	return s
}

func TestRunFlowRunsADAGWithAMapAndReturnsTheStoredOutputs(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	s := newSumFlow("sums")

	run, err := pgflowtest.RunFlow(ctx, db.Pool, s.f, "1 2 3", nil)
	require.NoError(t, err)
	require.Equal(t, pgflow.RunCompleted, run.Status)
	split, err := pgflow.StepOutput(run, s.split)
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3}, split)
	squares, err := pgflow.StepOutput(run, s.squares)
	require.NoError(t, err)
	require.Equal(t, []int{1, 4, 9}, squares)
	out, err := pgflow.RunOutput[struct{ Total int }](run)
	require.NoError(t, err)
	require.Equal(t, 14, out.Total)

	// Every task was claimed by the kit's worker row and completed on its first attempt.
	tasks, err := sqlapi.ListRunTasks(ctx, db.Pool, sqlapi.ListRunTasksParams{RunID: run.ID})
	require.NoError(t, err)
	require.Len(t, tasks, 5)
	for _, task := range tasks {
		require.Equal(t, "completed", task.Status, "%s/%d", task.StepSlug, task.TaskIndex)
		require.Equal(t, 1, task.AttemptsCount)
	}
	w, err := sqlapi.GetWorker(ctx, db.Pool, *tasks[0].LastWorkerID)
	require.NoError(t, err)
	require.Equal(t, pgflowtest.WorkerFunctionName, w.FunctionName)
	require.NotNil(t, w.StoppedAt, "the worker row is marked stopped when RunFlow returns")

	// The run is what the client reads.
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer client.Close()
	got, err := client.GetRun(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, got, run)

	// An empty map completes at once; the flow is verified, not recompiled, on the second call.
	run, err = pgflowtest.RunFlow(ctx, db.Pool, s.f, "", nil)
	require.NoError(t, err)
	total, err := pgflow.StepOutput(run, s.total)
	require.NoError(t, err)
	require.Zero(t, total)
}

func TestRunFlowReturnsAFailedRunWithItsError(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var attempts atomic.Int32
	f := pgflow.NewFlow[int]("failing", pgflow.MaxAttempts(3), pgflow.BaseDelay(time.Hour))
	pgflow.Step(f, "flaky", func(ctx context.Context, t *pgflow.Task[int]) (int, error) {
		attempts.Add(1)
		return 0, fmt.Errorf("attempt %d failed", t.Attempt)
	})

	// The retries' one-hour delays are skipped: the three attempts run at once.
	run, err := pgflowtest.RunFlow(t.Context(), db.Pool, f, 1, nil)
	require.ErrorIs(t, err, pgflow.ErrRunFailed)
	require.ErrorContains(t, err, `step "flaky": attempt 3 failed`)
	require.NotNil(t, run)
	require.Equal(t, pgflow.RunFailed, run.Status)
	require.Equal(t, pgflow.StepFailed, run.Step("flaky").Status)
	require.Equal(t, "attempt 3 failed", run.Step("flaky").ErrorMessage)
	require.EqualValues(t, 3, attempts.Load())
}

func TestRunFlowRetriesUntilAnAttemptSucceeds(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := pgflow.NewFlow[int]("retrying", pgflow.BaseDelay(time.Hour))
	step := pgflow.Step(f, "third_time", func(ctx context.Context, t *pgflow.Task[int]) (int, error) {
		if t.Attempt < 3 {
			return 0, errors.New("not yet")
		}
		return t.Attempt, nil
	}, pgflow.MaxAttempts(5))
	run, err := pgflowtest.RunFlow(t.Context(), db.Pool, f, 0, nil)
	require.NoError(t, err)
	got, err := pgflow.StepOutput(run, step)
	require.NoError(t, err)
	require.Equal(t, 3, got)
}

func TestRunFlowRecordsFailuresAsAWorkerDoes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for _, tc := range []struct {
		name     string
		handler  func(ctx context.Context, t *pgflow.Task[int]) (string, error)
		message  string
		attempts int32
	}{
		{"permanent", func(context.Context, *pgflow.Task[int]) (string, error) {
			return "", pgflow.Permanent(errors.New("bad input"))
		}, "bad input", 1},
		{"panics", func(context.Context, *pgflow.Task[int]) (string, error) { panic("kaboom") },
			`panic in handler of step "s" (task 0): kaboom`, 3},
		{"refused", func(context.Context, *pgflow.Task[int]) (string, error) { return "nul \x00 byte", nil },
			`flow "refused", step "s": the database refused the handler's output`, 1},
	} {
		var attempts atomic.Int32
		f := pgflow.NewFlow[int](tc.name, pgflow.MaxAttempts(3))
		pgflow.Step(f, "s", func(ctx context.Context, t *pgflow.Task[int]) (string, error) {
			attempts.Add(1)
			return tc.handler(ctx, t)
		})
		run, err := pgflowtest.RunFlow(t.Context(), db.Pool, f, 0, nil)
		require.ErrorIs(t, err, pgflow.ErrRunFailed, tc.name)
		require.Contains(t, run.Step("s").ErrorMessage, tc.message, tc.name)
		require.Equal(t, tc.attempts, attempts.Load(), "%s: attempts (a panic is retried, a permanent error is not)", tc.name)
	}
}

func TestRunFlowDoesNotWaitForAStartDelay(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := pgflow.NewFlow[int]("delayed")
	first := pgflow.Step(f, "first", func(ctx context.Context, t *pgflow.Task[int]) (int, error) { return 1, nil },
		pgflow.StartDelay(time.Hour))
	later := pgflow.Step(f, "later", func(ctx context.Context, t *pgflow.Task[int]) (int, error) {
		n, err := first.Output(t)
		return n + 1, err
	}, pgflow.DependsOn(first), pgflow.StartDelay(24*time.Hour))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a hang fails the test instead of hanging it
	defer cancel()
	run, err := pgflowtest.RunFlow(ctx, db.Pool, f, 0, nil)
	require.NoError(t, err)
	got, err := pgflow.StepOutput(run, later)
	require.NoError(t, err)
	require.Equal(t, 2, got)
}

func TestRunFlowFailsAnAttemptAtItsTimeout(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := pgflow.NewFlow[int]("timing_out")
	pgflow.Step(f, "stuck", func(ctx context.Context, t *pgflow.Task[int]) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}, pgflow.Timeout(3*time.Second), pgflow.MaxAttempts(1))
	run, err := pgflowtest.RunFlow(t.Context(), db.Pool, f, 0, nil)
	require.ErrorIs(t, err, pgflow.ErrRunFailed)
	require.Equal(t, `step "stuck" timed out after 3s (attempt 1 of 1)`, run.Step("stuck").ErrorMessage)
}

func TestRunFlowInATransactionLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	s := newSumFlow("sums_tx")
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	run, err := pgflowtest.RunFlow(ctx, tx, s.f, "1 2 3", nil)
	require.NoError(t, err)
	total, err := pgflow.StepOutput(run, s.total)
	require.NoError(t, err)
	require.Equal(t, 14, total)
	runs, err := pgflowtest.StartedRuns(ctx, tx, "sums_tx")
	require.NoError(t, err)
	require.Len(t, runs, 1)

	require.NoError(t, tx.Rollback(ctx))
	runs, err = pgflowtest.StartedRuns(ctx, db.Pool, "sums_tx")
	require.NoError(t, err)
	require.Empty(t, runs, "the run was rolled back with the transaction")
	flows, err := sqlapi.ListFlows(ctx, db.Pool, sqlapi.ListFlowsParams{})
	require.NoError(t, err)
	require.Empty(t, flows, "so was the flow")
}

func TestRunFlowsInParallelRunTheirOwnRunsOnly(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := newSumFlow("sums_parallel")
	const n = 6
	var wg sync.WaitGroup
	totals := make([]int, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			run, err := pgflowtest.RunFlow(t.Context(), db.Pool, s.f, strings.Repeat("1 ", i+1), nil)
			if err == nil {
				totals[i], err = pgflow.StepOutput(run, s.total)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, i+1, totals[i])
	}
}

func TestDriveRunRunsARunTheCodeUnderTestStarted(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	s := newSumFlow("sums_started")
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer client.Close()
	require.NoError(t, client.EnsureFlow(ctx, s.f, nil))
	started, err := pgflow.StartRun(ctx, client, s.f, "2 3", nil)
	require.NoError(t, err)

	run, err := pgflowtest.DriveRun(ctx, db.Pool, s.f, strings.ToUpper(started.ID), nil)
	require.NoError(t, err)
	require.Equal(t, started.ID, run.ID)
	total, err := pgflow.StepOutput(run, s.total)
	require.NoError(t, err)
	require.Equal(t, 13, total)

	// A finished run is returned as it is; a failed one with its error.
	again, err := pgflowtest.DriveRun(ctx, db.Pool, s.f, run.ID, nil)
	require.NoError(t, err)
	require.Equal(t, run, again)
	bad, err := pgflow.StartRun(ctx, client, s.f, "2 x", nil)
	require.NoError(t, err)
	run, err = pgflowtest.DriveRun(ctx, db.Pool, s.f, bad.ID, nil)
	require.ErrorIs(t, err, pgflow.ErrRunFailed)
	require.ErrorContains(t, err, `not a number: "x"`)
	require.Equal(t, pgflow.RunFailed, run.Status)

	// Wrong flow, unknown run, bad id.
	other := newSumFlow("sums_other")
	_, err = pgflowtest.DriveRun(ctx, db.Pool, other.f, started.ID, nil)
	require.EqualError(t, err, fmt.Sprintf(`pgflowtest: run %s of flow "sums_other": the run belongs to flow "sums_started"`, started.ID))
	_, err = pgflowtest.DriveRun(ctx, db.Pool, s.f, "00000000-0000-0000-0000-000000000001", nil)
	require.ErrorIs(t, err, pgflow.ErrRunNotFound)
	_, err = pgflowtest.DriveRun(ctx, db.Pool, s.f, "nope", nil)
	require.ErrorIs(t, err, pgflow.ErrInvalidRunID)
}

func TestDriveRunReportsTasksHeldByAnotherWorker(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	s := newSumFlow("sums_held")
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer client.Close()
	require.NoError(t, client.EnsureFlow(ctx, s.f, nil))
	started, err := pgflow.StartRun(ctx, client, s.f, "2", nil)
	require.NoError(t, err)

	// Another worker claims the root task (the real claim) and never reports.
	tasks, err := sqlapi.ListRunTasks(ctx, db.Pool, sqlapi.ListRunTasksParams{RunID: started.ID})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	const other = "0b0b0b0b-0000-4000-8000-000000000000"
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, other, "sums_held", "elsewhere"))
	claimed, err := sqlapi.StartTasks(ctx, db.Pool, "sums_held", "sums_held", []int64{*tasks[0].MessageID}, other)
	require.NoError(t, err)
	require.Len(t, claimed, 1)

	run, err := pgflowtest.DriveRun(ctx, db.Pool, s.f, started.ID, nil)
	require.EqualError(t, err, fmt.Sprintf(`pgflowtest: run %s of flow "sums_held" is started, but none of its tasks is queued: `+
		`step "split" task 0 is started by worker %s (is a worker running this flow on this database?)`, started.ID, other))
	require.Equal(t, pgflow.RunStarted, run.Status)
}

func TestRunFlowChecksTheDatabaseAndTheDefinition(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newSumFlow("sums_checked")

	_, err := pgflowtest.RunFlow(ctx, pgtest.NewEmpty(t).Pool, s.f, "1", nil)
	require.ErrorIs(t, err, sqlapi.ErrSchemaTooOld)
	require.ErrorContains(t, err, "pgflow migrate up")

	db := pgtest.New(t)
	_, err = pgflowtest.RunFlow(ctx, db.Pool, s.f, "1", nil)
	require.NoError(t, err)
	changed := pgflow.NewFlow[string]("sums_checked")
	one := pgflow.Step(changed, "only", func(ctx context.Context, t *pgflow.Task[string]) (string, error) { return "new", nil })
	_, err = pgflowtest.RunFlow(ctx, db.Pool, changed, "1", nil)
	var mismatch *pgflow.ShapeMismatchError
	require.ErrorAs(t, err, &mismatch)
	require.ErrorContains(t, err, "set RunFlowOpts.AllowDataLoss")
	run, err := pgflowtest.RunFlow(ctx, db.Pool, changed, "1", &pgflowtest.RunFlowOpts{AllowDataLoss: true})
	require.NoError(t, err)
	got, err := pgflow.StepOutput(run, one)
	require.NoError(t, err)
	require.Equal(t, "new", got)

	const id = "5c5c5c5c-0000-4000-8000-000000000000"
	run, err = pgflowtest.RunFlow(ctx, db.Pool, changed, "2", &pgflowtest.RunFlowOpts{RunID: id})
	require.NoError(t, err)
	require.Equal(t, id, run.ID)
	_, err = pgflowtest.RunFlow(ctx, db.Pool, changed, "2", &pgflowtest.RunFlowOpts{RunID: id})
	require.ErrorContains(t, err, "RunFlowOpts.RunID \""+id+"\" is already the id of a run")
	_, err = pgflowtest.RunFlow(ctx, db.Pool, changed, "2", &pgflowtest.RunFlowOpts{RunID: "x"})
	require.ErrorIs(t, err, pgflow.ErrInvalidRunID)

	broken := pgflow.NewFlow[int]("broken", pgflow.MaxAttempts(-1))
	_, err = pgflowtest.RunFlow(ctx, db.Pool, broken, 1, nil)
	require.ErrorContains(t, err, `pgflowtest: RunFlow: flow "broken" has definition errors`)
	_, err = pgflowtest.RunFlow[int](ctx, db.Pool, nil, 1, nil)
	require.EqualError(t, err, "pgflowtest: RunFlow: the flow is nil")
}

func TestRunFlowReturnsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithCancel(t.Context())
	f := pgflow.NewFlow[int]("cancelled")
	pgflow.Step(f, "waits", func(hctx context.Context, t *pgflow.Task[int]) (int, error) {
		cancel() // the test gives up while the handler runs
		<-hctx.Done()
		return 0, hctx.Err()
	})
	_, err := pgflowtest.RunFlow(ctx, db.Pool, f, 0, nil)
	require.ErrorIs(t, err, context.Canceled)

	// The task went back to the queue without spending its attempt, as in a worker's shutdown.
	runs, err := pgflowtest.StartedRuns(t.Context(), db.Pool, "cancelled")
	require.NoError(t, err)
	require.Len(t, runs, 1)
	tasks, err := sqlapi.ListRunTasks(t.Context(), db.Pool, sqlapi.ListRunTasksParams{RunID: runs[0].ID})
	require.NoError(t, err)
	require.Equal(t, "queued", tasks[0].Status)
	require.Zero(t, tasks[0].AttemptsCount, "the attempt was not spent")
}

// A flow with per-step queues runs the same way: each task is claimed from its step's queue.
func TestRunFlowRunsAFlowWithPerStepQueues(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := pgflow.NewFlow[int]("per_step_run", pgflow.QueuePerStep())
	double := pgflow.Step(f, "double", func(ctx context.Context, t *pgflow.Task[int]) (int, error) {
		n, err := t.FlowInput(ctx)
		return 2 * n, err
	})
	plusOne := pgflow.Step(f, "plus_one", func(ctx context.Context, t *pgflow.Task[int]) (int, error) {
		n, err := double.Output(t)
		return n + 1, err
	}, pgflow.DependsOn(double))
	run, err := pgflowtest.RunFlow(t.Context(), db.Pool, f, 20, nil)
	require.NoError(t, err)
	got, err := pgflow.StepOutput(run, plusOne)
	require.NoError(t, err)
	require.Equal(t, 41, got)
	var queues []string
	require.NoError(t, db.Pool.QueryRow(t.Context(), `select array_agg(queue_name order by queue_name) from pgflow.step_tasks
		where run_id = $1`, run.ID).Scan(&queues))
	require.Equal(t, []string{"per_step_run__double", "per_step_run__plus_one"}, queues)
}

// A run pgflowtest returns reads exactly as Client.GetRun reads it, also the fields of a cancelled run.
func TestDriveRunReturnsTheRunAsClientGetRunReadsIt(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	s := newSumFlow("same_as_client")
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	t.Cleanup(client.Close)

	done, err := pgflowtest.RunFlow(ctx, db.Pool, s.f, "1 2 3", nil)
	require.NoError(t, err)
	read, err := client.GetRun(ctx, done.ID)
	require.NoError(t, err)
	require.Equal(t, read, done)

	started, err := pgflow.StartRun(ctx, client, s.f, "4 5", nil)
	require.NoError(t, err)
	_, err = client.CancelRun(ctx, started.ID, &pgflow.CancelRunOpts{Reason: "not needed"})
	require.NoError(t, err)
	cancelled, err := pgflowtest.DriveRun(ctx, db.Pool, s.f, started.ID, nil)
	require.ErrorIs(t, err, pgflow.ErrRunCancelled)
	require.Equal(t, "not needed", cancelled.CancelReason)
	read, err = client.GetRun(ctx, started.ID)
	require.NoError(t, err)
	require.Equal(t, read, cancelled)
}
