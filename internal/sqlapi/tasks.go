package sqlapi

// Reads of pgflow.step_tasks for the run read model (GetRunDetail): the tasks of a run, and per step a summary
// over all of its tasks. A map step can have hundreds of thousands of tasks, so the summary is counted by the
// database and the task list is bounded per step. Plain selects: the role needs select on pgflow.step_tasks and
// pgflow.steps.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Task is one pgflow.step_tasks row, with its output as text cut at the caller's limit.
type Task struct {
	StepSlug      string
	TaskIndex     int
	Status        string // queued | started | completed | failed
	AttemptsCount int
	RequeuedCount int
	QueueName     *string // step_tasks.queue_name (schema v0.17.0+), the queue of MessageID; nil on older schemas
	MessageID     *int64
	ErrorMessage  *string
	LastWorkerID  *string
	QueuedAt      time.Time
	StartedAt     *time.Time
	CompletedAt   *time.Time
	FailedAt      *time.Time
	OutputChars   int     // length of the output's JSON text, 0 when there is none
	Output        *string // the output's JSON text, at most the limit's characters; nil when there is none or none was asked for
}

// Truncated reports whether Output holds only the beginning of the output.
func (t Task) Truncated() bool {
	return t.Output != nil && len([]rune(*t.Output)) < t.OutputChars
}

// ListRunTasksParams selects the tasks of one run.
type ListRunTasksParams struct {
	RunID string
	// PerStep is how many tasks of each step to return, the lowest task indexes; <= 0 returns all of them.
	PerStep int
	// OutputChars is how many characters of each output to return; <= 0 returns no output text (OutputChars
	// still tells its length).
	OutputChars int
}

const runTasksSQL = `
select t.step_slug, t.task_index, t.status, t.attempts_count, t.requeued_count, to_jsonb(t) ->> 'queue_name',
  t.message_id, t.error_message,
  t.last_worker_id::text, t.queued_at, t.started_at, t.completed_at, t.failed_at,
  coalesce(length(t.output::text), 0), case when $3::int > 0 then left(t.output::text, $3::int) end
from (
  select st.*, row_number() over (partition by st.step_slug order by st.task_index) as n
  from pgflow.step_tasks as st
  where st.run_id = $1::uuid) as t
join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
where $2::int <= 0 or t.n <= $2::int
order by s.step_index, t.task_index`

// ListRunTasks returns tasks of one run in step_index, task_index order (none for an unknown run).
func ListRunTasks(ctx context.Context, db DBTX, p ListRunTasksParams) ([]Task, error) {
	rows, err := db.Query(ctx, runTasksSQL, p.RunID, p.PerStep, p.OutputChars)
	if err != nil {
		return nil, fmt.Errorf("read the tasks of run %s: %w", p.RunID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Task, error) {
		var t Task
		err := row.Scan(&t.StepSlug, &t.TaskIndex, &t.Status, &t.AttemptsCount, &t.RequeuedCount, &t.QueueName, &t.MessageID,
			&t.ErrorMessage, &t.LastWorkerID, &t.QueuedAt, &t.StartedAt, &t.CompletedAt, &t.FailedAt,
			&t.OutputChars, &t.Output)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the tasks of run %s: %w", p.RunID, err)
	}
	return out, nil
}

// TaskSummary counts the tasks of one step of a run, over all of them.
type TaskSummary struct {
	Total         int
	Queued        int
	Started       int
	Completed     int
	Failed        int
	AttemptsTotal int // attempts over all tasks
	AttemptsMax   int // the most attempts of one task
	Retries       int // attempts beyond each task's first
	// LastError is the error of the task whose failure is the most recent (by failed_at, else queued_at: a
	// retried task keeps its last error while it is queued again); nil when no task has an error.
	LastError *string
}

const taskSummariesSQL = `
select t.step_slug, count(*)::int,
  (count(*) filter (where t.status = 'queued'))::int,
  (count(*) filter (where t.status = 'started'))::int,
  (count(*) filter (where t.status = 'completed'))::int,
  (count(*) filter (where t.status = 'failed'))::int,
  coalesce(sum(t.attempts_count), 0)::int,
  coalesce(max(t.attempts_count), 0)::int,
  coalesce(sum(greatest(t.attempts_count - 1, 0)), 0)::int,
  (select e.error_message
   from pgflow.step_tasks as e
   where e.run_id = $1::uuid and e.step_slug = t.step_slug and e.error_message is not null
   order by coalesce(e.failed_at, e.queued_at) desc, e.task_index
   limit 1)
from pgflow.step_tasks as t
where t.run_id = $1::uuid
group by t.step_slug`

// taskSummaries returns the task summary of every step of a run that has tasks, keyed by step slug.
func taskSummaries(ctx context.Context, db DBTX, runID string) (map[string]TaskSummary, error) {
	rows, err := db.Query(ctx, taskSummariesSQL, runID)
	if err != nil {
		return nil, fmt.Errorf("count the tasks of run %s: %w", runID, err)
	}
	out := map[string]TaskSummary{}
	var slug string
	var s TaskSummary
	_, err = pgx.ForEachRow(rows, []any{&slug, &s.Total, &s.Queued, &s.Started, &s.Completed, &s.Failed,
		&s.AttemptsTotal, &s.AttemptsMax, &s.Retries, &s.LastError}, func() error {
		out[slug] = s
		s.LastError = nil // the next row's scan must not write into the string just stored
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count the tasks of run %s: %w", runID, err)
	}
	return out, nil
}
