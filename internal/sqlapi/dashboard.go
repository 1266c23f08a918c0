package sqlapi

// SQL of the web dashboard (internal/dashboard). Like the CLI reads, these are plain selects on the pgflow tables
// and PGMQ's metrics functions: the dashboard's role needs select on them and never changes anything. The
// queue_name columns of schema v0.17.0 are read through to_jsonb(row), so the dashboard also works on v0.16.0.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RunCounts is how many runs of a flow are in each run status.
type RunCounts struct {
	Started   int64
	Completed int64
	Failed    int64
}

// DashFlow is one flow as the dashboard's flow list shows it: options, steps, runs by status.
type DashFlow struct {
	FlowSlug    string
	MaxAttempts int
	BaseDelay   int
	Timeout     int
	CreatedAt   time.Time
	Steps       []FlowStep // in step_index order
	Runs        RunCounts
}

const dashFlowsSQL = `
select f.flow_slug, f.opt_max_attempts, f.opt_base_delay, f.opt_timeout, f.created_at,` + flowStepsJSON + `  coalesce(rc.started, 0), coalesce(rc.completed, 0), coalesce(rc.failed, 0)
from pgflow.flows as f
left join (
  select r.flow_slug,
    count(*) filter (where r.status = 'started') as started,
    count(*) filter (where r.status = 'completed') as completed,
    count(*) filter (where r.status = 'failed') as failed
  from pgflow.runs as r
  group by r.flow_slug) as rc on rc.flow_slug = f.flow_slug
order by f.flow_slug`

// DashFlows returns every flow in flow_slug order with its steps and run counts.
func DashFlows(ctx context.Context, db DBTX) ([]DashFlow, error) {
	rows, err := db.Query(ctx, dashFlowsSQL)
	if err != nil {
		return nil, fmt.Errorf("sqlapi: dashboard flows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DashFlow, error) {
		var f DashFlow
		var steps []byte
		if err := row.Scan(&f.FlowSlug, &f.MaxAttempts, &f.BaseDelay, &f.Timeout, &f.CreatedAt, &steps,
			&f.Runs.Started, &f.Runs.Completed, &f.Runs.Failed); err != nil {
			return f, err
		}
		if err := json.Unmarshal(steps, &f.Steps); err != nil {
			return f, fmt.Errorf("decode the steps of flow %q: %w", f.FlowSlug, err)
		}
		return f, nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlapi: dashboard flows: %w", err)
	}
	return out, nil
}

// DashQueue is what pgmq.metrics reports about one queue, or why it could not be read.
type DashQueue struct {
	Name         string
	Length       int64 // messages in the queue, visible or not
	Visible      int64 // messages a reader could take now
	Total        int64 // messages ever sent
	OldestAgeSec *int  // age of the oldest message, nil when the queue is empty
	Err          error // pgmq.metrics failed for this queue (the other fields are zero)
}

// DashQueues reads pgmq.metrics for every queue pgmq.list_queues names, keyed by queue name. A queue whose
// metrics cannot be read gets an entry with Err set instead of failing the whole read.
func DashQueues(ctx context.Context, db DBTX) (map[string]DashQueue, error) {
	rows, err := db.Query(ctx, `select q.queue_name from pgmq.list_queues() as q order by q.queue_name`)
	if err != nil {
		return nil, fmt.Errorf("sqlapi: pgmq.list_queues: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("sqlapi: pgmq.list_queues: %w", err)
	}
	out := make(map[string]DashQueue, len(names))
	for _, name := range names {
		q := DashQueue{Name: name}
		err := db.QueryRow(ctx, `
select m.queue_length, m.queue_visible_length, m.total_messages, m.oldest_msg_age_sec
from pgmq.metrics(queue_name => $1::text) as m`, name).Scan(&q.Length, &q.Visible, &q.Total, &q.OldestAgeSec)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("sqlapi: pgmq.metrics(%q): %w", name, err)
			}
			q.Err = fmt.Errorf("pgmq.metrics(%q): %w", name, err)
		}
		out[name] = q
	}
	return out, nil
}

// DashStep is one pgflow.steps row with its dependencies and raw (possibly inherited, NULL) options.
type DashStep struct {
	StepSlug              string
	StepType              string
	StepIndex             int
	Deps                  []string // in the dependencies' step_index order
	MaxAttempts           *int     // nil: inherits the flow's
	BaseDelay             *int
	Timeout               *int
	StartDelay            *int // nil: 0
	RequiredInputPattern  json.RawMessage
	ForbiddenInputPattern json.RawMessage
	WhenUnmet             string
	WhenExhausted         string
	QueueName             *string // steps.queue_name (schema v0.17.0+); nil on older schemas
}

// DashFlowDetail is one flow with its full step definitions.
type DashFlowDetail struct {
	FlowSlug    string
	MaxAttempts int
	BaseDelay   int
	Timeout     int
	CreatedAt   time.Time
	Steps       []DashStep // in step_index order
}

const dashFlowSQL = `
select f.opt_max_attempts, f.opt_base_delay, f.opt_timeout, f.created_at
from pgflow.flows as f where f.flow_slug = $1::text`

const dashStepsSQL = `
select s.step_slug, s.step_type, s.step_index,
  array(select d.dep_slug
        from pgflow.deps as d
        join pgflow.steps as ds on ds.flow_slug = d.flow_slug and ds.step_slug = d.dep_slug
        where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug
        order by ds.step_index),
  s.opt_max_attempts, s.opt_base_delay, s.opt_timeout, s.opt_start_delay,
  s.required_input_pattern, s.forbidden_input_pattern, s.when_unmet, s.when_exhausted,
  to_jsonb(s) ->> 'queue_name'
from pgflow.steps as s
where s.flow_slug = $1::text
order by s.step_index`

// DashFlowDefinition returns one flow with its steps, or nil when there is no such flow.
func DashFlowDefinition(ctx context.Context, db DBTX, flowSlug string) (*DashFlowDetail, error) {
	f := &DashFlowDetail{FlowSlug: flowSlug}
	err := db.QueryRow(ctx, dashFlowSQL, flowSlug).Scan(&f.MaxAttempts, &f.BaseDelay, &f.Timeout, &f.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sqlapi: flow %q: %w", flowSlug, err)
	}
	rows, err := db.Query(ctx, dashStepsSQL, flowSlug)
	if err != nil {
		return nil, fmt.Errorf("sqlapi: steps of flow %q: %w", flowSlug, err)
	}
	f.Steps, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (DashStep, error) {
		var s DashStep
		var req, forb []byte
		err := row.Scan(&s.StepSlug, &s.StepType, &s.StepIndex, &s.Deps, &s.MaxAttempts, &s.BaseDelay, &s.Timeout,
			&s.StartDelay, &req, &forb, &s.WhenUnmet, &s.WhenExhausted, &s.QueueName)
		s.RequiredInputPattern, s.ForbiddenInputPattern = req, forb
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlapi: steps of flow %q: %w", flowSlug, err)
	}
	return f, nil
}

// RunFilter selects runs for DashRuns. Empty strings mean "any".
type RunFilter struct {
	FlowSlug string
	Status   string // started | completed | failed
	Limit    int    // rows per page; <= 0 means 50
	Offset   int
}

// DashRun is one run as the run list shows it (no input or output).
type DashRun struct {
	RunID          string
	FlowSlug       string
	Status         string
	RemainingSteps int
	StartedAt      time.Time
	CompletedAt    *time.Time
	FailedAt       *time.Time
	StepsTotal     int
	StepsDone      int     // completed or skipped
	ErrorMessage   *string // of the first failed step (by step_index), shortened to 300 characters
}

const dashRunsSQL = `
select r.run_id::text, r.flow_slug, r.status, r.remaining_steps, r.started_at, r.completed_at, r.failed_at,
  (select count(*) from pgflow.step_states as ss where ss.run_id = r.run_id)::int,
  (select count(*) from pgflow.step_states as ss
   where ss.run_id = r.run_id and ss.status in ('completed', 'skipped'))::int,
  (select left(ss.error_message, 300)
   from pgflow.step_states as ss
   join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
   where ss.run_id = r.run_id and ss.status = 'failed'
   order by s.step_index limit 1)
from pgflow.runs as r
where ($1::text is null or r.flow_slug = $1::text)
  and ($2::text is null or r.status = $2::text)
order by r.started_at desc, r.run_id desc
limit $3::int offset $4::int`

const dashRunsCountSQL = `
select count(*) from pgflow.runs as r
where ($1::text is null or r.flow_slug = $1::text)
  and ($2::text is null or r.status = $2::text)`

// DashRuns returns one page of runs, newest first (by started_at, then run_id), and how many runs match the
// filter in all.
func DashRuns(ctx context.Context, db DBTX, f RunFilter) ([]DashRun, int64, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	var flow, status any
	if f.FlowSlug != "" {
		flow = f.FlowSlug
	}
	if f.Status != "" {
		status = f.Status
	}
	rows, err := db.Query(ctx, dashRunsSQL, flow, status, limit, max(f.Offset, 0))
	if err != nil {
		return nil, 0, fmt.Errorf("sqlapi: runs (flow %q, status %q): %w", f.FlowSlug, f.Status, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DashRun, error) {
		var r DashRun
		err := row.Scan(&r.RunID, &r.FlowSlug, &r.Status, &r.RemainingSteps, &r.StartedAt, &r.CompletedAt,
			&r.FailedAt, &r.StepsTotal, &r.StepsDone, &r.ErrorMessage)
		return r, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("sqlapi: runs (flow %q, status %q): %w", f.FlowSlug, f.Status, err)
	}
	var total int64
	if err := db.QueryRow(ctx, dashRunsCountSQL, flow, status).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("sqlapi: count runs (flow %q, status %q): %w", f.FlowSlug, f.Status, err)
	}
	return out, total, nil
}

// DashTask is one pgflow.step_tasks row with its output as text, cut at the caller's limit.
type DashTask struct {
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
	Output        *string // the output's JSON text, at most the limit's characters; nil when there is none
}

// Truncated reports whether Output holds only the beginning of the output.
func (t DashTask) Truncated() bool {
	return t.Output != nil && len([]rune(*t.Output)) < t.OutputChars
}

const dashRunTasksSQL = `
select t.step_slug, t.task_index, t.status, t.attempts_count, t.requeued_count, to_jsonb(t) ->> 'queue_name',
  t.message_id, t.error_message,
  t.last_worker_id::text, t.queued_at, t.started_at, t.completed_at, t.failed_at,
  coalesce(length(t.output::text), 0), left(t.output::text, $3::int)
from (
  select st.*, row_number() over (partition by st.step_slug order by st.task_index) as n
  from pgflow.step_tasks as st
  where st.run_id = $1::uuid) as t
join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
where t.n <= $2::int
order by s.step_index, t.task_index`

// DashRunTasks returns the tasks of one run in step_index, task_index order: at most perStep tasks of each step
// (the lowest task indexes), with outputs cut to outputChars characters.
func DashRunTasks(ctx context.Context, db DBTX, runID string, perStep, outputChars int) ([]DashTask, error) {
	rows, err := db.Query(ctx, dashRunTasksSQL, runID, perStep, outputChars)
	if err != nil {
		return nil, fmt.Errorf("sqlapi: tasks of run %s: %w", runID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DashTask, error) {
		var t DashTask
		err := row.Scan(&t.StepSlug, &t.TaskIndex, &t.Status, &t.AttemptsCount, &t.RequeuedCount, &t.QueueName, &t.MessageID,
			&t.ErrorMessage, &t.LastWorkerID, &t.QueuedAt, &t.StartedAt, &t.CompletedAt, &t.FailedAt,
			&t.OutputChars, &t.Output)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlapi: tasks of run %s: %w", runID, err)
	}
	return out, nil
}

// JSONPart names one stored JSON document of a run.
type JSONPart struct {
	Kind      string // input | output | step | task
	StepSlug  string // for step and task
	TaskIndex int    // for task
}

// DashRunJSON returns the full JSON text of one document of a run: the run's input or output, a step's output or
// a task's output. found is false when the run, step or task does not exist; a document that exists but is SQL
// NULL is returned as "null".
func DashRunJSON(ctx context.Context, db DBTX, runID string, p JSONPart) (text string, found bool, err error) {
	var q string
	args := []any{runID}
	switch p.Kind {
	case "input":
		q = `select coalesce(r.input::text, 'null') from pgflow.runs as r where r.run_id = $1::uuid`
	case "output":
		q = `select coalesce(r.output::text, 'null') from pgflow.runs as r where r.run_id = $1::uuid`
	case "step":
		q = `select coalesce(ss.output::text, 'null') from pgflow.step_states as ss
where ss.run_id = $1::uuid and ss.step_slug = $2::text`
		args = append(args, p.StepSlug)
	case "task":
		q = `select coalesce(t.output::text, 'null') from pgflow.step_tasks as t
where t.run_id = $1::uuid and t.step_slug = $2::text and t.task_index = $3::int`
		args = append(args, p.StepSlug, p.TaskIndex)
	default:
		return "", false, fmt.Errorf("sqlapi: unknown JSON part %q of run %s", p.Kind, runID)
	}
	err = db.QueryRow(ctx, q, args...).Scan(&text)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("sqlapi: %s of run %s: %w", p.Kind, runID, err)
	}
	return text, true, nil
}
