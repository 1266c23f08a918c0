package sqlapi

// SQL of the command-line tool beyond what the client needs: listing flows with their steps, the depth of a
// flow's queue, the tasks of one run and the registered workers. These are operator reads of the pgflow tables
// (not SECURITY DEFINER functions), so the role needs select on them. None of them changes anything. Columns
// added by schema v0.17.0 (queue_name) are read through to_jsonb(row), so the reads also work on v0.16.0.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// FlowSummary is one pgflow.flows row with its steps and the number of its runs still in progress.
type FlowSummary struct {
	FlowSlug    string
	MaxAttempts int // flows.opt_max_attempts
	BaseDelay   int // flows.opt_base_delay, seconds
	Timeout     int // flows.opt_timeout, seconds
	CreatedAt   time.Time
	Steps       []FlowStep // in step_index order
	ActiveRuns  int64      // runs with status 'started'
}

// FlowStep is one pgflow.steps row with its dependencies.
type FlowStep struct {
	StepSlug  string   `json:"step_slug"`
	StepType  string   `json:"step_type"`
	StepIndex int      `json:"step_index"`
	Deps      []string `json:"deps"`       // in the dependencies' step_index order
	QueueName *string  `json:"queue_name"` // steps.queue_name (schema v0.17.0+); nil on older schemas
}

// flowStepsJSON selects, for the flow row f, its steps in step_index order as a jsonb array of FlowStep objects
// (queue_name read through to_jsonb, so schemas before v0.17.0 give null). Shared by the CLI and the dashboard.
const flowStepsJSON = `
  coalesce((
    select jsonb_agg(jsonb_build_object(
        'step_slug', s.step_slug,
        'step_type', s.step_type,
        'step_index', s.step_index,
        'queue_name', to_jsonb(s) -> 'queue_name',
        'deps', coalesce((
          select jsonb_agg(d.dep_slug order by ds.step_index)
          from pgflow.deps as d
          join pgflow.steps as ds on ds.flow_slug = d.flow_slug and ds.step_slug = d.dep_slug
          where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug), '[]'::jsonb))
      order by s.step_index)
    from pgflow.steps as s
    where s.flow_slug = f.flow_slug), '[]'::jsonb),
`

const listFlowsSQL = `
select f.flow_slug, f.opt_max_attempts, f.opt_base_delay, f.opt_timeout, f.created_at,` + flowStepsJSON + `  (select count(*) from pgflow.runs as r where r.flow_slug = f.flow_slug and r.status = 'started')
from pgflow.flows as f
where $1::text is null or f.flow_slug = $1::text
order by f.flow_slug`

// ListFlows returns every flow in flow_slug order; with only != "" just that flow (an empty result when it does
// not exist).
func ListFlows(ctx context.Context, db DBTX, only string) ([]FlowSummary, error) {
	var arg any
	if only != "" {
		arg = only
	}
	rows, err := db.Query(ctx, listFlowsSQL, arg)
	if err != nil {
		return nil, fmt.Errorf("sqlapi: list flows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FlowSummary, error) {
		var f FlowSummary
		var steps []byte
		if err := row.Scan(&f.FlowSlug, &f.MaxAttempts, &f.BaseDelay, &f.Timeout, &f.CreatedAt, &steps, &f.ActiveRuns); err != nil {
			return f, err
		}
		if err := json.Unmarshal(steps, &f.Steps); err != nil {
			return f, fmt.Errorf("decode the steps of flow %q: %w", f.FlowSlug, err)
		}
		return f, nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlapi: list flows: %w", err)
	}
	return out, nil
}

// QueueDepth is what pgmq.metrics reports about one queue.
type QueueDepth struct {
	Length  int64 // messages in the queue, visible or not
	Visible int64 // messages a reader could take now
}

// QueueMetrics reads the depth of one PGMQ queue with pgmq.metrics. A queue that does not exist is an error
// (SQLSTATE 42P01).
func QueueMetrics(ctx context.Context, db DBTX, queue string) (QueueDepth, error) {
	var d QueueDepth
	err := db.QueryRow(ctx,
		`select m.queue_length, m.queue_visible_length from pgmq.metrics(queue_name => $1::text) as m`, queue).
		Scan(&d.Length, &d.Visible)
	if err != nil {
		return d, fmt.Errorf("sqlapi: pgmq.metrics(%q): %w", queue, err)
	}
	return d, nil
}

// TaskRow is one pgflow.step_tasks row without its output.
type TaskRow struct {
	StepSlug      string
	TaskIndex     int
	Status        string // queued | started | completed | failed
	AttemptsCount int
	QueueName     *string // the queue of the task's message (schema v0.17.0+); nil on older schemas
	MessageID     *int64
	ErrorMessage  *string
	LastWorkerID  *string
	QueuedAt      time.Time
	StartedAt     *time.Time
	CompletedAt   *time.Time
	FailedAt      *time.Time
}

const runTasksSQL = `
select t.step_slug, t.task_index, t.status, t.attempts_count, to_jsonb(t) ->> 'queue_name', t.message_id, t.error_message,
  t.last_worker_id::text, t.queued_at, t.started_at, t.completed_at, t.failed_at
from pgflow.step_tasks as t
join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
where t.run_id = $1::uuid
order by s.step_index, t.task_index`

// RunTasks returns the tasks of one run in step_index, task_index order (none for an unknown run).
func RunTasks(ctx context.Context, db DBTX, runID string) ([]TaskRow, error) {
	rows, err := db.Query(ctx, runTasksSQL, runID)
	if err != nil {
		return nil, fmt.Errorf("sqlapi: tasks of run %s: %w", runID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TaskRow, error) {
		var t TaskRow
		err := row.Scan(&t.StepSlug, &t.TaskIndex, &t.Status, &t.AttemptsCount, &t.QueueName, &t.MessageID, &t.ErrorMessage,
			&t.LastWorkerID, &t.QueuedAt, &t.StartedAt, &t.CompletedAt, &t.FailedAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlapi: tasks of run %s: %w", runID, err)
	}
	return out, nil
}

// WorkerRow is one pgflow.workers row, with the age of its last heartbeat measured by the database clock and the
// number of tasks it is running.
type WorkerRow struct {
	WorkerID        string
	QueueName       string
	FunctionName    string
	StartedAt       time.Time
	LastHeartbeatAt time.Time
	DeprecatedAt    *time.Time
	StoppedAt       *time.Time
	HeartbeatAge    time.Duration // database now() - last_heartbeat_at
	RunningTasks    int64         // its step_tasks with status 'started'
}

// Status classifies the worker: "stopped" (shut down and said so), "stopping" (deprecated, finishing its tasks),
// "alive" (a heartbeat within staleAfter) or "unresponsive" (silent for longer: crashed or cut off).
func (w WorkerRow) Status(staleAfter time.Duration) string {
	switch {
	case w.StoppedAt != nil:
		return "stopped"
	case w.DeprecatedAt != nil:
		return "stopping"
	case w.HeartbeatAge <= staleAfter:
		return "alive"
	default:
		return "unresponsive"
	}
}

const listWorkersSQL = `
select w.worker_id::text, w.queue_name, w.function_name, w.started_at, w.last_heartbeat_at, w.deprecated_at,
  w.stopped_at, greatest(extract(epoch from (now() - w.last_heartbeat_at)), 0)::float8,
  (select count(*) from pgflow.step_tasks as t where t.last_worker_id = w.worker_id and t.status = 'started')
from pgflow.workers as w
where ($1::float8 is null or w.last_heartbeat_at >= now() - make_interval(secs => $1::float8))
  and ($2::uuid is null or w.worker_id = $2::uuid)
order by (w.stopped_at is null) desc, w.last_heartbeat_at desc, w.worker_id`

// ListWorkers returns the workers whose last heartbeat is at most since old (since <= 0: all of them), live ones
// first, then by the most recent heartbeat.
func ListWorkers(ctx context.Context, db DBTX, since time.Duration) ([]WorkerRow, error) {
	var secs any
	if since > 0 {
		secs = since.Seconds()
	}
	return listWorkers(ctx, db, secs, nil)
}

// GetWorker returns the worker with the given id, or nil when there is none.
func GetWorker(ctx context.Context, db DBTX, workerID string) (*WorkerRow, error) {
	ws, err := listWorkers(ctx, db, nil, workerID)
	if err != nil || len(ws) == 0 {
		return nil, err
	}
	return &ws[0], nil
}

func listWorkers(ctx context.Context, db DBTX, secs, id any) ([]WorkerRow, error) {
	rows, err := db.Query(ctx, listWorkersSQL, secs, id)
	if err != nil {
		return nil, fmt.Errorf("sqlapi: list workers: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (WorkerRow, error) {
		var w WorkerRow
		var age float64
		err := row.Scan(&w.WorkerID, &w.QueueName, &w.FunctionName, &w.StartedAt, &w.LastHeartbeatAt,
			&w.DeprecatedAt, &w.StoppedAt, &age, &w.RunningTasks)
		w.HeartbeatAge = time.Duration(age * float64(time.Second))
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlapi: list workers: %w", err)
	}
	return out, nil
}
