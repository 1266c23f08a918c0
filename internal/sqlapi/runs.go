package sqlapi

// Reads of runs for the CLI and the dashboard: a page of runs, one run as the read model RunDetail, and one stored
// JSON document of a run. The run itself is read through pgflow.get_run_with_states (GetRunWithStates), the rest
// are plain selects on the pgflow tables; none of them changes anything.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgflow-go/pgflow/internal/pgerr"
)

// ListRunsParams selects a page of runs. Empty strings and nil times mean "any".
type ListRunsParams struct {
	Flow          string
	Status        string // started | completed | failed | cancelled
	StartedAfter  *time.Time
	StartedBefore *time.Time
	// After, when set, continues a listing after that run (keyset pagination, newest first): only runs that sort
	// after it (older, or as old with a smaller run id) are returned.
	After  *RunKey
	Limit  int // rows per page; <= 0 means 50
	Offset int
	// NoCount skips counting every matching run (the count is 0 then): a cursor-driven listing does not need it,
	// and with millions of runs it costs far more than the page.
	NoCount bool
}

// RunKey is a run's position in a listing: runs sort newest first by started_at, then run_id.
type RunKey struct {
	StartedAt time.Time
	RunID     string
}

// RunSummary is one run as a run list shows it (no input or output).
type RunSummary struct {
	RunID          string
	FlowSlug       string
	Status         string
	RemainingSteps int
	StartedAt      time.Time
	CompletedAt    *time.Time
	FailedAt       *time.Time
	CancelledAt    *time.Time // schema v0.20.0
	RetryOf        *string    // schema v0.20.0: the run a fresh retry re-ran
	StepsTotal     int
	StepsDone      int     // completed or skipped
	ErrorMessage   *string // of the first failed step (by step_index), shortened to 300 characters
}

// listRunsColumns are the columns of a run listing.
const listRunsColumns = `
select r.run_id::text, r.flow_slug, r.status, r.remaining_steps, r.started_at, r.completed_at, r.failed_at,
  r.cancelled_at, r.retry_of::text,
  (select count(*) from pgflow.step_states as ss where ss.run_id = r.run_id)::int,
  (select count(*) from pgflow.step_states as ss
   where ss.run_id = r.run_id and ss.status in ('completed', 'skipped'))::int,
  (select left(ss.error_message, 300)
   from pgflow.step_states as ss
   join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
   where ss.run_id = r.run_id and ss.status = 'failed'
   order by s.step_index limit 1)
from pgflow.runs as r`

// runFilter builds the WHERE clause of a listing from the filters actually given: a clause such as
// "($1 is null or flow_slug = $1)" would keep a cached generic plan from using the listing indexes
// (idx_runs_flow_slug, idx_runs_status, idx_runs_started_at: a backward index scan that reads one page).
func runFilter(p ListRunsParams, withCursor bool) (where string, args []any) {
	var conds []string
	if p.Flow != "" {
		args = append(args, p.Flow)
		conds = append(conds, fmt.Sprintf("r.flow_slug = $%d::text", len(args)))
	}
	if p.Status != "" {
		args = append(args, p.Status)
		conds = append(conds, fmt.Sprintf("r.status = $%d::text", len(args)))
	}
	if p.StartedAfter != nil {
		args = append(args, *p.StartedAfter)
		conds = append(conds, fmt.Sprintf("r.started_at > $%d::timestamptz", len(args)))
	}
	if p.StartedBefore != nil {
		args = append(args, *p.StartedBefore)
		conds = append(conds, fmt.Sprintf("r.started_at < $%d::timestamptz", len(args)))
	}
	if withCursor && p.After != nil {
		args = append(args, p.After.StartedAt, p.After.RunID)
		conds = append(conds, fmt.Sprintf("(r.started_at, r.run_id) < ($%d::timestamptz, $%d::uuid)", len(args)-1, len(args)))
	}
	if len(conds) == 0 {
		return "", args
	}
	return " where " + strings.Join(conds, " and "), args
}

// ListRuns returns one page of runs, newest first (by started_at, then run_id), and how many runs match the
// filter in all.
func ListRuns(ctx context.Context, db DBTX, p ListRunsParams) ([]RunSummary, int64, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	where, args := runFilter(p, true)
	n := len(args)
	args = append(args, limit, max(p.Offset, 0))
	query := listRunsColumns + where +
		fmt.Sprintf("\norder by r.started_at desc, r.run_id desc\nlimit $%d::int offset $%d::int", n+1, n+2)
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, 0, fmt.Errorf("read the runs (flow %q, status %q): %w", p.Flow, p.Status, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunSummary, error) {
		var r RunSummary
		err := row.Scan(&r.RunID, &r.FlowSlug, &r.Status, &r.RemainingSteps, &r.StartedAt, &r.CompletedAt,
			&r.FailedAt, &r.CancelledAt, &r.RetryOf, &r.StepsTotal, &r.StepsDone, &r.ErrorMessage)
		return r, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read the runs (flow %q, status %q): %w", p.Flow, p.Status, err)
	}
	if p.NoCount {
		return out, 0, nil
	}
	countWhere, countArgs := runFilter(p, false)
	var total int64
	if err := db.QueryRow(ctx, "select count(*) from pgflow.runs as r"+countWhere, countArgs...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count the runs (flow %q, status %q): %w", p.Flow, p.Status, err)
	}
	return out, total, nil
}

// RunDetail is the one read model of a run, shared by the CLI (runs show, runs watch, runs start, the demo) and
// the dashboard's run page and run API: the run, its flow's definition, and per step its state, its definition
// and a summary of its tasks, with (optionally) a bounded list of the tasks themselves.
//
// The run and its step states come from one statement (pgflow.get_run_with_states), the definition and the tasks
// from later ones, so a task may be a moment ahead of its step's state.
type RunDetail struct {
	Run   RunRow
	Flow  FlowDefinition
	Steps []StepDetail // every step state of the run, in step_index order
}

// StepDetail is one step of a run.
type StepDetail struct {
	StepStateRow
	Definition StepDefinition
	Tasks      TaskSummary // over all tasks of the step
	TaskList   []Task      // the tasks GetRunDetailParams.TasksPerStep asked for, by task_index
}

// Step returns the step slug of the run, or nil.
func (d *RunDetail) Step(slug string) *StepDetail {
	for i := range d.Steps {
		if d.Steps[i].StepSlug == slug {
			return &d.Steps[i]
		}
	}
	return nil
}

// GetRunDetailParams selects what GetRunDetail reads beyond the run, its steps and their task summaries.
type GetRunDetailParams struct {
	RunID string
	// TasksPerStep is how many tasks of each step StepDetail.TaskList holds (the lowest task indexes): 0 none,
	// < 0 all of them.
	TasksPerStep int
	// OutputChars is how many characters of each listed task's output to read; <= 0 reads no output text.
	OutputChars int
}

// GetRunDetail reads the run p.RunID as a RunDetail. It returns nil, nil for an unknown run. A run id that is not
// a UUID is the database's error (IsInvalidRunID).
func GetRunDetail(ctx context.Context, db DBTX, p GetRunDetailParams) (*RunDetail, error) {
	run, err := GetRunWithStates(ctx, db, p.RunID)
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", p.RunID, err)
	}
	if run == nil {
		return nil, nil
	}
	def, err := GetFlowDefinition(ctx, db, run.Run.FlowSlug)
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", p.RunID, err)
	}
	if def == nil { // runs reference their flow, so only a concurrent delete of the flow gets here
		return nil, fmt.Errorf("read run %s: its flow %q is gone", p.RunID, run.Run.FlowSlug)
	}
	sums, err := taskSummaries(ctx, db, p.RunID)
	if err != nil {
		return nil, err
	}
	var tasks []Task
	if p.TasksPerStep != 0 {
		if tasks, err = ListRunTasks(ctx, db, ListRunTasksParams{
			RunID: p.RunID, PerStep: p.TasksPerStep, OutputChars: p.OutputChars,
		}); err != nil {
			return nil, err
		}
	}
	byStep := map[string][]Task{}
	for _, t := range tasks {
		byStep[t.StepSlug] = append(byStep[t.StepSlug], t)
	}
	d := &RunDetail{Run: run.Run, Flow: *def, Steps: make([]StepDetail, 0, len(run.Steps))}
	for _, st := range run.Steps {
		sd := StepDetail{StepStateRow: st, Tasks: sums[st.StepSlug], TaskList: byStep[st.StepSlug]}
		if s := def.Step(st.StepSlug); s != nil {
			sd.Definition = *s
		} else { // cannot happen while step_states references steps; keep the state visible anyway
			sd.Definition = StepDefinition{StepSlug: st.StepSlug, StepType: "single", StepIndex: len(def.Steps)}
		}
		d.Steps = append(d.Steps, sd)
	}
	return d, nil
}

// JSONPart names one stored JSON document of a run.
type JSONPart struct {
	Kind      string // input | output | step | task
	StepSlug  string // for step and task
	TaskIndex int    // for task
}

// GetRunJSON returns the full JSON text of one document of a run: the run's input or output, a step's output or a
// task's output. found is false when the run, step or task does not exist; a document that exists but is SQL
// NULL is returned as "null".
func GetRunJSON(ctx context.Context, db DBTX, runID string, p JSONPart) (text string, found bool, err error) {
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
		return "", false, fmt.Errorf("unknown JSON part %q of run %s (use input, output, step or task)", p.Kind, runID)
	}
	err = db.QueryRow(ctx, q, args...).Scan(&text)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the %s of run %s: %w", p.Kind, runID, err)
	}
	return text, true, nil
}

// ErrRunNotFound is wrapped by RunInput when no run has the given id.
var ErrRunNotFound = errors.New("run not found")

// RunInput returns the input of run runID.
func RunInput(ctx context.Context, db DBTX, runID string) (json.RawMessage, error) {
	var raw json.RawMessage
	err := db.QueryRow(ctx, `select r.input from pgflow.runs as r where r.run_id = $1::uuid`, runID).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("input of run %s: %w", runID, ErrRunNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("input of run %s: %w", runID, err)
	}
	return raw, nil
}

// This file holds the SQL the client sends: starting runs and reading a run with its step states. Both go
// through the SECURITY DEFINER functions pgflow.start_flow_with_states and pgflow.get_run_with_states, so a role
// that was granted only those two functions (the documented client grants) can use the client.

// RunRow is a pgflow.runs row as pgflow.get_run_with_states renders it (keys are the column names).
type RunRow struct {
	RunID          string          `json:"run_id"`
	FlowSlug       string          `json:"flow_slug"`
	Status         string          `json:"status"`
	Input          json.RawMessage `json:"input"`
	Output         json.RawMessage `json:"output"`
	RemainingSteps int             `json:"remaining_steps"`
	StartedAt      time.Time       `json:"started_at"`
	CompletedAt    *time.Time      `json:"completed_at"`
	FailedAt       *time.Time      `json:"failed_at"`
	// Since schema v0.20.0 (run control): when and why the run was cancelled, and the run a fresh retry re-ran.
	CancelledAt  *time.Time `json:"cancelled_at"`
	CancelReason *string    `json:"cancel_reason"`
	RetryOf      *string    `json:"retry_of"`
}

// StepStateRow is a pgflow.step_states row as pgflow.get_run_with_states renders it.
type StepStateRow struct {
	FlowSlug       string          `json:"flow_slug"`
	RunID          string          `json:"run_id"`
	StepSlug       string          `json:"step_slug"`
	Status         string          `json:"status"`
	RemainingTasks *int            `json:"remaining_tasks"`
	RemainingDeps  int             `json:"remaining_deps"`
	InitialTasks   *int            `json:"initial_tasks"`
	Output         json.RawMessage `json:"output"`
	ErrorMessage   *string         `json:"error_message"`
	SkipReason     *string         `json:"skip_reason"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at"`
	CompletedAt    *time.Time      `json:"completed_at"`
	FailedAt       *time.Time      `json:"failed_at"`
	SkippedAt      *time.Time      `json:"skipped_at"`
}

// RunWithStates is one consistent read of a run and its step states, steps in step_index order.
//
// JSON null and SQL NULL both render as null in the function's jsonb, so an Output that reads "null" may be
// either; the status tells whether an output exists (only completed runs and steps have one).
type RunWithStates struct {
	Run   RunRow         `json:"run"`
	Steps []StepStateRow `json:"steps"`
}

const startFlowWithStatesSQL = `select pgflow.start_flow_with_states(flow_slug => $1::text, input => $2::jsonb, run_id => $3::uuid)`

// startFlowArgs are start_flow's input and run_id arguments: SQL NULL for a nil input and for an empty id.
func startFlowArgs(input json.RawMessage, runID string) (in, id any) {
	if input != nil {
		in = string(input)
	}
	if runID != "" {
		id = runID
	}
	return in, id
}

// StartFlowWithStates starts a run of flowSlug with input (a JSON document; nil means SQL NULL) and returns the
// run as it is at the end of the start. runID "" lets the database choose a random id. Errors are the database's:
// use IsUnknownFlow, IsDuplicateRun and IsInvalidRunID to classify them.
func StartFlowWithStates(ctx context.Context, db DBTX, flowSlug string, input json.RawMessage, runID string) (*RunWithStates, error) {
	in, id := startFlowArgs(input, runID)
	var raw []byte
	if err := db.QueryRow(ctx, startFlowWithStatesSQL, flowSlug, in, id).Scan(&raw); err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, fmt.Errorf("pgflow.start_flow_with_states(%q) returned NULL", flowSlug)
	}
	return decodeRunWithStates(raw)
}

// StartFlowWithStatesDeferred is StartFlowWithStates with the start's notifications deferred: the start commits
// without notifying and returns what it owes; the caller sends it (Notifications.Send) once the call returned.
func StartFlowWithStatesDeferred(ctx context.Context, db Batcher, flowSlug string, input json.RawMessage, runID string) (*RunWithStates, Notifications, error) {
	in, id := startFlowArgs(input, runID)
	var raw []byte
	pending, err := deferNotifications(ctx, db, 1, func(b *pgx.Batch) {
		b.Queue(startFlowWithStatesSQL, flowSlug, in, id).QueryRow(func(row pgx.Row) error { return row.Scan(&raw) })
	})
	if err != nil {
		return nil, "", err
	}
	if raw == nil {
		return nil, pending, fmt.Errorf("pgflow.start_flow_with_states(%q) returned NULL", flowSlug)
	}
	r, err := decodeRunWithStates(raw)
	return r, pending, err
}

const getRunWithStatesSQL = `select pgflow.get_run_with_states(run_id => $1::uuid)`

// GetRunWithStates reads a run and its step states in one statement. It returns nil, nil for an unknown run id.
func GetRunWithStates(ctx context.Context, db DBTX, runID string) (*RunWithStates, error) {
	var raw []byte
	if err := db.QueryRow(ctx, getRunWithStatesSQL, runID).Scan(&raw); err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, nil
	}
	return decodeRunWithStates(raw)
}

func decodeRunWithStates(raw []byte) (*RunWithStates, error) {
	if r, ok := readRunDoc(raw); ok {
		return r, nil
	}
	var r RunWithStates
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("decode run with states: %w", err)
	}
	return &r, nil
}

// IsUnknownFlow reports whether err is the foreign-key violation start_flow raises for a flow slug that is not
// in pgflow.flows.
func IsUnknownFlow(err error) bool {
	return constraintViolation(err, "23503", "runs_flow_slug_fkey")
}

// IsDuplicateRun reports whether err is the unique violation start_flow raises for a run id that already exists.
func IsDuplicateRun(err error) bool {
	return constraintViolation(err, "23505", "runs_pkey")
}

// IsInvalidRunID reports whether err is PostgreSQL rejecting a run id that is not a UUID.
func IsInvalidRunID(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22P02"
}

func constraintViolation(err error, code, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code && pgErr.ConstraintName == constraint
}

// StartedRun is a run as pgflow.start_flows returns it.
type StartedRun struct {
	RunID     string
	Status    string
	StartedAt time.Time
}

const startFlowsSQL = `select r.run_id::text, r.status, r.started_at
   from pgflow.start_flows(flow_slug => $1::text, inputs => $2::jsonb[], run_ids => $3::uuid[]) as r`

// startFlowsArgs are start_flows' array arguments: SQL NULL for a nil input and for an empty run id.
func startFlowsArgs(inputs []json.RawMessage, runIDs []string) (ins []*string, ids any) {
	ins = make([]*string, len(inputs))
	for i, in := range inputs {
		if in != nil {
			s := string(in)
			ins[i] = &s
		}
	}
	if runIDs != nil {
		arr := make([]*string, len(runIDs))
		for i := range runIDs {
			if runIDs[i] != "" {
				arr[i] = &runIDs[i]
			}
		}
		ids = arr
	}
	return ins, ids
}

// StartFlowsDeferred is StartFlows with the starts' notifications deferred (see Notifications): the caller sends
// them once the call returned. From DeferNotificationsBelow inputs on, the starts notify inside their transaction
// and no Notifications are returned.
func StartFlowsDeferred(ctx context.Context, db Batcher, flowSlug string, inputs []json.RawMessage, runIDs []string) ([]StartedRun, Notifications, error) {
	if len(inputs) == 0 {
		return nil, "", nil
	}
	ins, ids := startFlowsArgs(inputs, runIDs)
	var runs []StartedRun
	pending, err := deferNotifications(ctx, db, len(inputs), func(b *pgx.Batch) {
		b.Queue(startFlowsSQL, flowSlug, ins, ids).Query(func(rows pgx.Rows) (err error) {
			runs, err = pgx.CollectRows(rows, pgx.RowToStructByPos[StartedRun])
			return err
		})
	})
	if err != nil {
		return nil, "", fmt.Errorf("pgflow.start_flows(flow %q, %d runs): %w", flowSlug, len(inputs), err)
	}
	return runs, pending, nil
}

const startFlowsWithStatesSQL = `select s from pgflow.start_flows_with_states(flow_slug => $1::text, inputs => $2::jsonb[]) as s`

// StartFlowsWithStatesDeferred starts one run of flowSlug per input in one call of pgflow.start_flows_with_states
// (start_flows: one transaction) and returns each run as StartFlowWithStates returns it (the run and its step
// states at the end of the start), in input order. Notifications are deferred as in StartFlowsDeferred.
func StartFlowsWithStatesDeferred(ctx context.Context, db Batcher, flowSlug string, inputs []json.RawMessage) ([]*RunWithStates, Notifications, error) {
	if len(inputs) == 0 {
		return nil, "", nil
	}
	ins, _ := startFlowsArgs(inputs, nil)
	var raws [][]byte
	pending, err := deferNotifications(ctx, db, len(inputs), func(b *pgx.Batch) {
		b.Queue(startFlowsWithStatesSQL, flowSlug, ins).Query(func(rows pgx.Rows) (err error) {
			raws, err = pgx.CollectRows(rows, pgx.RowTo[[]byte])
			return err
		})
	})
	if err != nil {
		return nil, "", fmt.Errorf("pgflow.start_flows(flow %q, %d runs): %w", flowSlug, len(inputs), err)
	}
	if len(raws) != len(inputs) {
		return nil, pending, fmt.Errorf("pgflow.start_flows(flow %q, %d runs) returned %d runs", flowSlug, len(inputs), len(raws))
	}
	runs := make([]*RunWithStates, len(raws))
	for i, raw := range raws {
		if raw == nil {
			return nil, pending, fmt.Errorf("pgflow.start_flows(flow %q): run %d of %d not found after its start", flowSlug, i+1, len(raws))
		}
		if runs[i], err = decodeRunWithStates(raw); err != nil {
			return nil, pending, err
		}
	}
	return runs, pending, nil
}

// StartFlows starts one run of flowSlug per input with pgflow.start_flows (one transaction, one round trip) and
// returns the runs in input order. runIDs is nil for random ids, else one id per input ("" = random). A nil
// input is SQL NULL. The call is atomic: on any error no run was started.
func StartFlows(ctx context.Context, db DBTX, flowSlug string, inputs []json.RawMessage, runIDs []string) ([]StartedRun, error) {
	if len(inputs) == 0 {
		return nil, nil
	}
	ins, ids := startFlowsArgs(inputs, runIDs)
	rows, err := db.Query(ctx, startFlowsSQL, flowSlug, ins, ids)
	if err != nil {
		return nil, fmt.Errorf("pgflow.start_flows(flow %q, %d runs): %w", flowSlug, len(inputs), err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[StartedRun])
	if err != nil {
		return nil, fmt.Errorf("pgflow.start_flows(flow %q, %d runs): %w", flowSlug, len(inputs), err)
	}
	return runs, nil
}

// Run control (schema v0.20.0): cancel a run, retry it in place or as a fresh run, and the health read that says
// what a run waits on. The two calls change state only through pgflow.cancel_run and pgflow.retry_run.

// ControlledRun is the run row pgflow.cancel_run or pgflow.retry_run returned.
type ControlledRun struct {
	RunID  string
	Status string
}

// CancelRun calls pgflow.cancel_run(run_id, reason) (reason "" is NULL). Errors are the database's: classify
// them with IsRunMissing (no such run) and IsRunFinished (the run is already completed, failed or cancelled).
func CancelRun(ctx context.Context, db DBTX, runID, reason string) (ControlledRun, error) {
	var why any
	if reason != "" {
		why = reason
	}
	var r ControlledRun
	err := db.QueryRow(ctx, `select r.run_id::text, r.status from pgflow.cancel_run(run_id => $1::uuid, reason => $2::text) as r`,
		runID, why).Scan(&r.RunID, &r.Status)
	return r, err
}

// RetryRun calls pgflow.retry_run(run_id, fresh): fresh false resumes the failed or cancelled run in place and
// returns it; fresh true starts a new run with the same input (retry_of = runID) and returns the new run. Errors
// are the database's: IsRunMissing, IsRunFinished (the run's status does not allow it: started or completed, or a
// concurrent retry resumed it first).
func RetryRun(ctx context.Context, db DBTX, runID string, fresh bool) (ControlledRun, error) {
	var r ControlledRun
	err := db.QueryRow(ctx, `select r.run_id::text, r.status from pgflow.retry_run(run_id => $1::uuid, fresh => $2::boolean) as r`,
		runID, fresh).Scan(&r.RunID, &r.Status)
	return r, err
}

// IsRunMissing reports whether err is the no_data_found (P0002) that pgflow.cancel_run and pgflow.retry_run
// raise for an unknown run id.
func IsRunMissing(err error) bool { return pgerr.Code(err) == "P0002" }

// IsRunFinished reports whether err is the object_not_in_prerequisite_state (55000) that pgflow.cancel_run and
// pgflow.retry_run raise for a run whose status does not allow the call ("run <id> is already <status>").
func IsRunFinished(err error) bool { return pgerr.Code(err) == "55000" }

// ErrorMessage returns the message of the database error in err's chain, or err's own text.
func ErrorMessage(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	return err.Error()
}

// RunHealthRow is what one run waits on: its status, per queue its unfinished tasks and the alive workers
// serving that queue, and its tasks that are started for longer than their step timeout (waiting for
// stalled-task recovery). Times are the database clock's.
type RunHealthRow struct {
	RunID   string
	Status  string
	Now     time.Time
	Queues  []RunQueueLoad
	Stalled []StalledTask
}

// RunQueueLoad is one queue holding unfinished tasks of a run.
type RunQueueLoad struct {
	Queue        string
	Queued       int
	Started      int
	AliveWorkers int        // not stopped, not deprecated, heartbeat within the threshold
	LastSeen     *time.Time // the latest heartbeat of any worker row of the queue; nil when none ever registered
}

// StalledTask is a started task past its step timeout: its worker did not report (it died, or its handler
// outlives the timeout) and stalled-task recovery requeues it once the timeout plus 30 s have passed.
type StalledTask struct {
	StepSlug       string
	TaskIndex      int
	Attempt        int
	StartedAt      time.Time
	TimeoutSeconds int
	WorkerID       *string
	RequeuedCount  int
}

const runHealthQueuesSQL = `
select t.queue_name,
  count(*) filter (where t.status = 'queued')::int,
  count(*) filter (where t.status = 'started')::int,
  (select count(*) from pgflow.workers as w
    where w.queue_name = t.queue_name and w.stopped_at is null and w.deprecated_at is null
      and w.last_heartbeat_at >= now() - make_interval(secs => $2::float8))::int,
  (select max(w.last_heartbeat_at) from pgflow.workers as w where w.queue_name = t.queue_name)
from pgflow.step_tasks as t
where t.run_id = $1::uuid and t.status in ('queued', 'started')
group by t.queue_name
order by t.queue_name`

const runHealthStalledSQL = `
select t.step_slug, t.task_index, t.attempts_count, t.started_at, coalesce(s.opt_timeout, f.opt_timeout)::int,
  t.last_worker_id::text, t.requeued_count
from pgflow.step_tasks as t
join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
join pgflow.flows as f on f.flow_slug = t.flow_slug
where t.run_id = $1::uuid and t.status = 'started' and t.permanently_stalled_at is null
  and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout)::bigint)
order by s.step_index, t.task_index`

// GetRunHealth reads what run runID waits on (see RunHealthRow); a worker counts as alive when its last heartbeat
// is at most aliveWithin old. It returns nil, nil for an unknown run. The reads are plain selects on the pgflow
// tables (the role needs SELECT on runs, step_tasks, steps, flows and workers); they change nothing.
func GetRunHealth(ctx context.Context, db DBTX, runID string, aliveWithin time.Duration) (*RunHealthRow, error) {
	h := &RunHealthRow{RunID: runID}
	err := db.QueryRow(ctx, `select r.status, now() from pgflow.runs as r where r.run_id = $1::uuid`, runID).Scan(&h.Status, &h.Now)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the health of run %s: %w", runID, err)
	}
	rows, err := db.Query(ctx, runHealthQueuesSQL, runID, aliveWithin.Seconds())
	if err != nil {
		return nil, fmt.Errorf("read the queues of run %s: %w", runID, err)
	}
	h.Queues, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunQueueLoad, error) {
		var q RunQueueLoad
		err := row.Scan(&q.Queue, &q.Queued, &q.Started, &q.AliveWorkers, &q.LastSeen)
		return q, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the queues of run %s: %w", runID, err)
	}
	rows, err = db.Query(ctx, runHealthStalledSQL, runID)
	if err != nil {
		return nil, fmt.Errorf("read the stalled tasks of run %s: %w", runID, err)
	}
	h.Stalled, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (StalledTask, error) {
		var s StalledTask
		err := row.Scan(&s.StepSlug, &s.TaskIndex, &s.Attempt, &s.StartedAt, &s.TimeoutSeconds, &s.WorkerID, &s.RequeuedCount)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the stalled tasks of run %s: %w", runID, err)
	}
	return h, nil
}
