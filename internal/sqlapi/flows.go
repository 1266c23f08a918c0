package sqlapi

// Reads of flow definitions (pgflow.flows, pgflow.steps, pgflow.deps) for the CLI, the dashboard and the
// metrics adapter. These are operator reads of the tables, not SECURITY DEFINER functions, so the role needs
// select on them. The queue_name column of schema v0.17.0 is read through to_jsonb(row), so the reads also work
// on v0.16.0.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Flow is one pgflow.flows row with its steps and how many of its runs are in each status.
type Flow struct {
	FlowSlug    string
	MaxAttempts int // flows.opt_max_attempts
	BaseDelay   int // flows.opt_base_delay, seconds
	Timeout     int // flows.opt_timeout, seconds
	CreatedAt   time.Time
	QueueMode   string // flows.queue_mode: "flow" or "step" (v0.20.0; "flow" on older schemas)
	// MessageRetention is flows.message_retention: "archive" or "delete" (v0.20.0; "archive" on older schemas).
	MessageRetention string
	Steps            []FlowStep // in step_index order
	Runs             RunCounts
}

// RunCounts is how many runs of a flow are in each run status. Started counts the runs still in progress.
type RunCounts struct {
	Started   int64
	Completed int64
	Failed    int64
	Cancelled int64
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
// (queue_name read through to_jsonb, so schemas before v0.17.0 give null).
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
select f.flow_slug, f.opt_max_attempts, f.opt_base_delay, f.opt_timeout, f.created_at,
  coalesce(to_jsonb(f) ->> 'queue_mode', 'flow'), coalesce(to_jsonb(f) ->> 'message_retention', 'archive'),` +
	flowStepsJSON + `  coalesce(rc.started, 0), coalesce(rc.completed, 0), coalesce(rc.failed, 0),
  coalesce(rc.cancelled, 0)
from pgflow.flows as f
left join (
  select r.flow_slug,
    count(*) filter (where r.status = 'started') as started,
    count(*) filter (where r.status = 'completed') as completed,
    count(*) filter (where r.status = 'failed') as failed,
    count(*) filter (where r.status = 'cancelled') as cancelled
  from pgflow.runs as r
  where $1::text is null or r.flow_slug = $1::text
  group by r.flow_slug) as rc on rc.flow_slug = f.flow_slug
where $1::text is null or f.flow_slug = $1::text
order by f.flow_slug`

// ListFlowsParams selects flows for ListFlows.
type ListFlowsParams struct {
	Flow string // only this flow; "" for all of them
}

// ListFlows returns the flows in flow_slug order with their steps and run counts. A Flow that does not exist
// gives an empty result, not an error.
func ListFlows(ctx context.Context, db DBTX, p ListFlowsParams) ([]Flow, error) {
	var only any
	if p.Flow != "" {
		only = p.Flow
	}
	rows, err := db.Query(ctx, listFlowsSQL, only)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", flowsWhat(p.Flow), err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Flow, error) {
		var f Flow
		var steps []byte
		if err := row.Scan(&f.FlowSlug, &f.MaxAttempts, &f.BaseDelay, &f.Timeout, &f.CreatedAt, &f.QueueMode, &f.MessageRetention,
			&steps, &f.Runs.Started, &f.Runs.Completed, &f.Runs.Failed, &f.Runs.Cancelled); err != nil {
			return f, err
		}
		if err := json.Unmarshal(steps, &f.Steps); err != nil {
			return f, fmt.Errorf("decode the steps of flow %q: %w", f.FlowSlug, err)
		}
		return f, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", flowsWhat(p.Flow), err)
	}
	return out, nil
}

func flowsWhat(only string) string {
	if only == "" {
		return "the flows"
	}
	return fmt.Sprintf("flow %q", only)
}

// StepDefinition is one pgflow.steps row with its dependencies and raw (possibly inherited, NULL) options.
type StepDefinition struct {
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

// FlowDefinition is one flow with its full step definitions.
type FlowDefinition struct {
	FlowSlug    string
	MaxAttempts int
	BaseDelay   int
	Timeout     int
	CreatedAt   time.Time
	QueueMode   string           // "flow" or "step" (see Flow.QueueMode)
	Steps       []StepDefinition // in step_index order
}

// Step returns the definition of the step slug, or nil.
func (f *FlowDefinition) Step(slug string) *StepDefinition {
	for i := range f.Steps {
		if f.Steps[i].StepSlug == slug {
			return &f.Steps[i]
		}
	}
	return nil
}

// EffectiveMaxAttempts is the step's max attempts, or the flow's when the step inherits it.
func (f *FlowDefinition) EffectiveMaxAttempts(s StepDefinition) int {
	if s.MaxAttempts != nil {
		return *s.MaxAttempts
	}
	return f.MaxAttempts
}

const flowDefinitionSQL = `
select f.opt_max_attempts, f.opt_base_delay, f.opt_timeout, f.created_at, coalesce(to_jsonb(f) ->> 'queue_mode', 'flow')
from pgflow.flows as f where f.flow_slug = $1::text`

const stepDefinitionsSQL = `
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

// GetFlowDefinition returns one flow with its steps, or nil when there is no such flow.
func GetFlowDefinition(ctx context.Context, db DBTX, flowSlug string) (*FlowDefinition, error) {
	f := &FlowDefinition{FlowSlug: flowSlug}
	err := db.QueryRow(ctx, flowDefinitionSQL, flowSlug).Scan(&f.MaxAttempts, &f.BaseDelay, &f.Timeout, &f.CreatedAt, &f.QueueMode)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read flow %q: %w", flowSlug, err)
	}
	rows, err := db.Query(ctx, stepDefinitionsSQL, flowSlug)
	if err != nil {
		return nil, fmt.Errorf("read the steps of flow %q: %w", flowSlug, err)
	}
	f.Steps, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (StepDefinition, error) {
		var s StepDefinition
		var req, forb []byte
		err := row.Scan(&s.StepSlug, &s.StepType, &s.StepIndex, &s.Deps, &s.MaxAttempts, &s.BaseDelay, &s.Timeout,
			&s.StartDelay, &req, &forb, &s.WhenUnmet, &s.WhenExhausted, &s.QueueName)
		s.RequiredInputPattern, s.ForbiddenInputPattern = req, forb
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the steps of flow %q: %w", flowSlug, err)
	}
	return f, nil
}

// CompileResult is the result of pgflow.ensure_flow_compiled.
type CompileResult struct {
	Status      string   `json:"status"` // compiled | verified | recompiled | mismatch
	Differences []string `json:"differences"`
}

// FlowDeployment is how a flow's tasks travel, stored with the flow apart from its shape.
type FlowDeployment struct {
	QueueMode        string // flows.queue_mode: "flow" or "step" ("" means "flow")
	MessageRetention string // flows.message_retention: "archive" or "delete" ("" keeps the stored value)
}

// EnsureFlowCompiled calls pgflow.ensure_flow_compiled(flow_slug, shape, allow_data_loss, queue_mode,
// message_retention).
func EnsureFlowCompiled(ctx context.Context, db DBTX, flowSlug string, shape json.RawMessage, deploy FlowDeployment, allowDataLoss bool) (CompileResult, error) {
	var raw []byte
	err := db.QueryRow(ctx,
		`select pgflow.ensure_flow_compiled(flow_slug => $1::text, shape => $2::jsonb, allow_data_loss => $3::boolean,
			queue_mode => nullif($4::text, ''), message_retention => nullif($5::text, ''))`,
		flowSlug, string(shape), allowDataLoss, deploy.QueueMode, deploy.MessageRetention).Scan(&raw)
	if err != nil {
		return CompileResult{}, fmt.Errorf("pgflow.ensure_flow_compiled(flow %q): %w", flowSlug, err)
	}
	var res CompileResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return CompileResult{}, fmt.Errorf("pgflow.ensure_flow_compiled(flow %q) returned %s: %w", flowSlug, raw, err)
	}
	return res, nil
}

// StepRoutes returns the stored route of each step of a flow (pgflow.steps.queue_name), by step slug, so Go never
// rebuilds a queue name the database did not record.
func StepRoutes(ctx context.Context, db DBTX, flowSlug string) (map[string]string, error) {
	rows, err := db.Query(ctx, `select s.step_slug, s.queue_name from pgflow.steps as s where s.flow_slug = $1::text`, flowSlug)
	if err != nil {
		return nil, fmt.Errorf("routes of flow %q: %w", flowSlug, err)
	}
	routes := map[string]string{}
	var step, queue string
	_, err = pgx.ForEachRow(rows, []any{&step, &queue}, func() error {
		routes[step] = queue
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("routes of flow %q: %w", flowSlug, err)
	}
	return routes, nil
}

// FlowQueue returns a queue of the flow for a worker row: the route of its first step, or for a flow without
// steps its default queue (pgflow._default_queue_name).
func FlowQueue(ctx context.Context, db DBTX, flowSlug string) (string, error) {
	var q string
	err := db.QueryRow(ctx, `select coalesce(
			(select s.queue_name from pgflow.steps as s where s.flow_slug = $1::text order by s.step_index limit 1),
			pgflow._default_queue_name($1::text))`, flowSlug).Scan(&q)
	if err != nil {
		return "", fmt.Errorf("queue of flow %q: %w", flowSlug, err)
	}
	return q, nil
}
