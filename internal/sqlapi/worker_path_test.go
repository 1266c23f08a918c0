package sqlapi_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

const (
	workerA = "11111111-1111-4111-8111-111111111111"
	workerB = "22222222-2222-4222-8222-222222222222"
)

// defineFlow creates flow slug with one root single step "only" and returns a started run's id.
func defineFlow(t *testing.T, pool *pgxpool.Pool, slug string, input string) string {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `select pgflow.create_flow($1)`, slug)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `select pgflow.add_step($1, 'only')`, slug)
	require.NoError(t, err)
	var runID string
	require.NoError(t, pool.QueryRow(ctx, `select r.run_id::text from pgflow.start_flow($1, $2::jsonb) as r`, slug, input).Scan(&runID))
	return runID
}

func TestEnsureFlowCompiledStatuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	defineFlow(t, db.Pool, "src", `{}`)
	var shape json.RawMessage
	require.NoError(t, db.Pool.QueryRow(ctx, `select pgflow._get_flow_shape('src')`).Scan(&shape))

	res, err := sqlapi.EnsureFlowCompiled(ctx, db.Pool, "copy", shape, sqlapi.FlowDeployment{}, false)
	require.NoError(t, err)
	require.Equal(t, "compiled", res.Status)
	require.Empty(t, res.Differences)

	res, err = sqlapi.EnsureFlowCompiled(ctx, db.Pool, "copy", shape, sqlapi.FlowDeployment{}, false)
	require.NoError(t, err)
	require.Equal(t, "verified", res.Status)

	var other map[string]any
	require.NoError(t, json.Unmarshal(shape, &other))
	other["steps"] = []any{}
	changed, err := json.Marshal(other)
	require.NoError(t, err)
	res, err = sqlapi.EnsureFlowCompiled(ctx, db.Pool, "copy", changed, sqlapi.FlowDeployment{}, false)
	require.NoError(t, err)
	require.Equal(t, "mismatch", res.Status)
	require.NotEmpty(t, res.Differences)

	res, err = sqlapi.EnsureFlowCompiled(ctx, db.Pool, "copy", changed, sqlapi.FlowDeployment{}, true)
	require.NoError(t, err)
	require.Equal(t, "recompiled", res.Status)
}

func TestWorkerRegistrationHeartbeatAndStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)

	listener := db.SessionPID(t)
	_, err := sqlapi.HeartbeatWorker(ctx, db.Pool, workerA, listener)
	require.ErrorIs(t, err, sqlapi.ErrWorkerNotRegistered)
	require.ErrorContains(t, err, workerA)

	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerA, "q1", "pgflow-go"))
	dep, err := sqlapi.HeartbeatWorker(ctx, db.Pool, workerA, listener)
	require.NoError(t, err)
	require.False(t, dep)
	w, err := sqlapi.GetWorker(ctx, db.Pool, workerA)
	require.NoError(t, err)
	require.NotNil(t, w.ListensAt, "a listening heartbeat records since when the worker listens")
	var pid uint32
	require.NoError(t, db.Pool.QueryRow(ctx, `select listener_pid from pgflow.workers where worker_id = $1`, workerA).Scan(&pid))
	require.Equal(t, listener, pid, "and in which session")
	_, err = sqlapi.HeartbeatWorker(ctx, db.Pool, workerA, 0)
	require.NoError(t, err)
	w, err = sqlapi.GetWorker(ctx, db.Pool, workerA)
	require.NoError(t, err)
	require.Nil(t, w.ListensAt, "a heartbeat without listening clears it")

	_, err = db.Pool.Exec(ctx, `update pgflow.workers set deprecated_at = now() where worker_id = $1`, workerA)
	require.NoError(t, err)
	dep, err = sqlapi.HeartbeatWorker(ctx, db.Pool, workerA, 0)
	require.NoError(t, err)
	require.True(t, dep)

	require.NoError(t, sqlapi.MarkWorkerStopped(ctx, db.Pool, workerA))
	var stopped bool
	var queue, fn string
	require.NoError(t, db.Pool.QueryRow(ctx,
		`select stopped_at is not null, queue_name, function_name from pgflow.workers where worker_id = $1`, workerA).
		Scan(&stopped, &queue, &fn))
	require.True(t, stopped)
	require.Equal(t, "q1", queue)
	require.Equal(t, "pgflow-go", fn)

	require.Error(t, sqlapi.RegisterWorker(ctx, db.Pool, "not-a-uuid", "q1", "x"))
}

func TestReadClaimCompleteAndAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	runID := defineFlow(t, db.Pool, "claims", `{"n": 0, "ok": false, "s": ""}`)
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerA, "claims", "pgflow-go"))

	msgs, err := sqlapi.ReadWithPoll(ctx, db.Pool, sqlapi.ReadParams{Queue: "claims", VisibilitySeconds: 5, Qty: 10, MaxPollSeconds: 1, PollIntervalMs: 10})
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.Equal(t, 1, msgs[0].ReadCount)

	tasks, err := sqlapi.StartTasks(ctx, db.Pool, "claims", "claims", []int64{msgs[0].ID, 999999}, workerA)
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	tk := tasks[0]
	require.Equal(t, "claims", tk.FlowSlug)
	require.Equal(t, runID, tk.RunID)
	require.Equal(t, "only", tk.StepSlug)
	require.Equal(t, msgs[0].ID, tk.MsgID)
	require.Equal(t, 0, tk.TaskIndex)
	require.Equal(t, 1, tk.Attempt)
	require.JSONEq(t, `{}`, string(tk.Input))
	require.JSONEq(t, `{"n": 0, "ok": false, "s": ""}`, string(tk.FlowInput))

	// A second claim of the same message claims nothing.
	again, err := sqlapi.StartTasks(ctx, db.Pool, "claims", "claims", []int64{msgs[0].ID}, workerA)
	require.NoError(t, err)
	require.Empty(t, again)

	// Fail once: the task is queued again; make it visible, claim it again: attempt 2.
	failed, _, err := sqlapi.FailTaskAt(ctx, db.Pool, sqlapi.TaskRef{RunID: runID, StepSlug: "only", Attempt: 1}, "first try failed", false, nil)
	require.NoError(t, err)
	require.Equal(t, sqlapi.FailedTask{Status: "queued", Outcome: sqlapi.OutcomeRecorded, CurrentAttempt: 1}, failed)
	_, err = db.Pool.Exec(ctx, `select pgmq.set_vt('claims', $1, 0)`, msgs[0].ID)
	require.NoError(t, err)
	msgs, err = sqlapi.ReadWithPoll(ctx, db.Pool, sqlapi.ReadParams{Queue: "claims", VisibilitySeconds: 5, Qty: 10, MaxPollSeconds: 1, PollIntervalMs: 10})
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	tasks, err = sqlapi.StartTasks(ctx, db.Pool, "claims", "claims", []int64{msgs[0].ID}, workerA)
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, 2, tasks[0].Attempt)

	done, err := sqlapi.CompleteTasks(ctx, db.Pool, []sqlapi.TaskResult{{RunID: runID, StepSlug: "only", Output: json.RawMessage(`0`), Attempt: 2}})
	require.NoError(t, err)
	require.Equal(t, []sqlapi.CompletedTask{{Status: "completed", Outcome: sqlapi.OutcomeRecorded}}, done)
	var out json.RawMessage
	var runStatus string
	require.NoError(t, db.Pool.QueryRow(ctx, `select status, output from pgflow.runs where run_id = $1`, runID).Scan(&runStatus, &out))
	require.Equal(t, "completed", runStatus)
	require.JSONEq(t, `{"only": 0}`, string(out))

	// Unknown tasks report no status.
	done, err = sqlapi.CompleteTasks(ctx, db.Pool, []sqlapi.TaskResult{{RunID: "33333333-3333-4333-8333-333333333333", StepSlug: "only", Output: json.RawMessage(`1`), Attempt: 1}})
	require.NoError(t, err)
	require.Equal(t, []sqlapi.CompletedTask{{Status: "", Outcome: sqlapi.OutcomeUnknown}}, done)

	// Nothing to read: an empty result after the poll wait.
	msgs, err = sqlapi.ReadWithPoll(ctx, db.Pool, sqlapi.ReadParams{Queue: "claims", VisibilitySeconds: 5, Qty: 10, MaxPollSeconds: 1, PollIntervalMs: 10})
	require.NoError(t, err)
	require.Empty(t, msgs)

	empty, err := sqlapi.StartTasks(ctx, db.Pool, "claims", "claims", nil, workerA)
	require.NoError(t, err)
	require.Empty(t, empty)
}

func TestStartTasksConcurrentClaimsAreExclusive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	_, err := db.Pool.Exec(ctx, `select pgflow.create_flow('exclusive')`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `select pgflow.add_step('exclusive', 'each', step_type => 'map')`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `select pgflow.start_flow('exclusive', '[1,2,3,4,5,6,7,8,9,10,11,12]'::jsonb)`)
	require.NoError(t, err)
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerA, "exclusive", "pgflow-go"))
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerB, "exclusive", "pgflow-go"))
	msgs, err := sqlapi.ReadWithPoll(ctx, db.Pool, sqlapi.ReadParams{Queue: "exclusive", VisibilitySeconds: 30, Qty: 20, MaxPollSeconds: 1, PollIntervalMs: 10})
	require.NoError(t, err)
	require.Len(t, msgs, 12)
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}

	var wg sync.WaitGroup
	results := make([][]sqlapi.ClaimedTask, 2)
	errs := make([]error, 2)
	for i, w := range []string{workerA, workerB} {
		wg.Go(func() { results[i], errs[i] = sqlapi.StartTasks(ctx, db.Pool, "exclusive", "exclusive", ids, w) })
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	seen := map[int]int{}
	for _, r := range results {
		for _, tk := range r {
			seen[tk.TaskIndex]++
			require.Equal(t, 1, tk.Attempt)
		}
	}
	require.Len(t, seen, 12)
	for idx, n := range seen {
		require.Equal(t, 1, n, "task %d claimed %d times", idx, n)
	}
}

func TestRunInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	runID := defineFlow(t, db.Pool, "inputs", `{"a": [1, 2]}`)
	raw, err := sqlapi.RunInput(ctx, db.Pool, runID)
	require.NoError(t, err)
	require.JSONEq(t, `{"a": [1, 2]}`, string(raw))
	_, err = sqlapi.RunInput(ctx, db.Pool, "33333333-3333-4333-8333-333333333333")
	require.ErrorIs(t, err, sqlapi.ErrRunNotFound)
	require.ErrorContains(t, err, "33333333-3333-4333-8333-333333333333")
}

func TestRequeueStalledTasksTakesTheMaintenanceLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	runID := defineFlow(t, db.Pool, "stalls", `{}`)
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerA, "stalls", "pgflow-go"))
	msgs, err := sqlapi.ReadWithPoll(ctx, db.Pool, sqlapi.ReadParams{Queue: "stalls", VisibilitySeconds: 5, Qty: 10, MaxPollSeconds: 1, PollIntervalMs: 10})
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	_, err = sqlapi.StartTasks(ctx, db.Pool, "stalls", "stalls", []int64{msgs[0].ID}, workerA)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `update pgflow.step_tasks
	                               set queued_at = now() - interval '10 minutes', started_at = now() - interval '5 minutes'
	                             where run_id = $1`, runID)
	require.NoError(t, err)

	// Another session holds the lock: nothing runs.
	holder, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	var got bool
	require.NoError(t, holder.QueryRow(ctx, `select pg_try_advisory_xact_lock($1)`, sqlapi.MaintenanceLockKey).Scan(&got))
	require.True(t, got)
	ran, n, err := sqlapi.RequeueStalledTasks(ctx, db.Pool)
	require.NoError(t, err)
	require.False(t, ran)
	require.Zero(t, n)
	require.NoError(t, holder.Rollback(ctx))

	ran, n, err = sqlapi.RequeueStalledTasks(ctx, db.Pool)
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, 1, n)
	var status string
	var requeued int
	require.NoError(t, db.Pool.QueryRow(ctx, `select status, requeued_count from pgflow.step_tasks where run_id = $1`, runID).Scan(&status, &requeued))
	require.Equal(t, "queued", status)
	require.Equal(t, 1, requeued)

	// The lock was released with the transaction: a second call runs (and finds nothing).
	ran, n, err = sqlapi.RequeueStalledTasks(ctx, db.Pool)
	require.NoError(t, err)
	require.True(t, ran)
	require.Zero(t, n)

}
