package pgflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/taskrun"
)

// RunStatus is the status of a run: RunStarted, then RunCompleted, RunFailed or RunCancelled. Those three are
// terminal: nothing happens to the run any more, except that Client.RetryRun may return a failed or cancelled run
// to RunStarted (a completed run is never left).
type RunStatus string

// Run statuses.
const (
	RunStarted   RunStatus = "started"
	RunCompleted RunStatus = "completed"
	RunFailed    RunStatus = "failed"
	// RunCancelled: Client.CancelRun (or pgflow.cancel_run) stopped the run; see Run.CancelledAt and CancelReason.
	RunCancelled RunStatus = "cancelled"
)

// Terminal reports whether the status is completed, failed or cancelled.
func (s RunStatus) Terminal() bool { return s == RunCompleted || s == RunFailed || s == RunCancelled }

// StepStatus is the status of one step within a run: StepCreated, StepStarted, then one of the terminal
// statuses StepCompleted, StepFailed or StepSkipped.
type StepStatus string

// Step statuses.
const (
	StepCreated   StepStatus = "created"
	StepStarted   StepStatus = "started"
	StepCompleted StepStatus = "completed"
	StepFailed    StepStatus = "failed"
	StepSkipped   StepStatus = "skipped"
)

// Terminal reports whether the status is completed, failed or skipped.
func (s StepStatus) Terminal() bool { return s == StepCompleted || s == StepFailed || s == StepSkipped }

// Run is a snapshot of one run of a flow with the state of each of its steps, read in one consistent statement.
// JSON values (Input, Output, step outputs) are kept exactly as stored: 0, false, "" and null stay what they are.
type Run struct {
	ID       string          `json:"run_id"`
	FlowSlug string          `json:"flow_slug"`
	Status   RunStatus       `json:"status"`
	Input    json.RawMessage `json:"input"`
	// Output is set once the run completed: an object keyed by the slugs of the leaf steps (steps no other step
	// depends on) that completed; null if none did (all leaves skipped). Nil while the run is not completed.
	Output json.RawMessage `json:"output,omitempty"`
	// RemainingSteps counts the steps not yet completed or skipped; the run completes when it reaches 0.
	RemainingSteps int        `json:"remaining_steps"`
	StartedAt      time.Time  `json:"started_at"`
	CompletedAt    *time.Time `json:"completed_at,omitempty"`
	FailedAt       *time.Time `json:"failed_at,omitempty"`
	// CancelledAt and CancelReason are set for a cancelled run (CancelReason only when a reason was given).
	CancelledAt  *time.Time `json:"cancelled_at,omitempty"`
	CancelReason string     `json:"cancel_reason,omitempty"`
	// RetryOf is the id of the run this one re-ran, for a run started by Client.RetryRun with Fresh; "" otherwise.
	RetryOf string `json:"retry_of,omitempty"`
	// Steps are in definition (step_index) order.
	Steps []StepState `json:"steps"`
}

// StepState is the state of one step within a run.
type StepState struct {
	StepSlug string     `json:"step_slug"`
	Status   StepStatus `json:"status"`
	// RemainingTasks is nil until the step starts (and after it is skipped), then counts unfinished tasks.
	RemainingTasks *int `json:"remaining_tasks"`
	// RemainingDeps counts dependencies not yet completed or skipped; the step is ready at 0.
	RemainingDeps int `json:"remaining_deps"`
	// InitialTasks is the number of tasks of the step: 1 for a single step, the array length for a map step
	// (0 for an empty map, which completes without tasks); nil for a dependent map until its dependency completes.
	InitialTasks *int `json:"initial_tasks"`
	// Output is set once the step completed: the task's output for a single step, the array of task outputs in
	// order for a map step. Nil while the step is not completed.
	Output json.RawMessage `json:"output,omitempty"`
	// ErrorMessage is the last failure of a failed step, or of a step skipped because its handler exhausted its
	// attempts.
	ErrorMessage string `json:"error_message,omitempty"`
	// SkipReason is set for skipped steps: "condition_unmet", "handler_failed" or "dependency_skipped"; and, for
	// the steps that had not finished when their run failed or was cancelled (they will not run), "run_failed" or
	// "run_cancelled".
	SkipReason  string     `json:"skip_reason,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	StartedAt   *time.Time `json:"started_at,omitempty"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	FailedAt    *time.Time `json:"failed_at,omitempty"`
	SkippedAt   *time.Time `json:"skipped_at,omitempty"`
}

// Step returns the state of the step with the given slug, or nil if the run's flow has no such step.
func (r *Run) Step(slug string) *StepState {
	for i := range r.Steps {
		if r.Steps[i].StepSlug == slug {
			return &r.Steps[i]
		}
	}
	return nil
}

// Err returns nil unless the run failed or was cancelled. For a failed run it is an error wrapping ErrRunFailed
// that names the run, the flow and each failed step with its error message; for a cancelled run, a
// *RunCancelledError (errors.Is(err, ErrRunCancelled)) with the run, its flow and the reason given.
func (r *Run) Err() error {
	if r.Status == RunCancelled {
		return &RunCancelledError{RunID: r.ID, FlowSlug: r.FlowSlug, Reason: r.CancelReason, At: r.CancelledAt}
	}
	if r.Status != RunFailed {
		return nil
	}
	var parts []string
	for _, s := range r.Steps {
		if s.Status == StepFailed {
			parts = append(parts, fmt.Sprintf("step %q: %s", s.StepSlug, s.ErrorMessage))
		}
	}
	if len(parts) == 0 {
		return fmt.Errorf("pgflow: run %s of flow %q: %w", r.ID, r.FlowSlug, ErrRunFailed)
	}
	return fmt.Errorf("pgflow: run %s of flow %q: %w: %s", r.ID, r.FlowSlug, ErrRunFailed, strings.Join(parts, "; "))
}

// Errors returned by the client and the output helpers. They are wrapped with the ids involved; test with
// errors.Is.
var (
	// ErrRunNotFound: no run has the given id.
	ErrRunNotFound = errors.New("run not found")
	// ErrFlowNotFound: the flow slug is not in the database (compile the flow first: start a worker for it or
	// run its CompileSQL statements).
	ErrFlowNotFound = errors.New("flow not found")
	// ErrInvalidRunID: a run id is not a UUID.
	ErrInvalidRunID = errors.New("invalid run id")
	// ErrRunIDConflict: a caller-chosen run id already belongs to a run of another flow.
	ErrRunIDConflict = errors.New("run id already used by another flow")
	// ErrRunFailed: the run failed (returned by Run.Err and RunOutput).
	ErrRunFailed = errors.New("run failed")
	// ErrRunFinished: Client.CancelRun on a run that is already completed, failed or cancelled, or Client.RetryRun
	// on a run that is started or completed (or that a concurrent retry resumed first). The error names the
	// run's status; nothing was changed.
	ErrRunFinished = errors.New("run already finished")
	// ErrRunNotCompleted: RunOutput on a run that is still running.
	ErrRunNotCompleted = errors.New("run not completed")
	// ErrStepNotCompleted: StepOutput for a step that has not completed (it is created, started, failed or
	// skipped; the error names the status).
	ErrStepNotCompleted = errors.New("step not completed")
	// ErrStepNotFound: StepOutput for a step the run's flow does not have.
	ErrStepNotFound = errors.New("step not found")
	// ErrClientClosed: the Client was closed.
	ErrClientClosed = errors.New("client closed")
)

// RunOutput decodes the output of a completed run into O (typically a struct with one field per leaf step, or
// map[string]json.RawMessage). A failed run gives an error wrapping ErrRunFailed, a cancelled one a
// *RunCancelledError (ErrRunCancelled), a running one ErrRunNotCompleted.
func RunOutput[O any](run *Run) (O, error) {
	var out O
	if run == nil {
		return out, errors.New("pgflow: RunOutput of a nil run")
	}
	switch run.Status {
	case RunCompleted:
	case RunFailed, RunCancelled:
		return out, run.Err()
	default:
		return out, fmt.Errorf("pgflow: run %s of flow %q is %s: %w", run.ID, run.FlowSlug, run.Status, ErrRunNotCompleted)
	}
	if err := json.Unmarshal(nullIfEmpty(run.Output), &out); err != nil {
		return out, fmt.Errorf("pgflow: decode output of run %s into %T: %w", run.ID, out, err)
	}
	return out, nil
}

// StepOutput decodes the output of one completed step of run into the step's output type. A step that has not
// completed gives an error wrapping ErrStepNotCompleted that names its status (and skip reason or error message).
func StepOutput[O any](run *Run, step StepHandle[O]) (O, error) {
	var out O
	if run == nil {
		return out, errors.New("pgflow: StepOutput of a nil run")
	}
	slug := step.Slug()
	st := run.Step(slug)
	if st == nil {
		return out, fmt.Errorf("pgflow: run %s of flow %q has no step %q: %w", run.ID, run.FlowSlug, slug, ErrStepNotFound)
	}
	if st.Status != StepCompleted {
		detail := ""
		switch {
		case st.SkipReason != "":
			detail = " (" + st.SkipReason + ")"
		case st.ErrorMessage != "":
			detail = ": " + st.ErrorMessage
		}
		return out, fmt.Errorf("pgflow: step %q of run %s is %s%s: %w", slug, run.ID, st.Status, detail, ErrStepNotCompleted)
	}
	if err := json.Unmarshal(nullIfEmpty(st.Output), &out); err != nil {
		return out, fmt.Errorf("pgflow: decode output of step %q of run %s into %T: %w", slug, run.ID, out, err)
	}
	return out, nil
}

func nullIfEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// EngineRun converts a run as the engine reads it (pgflow.get_run_with_states) into the Run that Client.GetRun
// returns. Package pgflowtest uses it, so its runs read exactly like the client's; applications have no need to
// (its argument type is internal to this module).
func EngineRun(r *sqlapi.RunWithStates) *Run {
	run := &Run{
		ID:             r.Run.RunID,
		FlowSlug:       r.Run.FlowSlug,
		Status:         RunStatus(r.Run.Status),
		Input:          r.Run.Input,
		RemainingSteps: r.Run.RemainingSteps,
		StartedAt:      r.Run.StartedAt,
		CompletedAt:    r.Run.CompletedAt,
		FailedAt:       r.Run.FailedAt,
		CancelledAt:    r.Run.CancelledAt,
		Steps:          make([]StepState, 0, len(r.Steps)),
	}
	if r.Run.CancelReason != nil {
		run.CancelReason = *r.Run.CancelReason
	}
	if r.Run.RetryOf != nil {
		run.RetryOf = *r.Run.RetryOf
	}
	if run.Status == RunCompleted {
		run.Output = nullIfEmpty(r.Run.Output)
	}
	for _, s := range r.Steps {
		st := StepState{
			StepSlug:       s.StepSlug,
			Status:         StepStatus(s.Status),
			RemainingTasks: s.RemainingTasks,
			RemainingDeps:  s.RemainingDeps,
			InitialTasks:   s.InitialTasks,
			CreatedAt:      s.CreatedAt,
			StartedAt:      s.StartedAt,
			CompletedAt:    s.CompletedAt,
			FailedAt:       s.FailedAt,
			SkippedAt:      s.SkippedAt,
		}
		if st.Status == StepCompleted {
			st.Output = nullIfEmpty(s.Output)
		}
		if s.ErrorMessage != nil {
			st.ErrorMessage = *s.ErrorMessage
		}
		if s.SkipReason != nil {
			st.SkipReason = *s.SkipReason
		}
		run.Steps = append(run.Steps, st)
	}
	return run
}

// Event is one run or step transition as published by the database with pg_notify on the channel
// "pgflow:run:<run id>" (and on "pgflow"). It carries ids and the new status only; read the run (GetRun) for
// inputs, outputs and error messages.
type Event struct {
	// Type is one of the Event* constants.
	Type EventType `json:"event_type"`
	// Event is the broadcast name: "run:<status>" for run events, "step:<step slug>:<status>" for step events.
	Event    string `json:"event"`
	RunID    string `json:"run_id"`
	FlowSlug string `json:"flow_slug,omitempty"`
	// StepSlug is set for step events.
	StepSlug string `json:"step_slug,omitempty"`
	Status   string `json:"status"`
}

// EventType is the kind of a run or step transition.
type EventType string

// Event types, as the database publishes them.
const (
	EventRunStarted    EventType = "run:started"
	EventRunCompleted  EventType = "run:completed"
	EventRunFailed     EventType = "run:failed"
	EventRunCancelled  EventType = "run:cancelled"
	EventStepStarted   EventType = "step:started"
	EventStepCompleted EventType = "step:completed"
	EventStepFailed    EventType = "step:failed"
	EventStepSkipped   EventType = "step:skipped"
)

// IsRunEvent reports whether the event is about the run itself (not one of its steps).
func (e Event) IsRunEvent() bool { return strings.HasPrefix(string(e.Type), "run:") }

// IsTerminal reports whether the event says the run completed, failed or was cancelled. (A failed or cancelled
// run may be resumed later by Client.RetryRun, which emits run:started again; a Subscribe channel has ended by
// then: subscribe again.)
func (e Event) IsTerminal() bool {
	return e.Type == EventRunCompleted || e.Type == EventRunFailed || e.Type == EventRunCancelled
}

// ErrRunCancelled is matched (errors.Is) by every *RunCancelledError: by Run.Err and RunOutput of a cancelled run,
// and by the cause of the context of a handler whose run was cancelled while it ran (context.Cause(ctx)).
var ErrRunCancelled = taskrun.ErrRunCancelled

// RunCancelledError says that a run was cancelled. Run.Err returns one for a cancelled run (with FlowSlug, Reason
// and At); a handler whose run is cancelled while it runs finds one, with RunID only, as the cause of its
// context. It matches ErrRunCancelled and context.Canceled.
type RunCancelledError = taskrun.RunCancelledError
