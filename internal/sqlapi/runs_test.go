package sqlapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

func TestListRunsTasksAndJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	diamondAndMap(t, db.Pool)
	execAll(t, db.Pool, `select pgflow.register_worker('`+readerWorker+`', 'fan', 'f')`)
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

	runs, total, err := sqlapi.ListRuns(ctx, db.Pool, sqlapi.ListRunsParams{Flow: "fan", Limit: 3})
	require.NoError(t, err)
	require.EqualValues(t, 4, total)
	require.Len(t, runs, 3)
	require.Equal(t, []string{ids[3], ids[2], ids[1]}, []string{runs[0].RunID, runs[1].RunID, runs[2].RunID})
	require.Equal(t, 1, runs[0].StepsTotal)
	require.Equal(t, 0, runs[0].StepsDone)
	runs, _, err = sqlapi.ListRuns(ctx, db.Pool, sqlapi.ListRunsParams{Flow: "fan", Limit: 3, Offset: 3})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, ids[0], runs[0].RunID)
	runs, total, err = sqlapi.ListRuns(ctx, db.Pool, sqlapi.ListRunsParams{})
	require.NoError(t, err)
	require.EqualValues(t, 5, total)
	require.Equal(t, d.Run.RunID, runs[0].RunID, "the newest run first")
	runs, total, err = sqlapi.ListRuns(ctx, db.Pool, sqlapi.ListRunsParams{Status: "completed"})
	require.NoError(t, err)
	require.Zero(t, total)
	require.Empty(t, runs)

	// Complete task 0 with a large output, fail task 1 once.
	big := `"` + strings.Repeat("z", 5000) + `"`
	claimed := claimAll(t, db.Pool, "fan")
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

	tasks, err := sqlapi.ListRunTasks(ctx, db.Pool, sqlapi.ListRunTasksParams{RunID: ids[0], PerStep: 2, OutputChars: 100})
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
	require.Equal(t, readerWorker, *t0.LastWorkerID)
	require.Equal(t, "queued", t1.Status) // retried
	require.Equal(t, "oops", *t1.ErrorMessage)
	require.Equal(t, 1, t1.AttemptsCount)
	require.Nil(t, t1.Output)
	require.False(t, t1.Truncated())

	all, err := sqlapi.ListRunTasks(ctx, db.Pool, sqlapi.ListRunTasksParams{RunID: ids[0], PerStep: 100, OutputChars: 1 << 20})
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.False(t, all[0].Truncated())
	require.Equal(t, big, *all[0].Output)

	text, found, err := sqlapi.GetRunJSON(ctx, db.Pool, ids[0], sqlapi.JSONPart{Kind: "task", StepSlug: "each", TaskIndex: 0})
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, big, text)
	text, found, err = sqlapi.GetRunJSON(ctx, db.Pool, ids[0], sqlapi.JSONPart{Kind: "task", StepSlug: "each", TaskIndex: 1})
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "null", text)
	text, found, err = sqlapi.GetRunJSON(ctx, db.Pool, ids[0], sqlapi.JSONPart{Kind: "input"})
	require.NoError(t, err)
	require.True(t, found)
	require.JSONEq(t, `["a", "b", "c"]`, text)
	_, found, err = sqlapi.GetRunJSON(ctx, db.Pool, ids[0], sqlapi.JSONPart{Kind: "step", StepSlug: "nope"})
	require.NoError(t, err)
	require.False(t, found)
	_, found, err = sqlapi.GetRunJSON(ctx, db.Pool, "00000000-0000-4000-8000-000000000000", sqlapi.JSONPart{Kind: "output"})
	require.NoError(t, err)
	require.False(t, found)
	_, _, err = sqlapi.GetRunJSON(ctx, db.Pool, ids[0], sqlapi.JSONPart{Kind: "bogus"})
	require.ErrorContains(t, err, `"bogus"`)
}

// The read model of a run: its state, its flow's definition, per step a summary over all tasks and a bounded task
// list.
func TestGetRunDetail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	diamondAndMap(t, db.Pool)
	execAll(t, db.Pool, `select pgflow.register_worker('`+readerWorker+`', 'fan', 'f')`)

	missing, err := sqlapi.GetRunDetail(ctx, db.Pool, sqlapi.GetRunDetailParams{RunID: "00000000-0000-4000-8000-000000000000"})
	require.NoError(t, err)
	require.Nil(t, missing)
	_, err = sqlapi.GetRunDetail(ctx, db.Pool, sqlapi.GetRunDetailParams{RunID: "run-1"})
	require.True(t, sqlapi.IsInvalidRunID(err), "%v", err)
	require.ErrorContains(t, err, "run-1")

	run, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "fan", json.RawMessage(`["a", "b", "c", "d"]`), "")
	require.NoError(t, err)
	id := run.Run.RunID
	claimed := claimAll(t, db.Pool, "fan")
	require.Len(t, claimed, 4)
	execAll(t, db.Pool,
		`select pgflow.complete_task('`+id+`', 'each', 0, '"AAA"')`,
		`select pgflow.fail_task('`+id+`', 'each', 1, 'first')`,
		`select pgflow.fail_task('`+id+`', 'each', 2, 'second')`,
		// Both failed tasks are queued again; the error whose task was queued last is the last error. Task 1
		// has been tried three times.
		`update pgflow.step_tasks set queued_at = now() - interval '1 hour', attempts_count = 3
		 where run_id = '`+id+`' and task_index = 1`,
		`update pgflow.step_tasks set queued_at = now() - interval '30 minutes' where run_id = '`+id+`' and task_index = 2`)

	d, err := sqlapi.GetRunDetail(ctx, db.Pool, sqlapi.GetRunDetailParams{RunID: id, TasksPerStep: 2, OutputChars: 2})
	require.NoError(t, err)
	require.Equal(t, id, d.Run.RunID)
	require.Equal(t, "started", d.Run.Status)
	require.Equal(t, "fan", d.Flow.FlowSlug)
	require.Len(t, d.Steps, 1)
	s := d.Steps[0]
	require.Equal(t, "each", s.StepSlug)
	require.Equal(t, "started", s.Status)
	require.Equal(t, "map", s.Definition.StepType)
	require.Equal(t, 4, *s.InitialTasks)
	second := "second"
	require.Equal(t, sqlapi.TaskSummary{Total: 4, Queued: 2, Started: 1, Completed: 1, AttemptsTotal: 6, AttemptsMax: 3,
		Retries: 2, LastError: &second}, s.Tasks)
	require.Len(t, s.TaskList, 2, "at most TasksPerStep tasks per step")
	require.Equal(t, 0, s.TaskList[0].TaskIndex)
	require.Equal(t, `"A`, *s.TaskList[0].Output)
	require.True(t, s.TaskList[0].Truncated())
	require.Equal(t, 1, s.TaskList[1].TaskIndex)
	require.Same(t, &d.Steps[0], d.Step("each"))
	require.Nil(t, d.Step("nope"))

	// A failure time counts before the time a task was queued: task 1, failed for good now, has the last error.
	execAll(t, db.Pool, `update pgflow.step_tasks set status = 'failed', failed_at = now()
		where run_id = '`+id+`' and task_index = 1`)
	d, err = sqlapi.GetRunDetail(ctx, db.Pool, sqlapi.GetRunDetailParams{RunID: id})
	require.NoError(t, err)
	first := "first"
	require.Equal(t, &first, d.Steps[0].Tasks.LastError)
	require.Equal(t, 1, d.Steps[0].Tasks.Failed)
	require.Equal(t, 1, d.Steps[0].Tasks.Queued)
	require.Nil(t, d.Steps[0].TaskList, "no task list asked for")
	require.Equal(t, 4, d.Steps[0].Tasks.Total, "the summary is always there")
	d, err = sqlapi.GetRunDetail(ctx, db.Pool, sqlapi.GetRunDetailParams{RunID: id, TasksPerStep: -1})
	require.NoError(t, err)
	require.Len(t, d.Steps[0].TaskList, 4)
	require.Nil(t, d.Steps[0].TaskList[0].Output, "no output text asked for")
	require.Equal(t, 5, d.Steps[0].TaskList[0].OutputChars)

	// Steps in step_index order with their definitions; steps without tasks have an empty summary.
	dr, err := sqlapi.StartFlowWithStates(ctx, db.Pool, "diamond", json.RawMessage(`{}`), "")
	require.NoError(t, err)
	d, err = sqlapi.GetRunDetail(ctx, db.Pool, sqlapi.GetRunDetailParams{RunID: dr.Run.RunID, TasksPerStep: -1})
	require.NoError(t, err)
	var slugs []string
	for _, s := range d.Steps {
		slugs = append(slugs, s.StepSlug)
	}
	require.Equal(t, []string{"a", "b", "c", "d"}, slugs)
	require.Equal(t, []string{"b", "c"}, d.Steps[3].Definition.Deps)
	require.Equal(t, 5, d.Flow.EffectiveMaxAttempts(d.Steps[3].Definition))
	require.Equal(t, 1, d.Steps[0].Tasks.Total)
	require.Equal(t, sqlapi.TaskSummary{}, d.Steps[3].Tasks)
	require.Nil(t, d.Steps[3].TaskList)
}
