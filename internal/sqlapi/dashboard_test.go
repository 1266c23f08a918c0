package sqlapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/schema"
)

const dashWorker = "99999999-0000-4000-8000-000000000009"

// dashExec runs statements in order.
func dashExec(t *testing.T, pool *pgxpool.Pool, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		_, err := pool.Exec(context.Background(), q)
		require.NoError(t, err, q)
	}
}

// dashClaimAll reads every visible message of queue and claims the tasks behind them.
func dashClaimAll(t *testing.T, pool *pgxpool.Pool, queue string) [][3]any {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
select t.run_id::text, t.step_slug, t.task_index
from pgflow.start_tasks($1, array(select m.msg_id from pgmq.read($1, 60, 1000) as m), $2::uuid) as t`, queue, dashWorker)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([3]any, error) {
		var id, step string
		var idx int
		err := r.Scan(&id, &step, &idx)
		return [3]any{id, step, idx}, err
	})
	require.NoError(t, err)
	return out
}

func TestDashFlowsAndQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	diamondAndMap(t, db.Pool)
	dashExec(t, db.Pool, `select pgflow.register_worker('`+dashWorker+`', 'diamond', 'f')`)
	_, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "diamond", json.RawMessage(`{}`), "")
	require.NoError(t, err)
	_, err = sqlapi.StartFlowWithStates(ctx, db.Pool, "diamond", json.RawMessage(`{}`), "")
	require.NoError(t, err)
	_, err = sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`[]`), "") // completes at once
	require.NoError(t, err)
	dashExec(t, db.Pool, `update pgflow.steps set opt_max_attempts = 1 where flow_slug = 'diamond'`)
	claimed := dashClaimAll(t, db.Pool, "diamond")
	require.Len(t, claimed, 2)
	_, err = db.Pool.Exec(ctx, `select pgflow.fail_task($1::uuid, 'a', 0, 'x')`, claimed[0][0])
	require.NoError(t, err)

	flows, err := sqlapi.DashFlows(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, flows, 2)
	d := flows[0]
	require.Equal(t, "diamond", d.FlowSlug)
	require.Equal(t, sqlapi.RunCounts{Started: 1, Failed: 1}, d.Runs)
	require.Len(t, d.Steps, 4)
	require.Equal(t, []string{"b", "c"}, d.Steps[3].Deps)
	require.NotNil(t, d.Steps[0].QueueName)
	require.Equal(t, "diamond", *d.Steps[0].QueueName)
	require.Equal(t, 5, d.MaxAttempts)
	require.Equal(t, sqlapi.RunCounts{Completed: 1}, flows[1].Runs)

	queues, err := sqlapi.DashQueues(ctx, db.Pool)
	require.NoError(t, err)
	require.Contains(t, queues, "diamond")
	q := queues["diamond"]
	require.NoError(t, q.Err)
	require.EqualValues(t, 1, q.Length)  // the started run's claimed task; the failed one's was archived
	require.EqualValues(t, 0, q.Visible) // claimed: invisible
	require.EqualValues(t, 2, q.Total)
	require.NotNil(t, q.OldestAgeSec)
	require.EqualValues(t, 0, queues["fan"].Length)
	require.Nil(t, queues["fan"].OldestAgeSec)

	// A queue whose table is gone gets an error entry; the others are still read.
	dashExec(t, db.Pool, `drop table pgmq.q_fan`)
	queues, err = sqlapi.DashQueues(ctx, db.Pool)
	require.NoError(t, err)
	require.Error(t, queues["fan"].Err)
	require.ErrorContains(t, queues["fan"].Err, `"fan"`)
	require.NoError(t, queues["diamond"].Err)
}

func TestDashFlowDefinition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	diamondAndMap(t, db.Pool)
	dashExec(t, db.Pool, `select pgflow.add_step('diamond', 'e', array['d'], start_delay => 3,
	  required_input_pattern => '{"d": 1}', when_unmet => 'fail', when_exhausted => 'skip-cascade')`)

	f, err := sqlapi.DashFlowDefinition(ctx, db.Pool, "diamond")
	require.NoError(t, err)
	require.NotNil(t, f)
	require.Equal(t, 5, f.MaxAttempts)
	require.Equal(t, 2, f.BaseDelay)
	require.Equal(t, 30, f.Timeout)
	require.Len(t, f.Steps, 5)
	for i, s := range f.Steps {
		require.Equal(t, i, s.StepIndex)
	}
	e := f.Steps[4]
	require.Equal(t, "e", e.StepSlug)
	require.Equal(t, []string{"d"}, e.Deps)
	require.Nil(t, e.MaxAttempts)
	require.Equal(t, 3, *e.StartDelay)
	require.JSONEq(t, `{"d": 1}`, string(e.RequiredInputPattern))
	require.Nil(t, e.ForbiddenInputPattern)
	require.Equal(t, "fail", e.WhenUnmet)
	require.Equal(t, "skip-cascade", e.WhenExhausted)
	require.Equal(t, "diamond", *e.QueueName)
	require.Equal(t, []string{}, f.Steps[0].Deps)

	none, err := sqlapi.DashFlowDefinition(ctx, db.Pool, "nope")
	require.NoError(t, err)
	require.Nil(t, none)
}

func TestDashRunsAndTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	diamondAndMap(t, db.Pool)
	dashExec(t, db.Pool, `select pgflow.register_worker('`+dashWorker+`', 'fan', 'f')`)
	var ids []string
	for i := range 4 {
		r, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`["a", "b", "c"]`), "")
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `update pgflow.runs set started_at = now() - make_interval(mins => $2) where run_id = $1::uuid`,
			r.Run.RunID, 10-i)
		require.NoError(t, err)
		ids = append(ids, r.Run.RunID)
	}
	d, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "diamond", json.RawMessage(`{}`), "")
	require.NoError(t, err)

	runs, total, err := sqlapi.DashRuns(ctx, db.Pool, sqlapi.RunFilter{FlowSlug: "fan", Limit: 3})
	require.NoError(t, err)
	require.EqualValues(t, 4, total)
	require.Len(t, runs, 3)
	require.Equal(t, []string{ids[3], ids[2], ids[1]}, []string{runs[0].RunID, runs[1].RunID, runs[2].RunID})
	require.Equal(t, 1, runs[0].StepsTotal)
	require.Equal(t, 0, runs[0].StepsDone)
	runs, _, err = sqlapi.DashRuns(ctx, db.Pool, sqlapi.RunFilter{FlowSlug: "fan", Limit: 3, Offset: 3})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, ids[0], runs[0].RunID)
	runs, total, err = sqlapi.DashRuns(ctx, db.Pool, sqlapi.RunFilter{})
	require.NoError(t, err)
	require.EqualValues(t, 5, total)
	require.Equal(t, d.Run.RunID, runs[0].RunID, "the newest run first")
	runs, total, err = sqlapi.DashRuns(ctx, db.Pool, sqlapi.RunFilter{Status: "completed"})
	require.NoError(t, err)
	require.Zero(t, total)
	require.Empty(t, runs)

	// Complete task 0 with a large output, fail task 1 once.
	big := `"` + strings.Repeat("z", 5000) + `"`
	claimed := dashClaimAll(t, db.Pool, "fan")
	require.Len(t, claimed, 12)
	for _, c := range claimed {
		if c[0] != ids[0] {
			continue
		}
		switch c[2] {
		case 0:
			_, err = db.Pool.Exec(ctx, `select pgflow.complete_task($1::uuid, $2, $3, $4::jsonb)`, c[0], c[1], c[2], big)
		case 1:
			_, err = db.Pool.Exec(ctx, `select pgflow.fail_task($1::uuid, $2, $3, 'oops')`, c[0], c[1], c[2])
		}
		require.NoError(t, err)
	}

	tasks, err := sqlapi.DashRunTasks(ctx, db.Pool, ids[0], 2, 100)
	require.NoError(t, err)
	require.Len(t, tasks, 2, "at most perStep tasks per step")
	t0, t1 := tasks[0], tasks[1]
	require.Equal(t, 0, t0.TaskIndex)
	require.Equal(t, "completed", t0.Status)
	require.Equal(t, 5002, t0.OutputChars)
	require.Len(t, *t0.Output, 100)
	require.True(t, t0.Truncated())
	require.Equal(t, "fan", *t0.QueueName)
	require.NotNil(t, t0.MessageID)
	require.Equal(t, dashWorker, *t0.LastWorkerID)
	require.Equal(t, "queued", t1.Status) // retried
	require.Equal(t, "oops", *t1.ErrorMessage)
	require.Equal(t, 1, t1.AttemptsCount)
	require.Nil(t, t1.Output)
	require.False(t, t1.Truncated())

	all, err := sqlapi.DashRunTasks(ctx, db.Pool, ids[0], 100, 1<<20)
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.False(t, all[0].Truncated())
	require.Equal(t, big, *all[0].Output)

	text, found, err := sqlapi.DashRunJSON(ctx, db.Pool, ids[0], sqlapi.JSONPart{Kind: "task", StepSlug: "each", TaskIndex: 0})
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, big, text)
	text, found, err = sqlapi.DashRunJSON(ctx, db.Pool, ids[0], sqlapi.JSONPart{Kind: "task", StepSlug: "each", TaskIndex: 1})
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "null", text)
	text, found, err = sqlapi.DashRunJSON(ctx, db.Pool, ids[0], sqlapi.JSONPart{Kind: "input"})
	require.NoError(t, err)
	require.True(t, found)
	require.JSONEq(t, `["a", "b", "c"]`, text)
	_, found, err = sqlapi.DashRunJSON(ctx, db.Pool, ids[0], sqlapi.JSONPart{Kind: "step", StepSlug: "nope"})
	require.NoError(t, err)
	require.False(t, found)
	_, found, err = sqlapi.DashRunJSON(ctx, db.Pool, "00000000-0000-4000-8000-000000000000", sqlapi.JSONPart{Kind: "output"})
	require.NoError(t, err)
	require.False(t, found)
	_, _, err = sqlapi.DashRunJSON(ctx, db.Pool, ids[0], sqlapi.JSONPart{Kind: "bogus"})
	require.ErrorContains(t, err, `"bogus"`)
}

// The dashboard's reads also work on a database still at schema v0.16.0, which has no queue_name columns.
func TestDashReadsOnSchemaV016(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewWithPGMQ(t)
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	_, err = schema.NewMigrator(conn).Up(ctx, "v0.16.0")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	diamondAndMap(t, db.Pool)

	flows, err := sqlapi.DashFlows(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, flows, 2)
	require.Nil(t, flows[1].Steps[0].QueueName)
	f, err := sqlapi.DashFlowDefinition(ctx, db.Pool, "fan")
	require.NoError(t, err)
	require.Nil(t, f.Steps[0].QueueName)
	run, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`[1, 2]`), "")
	require.NoError(t, err)
	tasks, err := sqlapi.DashRunTasks(ctx, db.Pool, run.Run.RunID, 10, 10)
	require.NoError(t, err)
	require.Len(t, tasks, 2)
	require.Nil(t, tasks[0].QueueName)
	queues, err := sqlapi.DashQueues(ctx, db.Pool)
	require.NoError(t, err)
	require.EqualValues(t, 2, queues["fan"].Length)
}
