package pgflow

// Worker contract (internal to this package; worker.go relies on it).
//
// Definition side:
//
//   - steps, err := flow.core().freeze() — call once at worker start, before anything else. It freezes the flow
//     (no step can be added afterwards) and returns its steps in definition order (index i has step_index i), or
//     the joined *DefinitionError values when the definition is invalid; the worker must then refuse to start
//     and report err. Shape() also freezes and returns the exact JSON to pass to pgflow.ensure_flow_compiled.
//   - flow.core().step(slug) returns the *stepDef for a step slug, or nil (an unknown slug: fail the task).
//   - A *stepDef is immutable after freeze and safe for concurrent use. Fields a worker may read: slug,
//     stepType ("single" | "map"), deps (depSlugs() for slugs), index, opts.maxAttempts / opts.baseDelay /
//     opts.timeout / opts.startDelay (*int, seconds; nil = inherit the flow's or the database default), run.
//     The flow's own options are flow.core().opts (only maxAttempts, baseDelay, timeout are set).
//
// Execution side, for every row claimed with pgflow.start_tasks:
//
//	env := &taskEnv{
//		meta:          TaskMeta{RunID: ..., FlowSlug: ..., StepSlug: ..., TaskIndex: ..., Attempt: ..., MessageID: ..., WorkerID: ..., QueueName: ...},
//		input:         row.input,      // jsonb "input" column as is: {} for root steps, the deps object, or the map element
//		flowInput:     row.flow_input, // nil when SQL NULL (only root single steps get it); then loadFlowInput is used
//		loadFlowInput: func(ctx context.Context) (json.RawMessage, error) { /* select input from pgflow.runs where run_id = $1 */ },
//		logger:        taskLogger, // nil means discard
//	}
//	out, err := def.run(ctx, env)
//
//   - ctx is handed to the handler unchanged: cancel it when the worker shuts down.
//   - err == nil: call pgflow.complete_task with output out. out is the json.Marshal of the handler result and is
//     never nil (a nil result is the JSON null; 0, false and "" are kept as such).
//   - err != nil: call pgflow.fail_task with error_message err.Error(). run recovers handler panics and returns
//     them as *PanicError (Stack holds the goroutine stack for the log); it never panics itself. Errors also
//     come from decoding the map element or encoding the result; they name the step.
//   - run may be called concurrently for different envs; an env belongs to one call.
//   - loadFlowInput is called at most once per successful load per task (results are cached in the Task; a
//     failed load is retried on the next FlowInput call); the worker may share a per-run cache behind it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
)

// taskEnv is what the worker hands to a step's runner for one claimed task (see the contract above).
type taskEnv struct {
	meta          TaskMeta
	input         json.RawMessage // start_tasks input: {} (root step), the deps object (dependent step) or the map element
	flowInput     json.RawMessage // the run input when start_tasks provides it (root single steps), else nil
	loadFlowInput func(ctx context.Context) (json.RawMessage, error)
	logger        *slog.Logger
}

// ErrDependencySkipped is wrapped by StepHandle.Output when the dependency was skipped (its condition was not
// met, or its tasks exhausted their attempts with WhenExhausted(Skip)), so it has no output. The error message
// names the dependency.
var ErrDependencySkipped = errors.New("dependency skipped")

// ErrNotDependency is wrapped by StepHandle.Output when the task's step does not depend on the step whose output
// is requested (map tasks receive one element and read no dependency output).
var ErrNotDependency = errors.New("not a dependency of this step")

// PanicError is returned for a task whose handler panicked; the task is failed with its message.
type PanicError struct {
	Step      string // step slug
	TaskIndex int
	Value     any    // the value passed to panic
	Stack     []byte // stack of the panicking goroutine, for logs
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("panic in handler of step %q (task %d): %v", e.Step, e.TaskIndex, e.Value)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// TaskMeta identifies one attempt of one task.
type TaskMeta struct {
	RunID     string // run id, canonical UUID text
	FlowSlug  string
	StepSlug  string
	TaskIndex int    // 0 for single steps; the element index for map steps
	Attempt   int    // 1 for the first attempt
	MessageID int64  // PGMQ message id of the task
	WorkerID  string // id of the worker running the task, canonical UUID text
	QueueName string // PGMQ queue the message was read from
}

// Task is what a handler of a flow with input type I receives besides its context: the task's identity
// (embedded TaskMeta), a logger, the flow input (FlowInput) and, through StepHandle.Output, its dependencies'
// outputs. It carries no database access and no configuration.
type Task[I any] struct {
	TaskMeta
	Logger *slog.Logger // never nil; carries the worker's task attributes
	st     *taskState
}

// TaskInfo is implemented by every *Task[I]; StepHandle.Output accepts it.
type TaskInfo interface {
	// Meta returns the task's identity.
	Meta() TaskMeta
	state() *taskState
}

// Meta returns the task's identity.
func (t *Task[I]) Meta() TaskMeta {
	if t.st == nil {
		return t.TaskMeta
	}
	return t.st.env.meta
}

func (t *Task[I]) state() *taskState { return t.st }

// FlowInput returns the run's input decoded into I. Root single steps have it at hand; other steps load it from
// the database on first use (once per task). Errors name the flow, run and step; an input that cannot be decoded
// into I is a Permanent error (returned as is, or wrapped with %w, it fails the task without retry).
func (t *Task[I]) FlowInput(ctx context.Context) (I, error) {
	var zero I
	if t.st == nil {
		return zero, errors.New("pgflow: FlowInput called on a Task that was not created by a worker")
	}
	raw, err := t.st.flowInputRaw(ctx)
	if err != nil {
		return zero, err
	}
	var in I
	if err := json.Unmarshal(raw, &in); err != nil {
		// The run input never changes: retrying cannot help.
		return zero, Permanent(fmt.Errorf("pgflow: flow %q, run %s, step %q: cannot decode the flow input into %T: %w",
			t.st.step.flowSlug(), t.st.env.meta.RunID, t.st.step.slug, zero, err))
	}
	return in, nil
}

// taskState is the per-task state behind a Task: the env, the running step and lazily decoded inputs.
type taskState struct {
	env  *taskEnv
	step *stepDef

	mu         sync.Mutex
	flowInput  json.RawMessage
	depsParsed bool
	deps       map[string]json.RawMessage
	depsErr    error
}

func newTask[I any](env *taskEnv, d *stepDef) *Task[I] {
	logger := env.logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Task[I]{TaskMeta: env.meta, Logger: logger, st: &taskState{env: env, step: d, flowInput: env.flowInput}}
}

func (s *taskState) flowInputRaw(ctx context.Context) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flowInput != nil {
		return s.flowInput, nil
	}
	if s.env.loadFlowInput == nil {
		return nil, fmt.Errorf("pgflow: step %q: the flow input of run %s is not available", s.step.slug, s.env.meta.RunID)
	}
	raw, err := s.env.loadFlowInput(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgflow: step %q: loading the flow input of run %s: %w", s.step.slug, s.env.meta.RunID, err)
	}
	if raw == nil {
		raw = json.RawMessage("null")
	}
	s.flowInput = raw
	return raw, nil
}

// depOutput returns the raw output of dependency slug from the deps object, and whether it is present.
func (s *taskState) depOutput(slug string) (json.RawMessage, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.depsParsed {
		s.depsParsed = true
		if len(s.env.input) > 0 && string(s.env.input) != "null" {
			if err := json.Unmarshal(s.env.input, &s.deps); err != nil {
				s.depsErr = Permanent(fmt.Errorf("pgflow: flow %q, run %s, step %q: the task input is not an object of dependency outputs: %w",
					s.step.flowSlug(), s.env.meta.RunID, s.step.slug, err))
			}
		}
	}
	if s.depsErr != nil {
		return nil, false, s.depsErr
	}
	raw, ok := s.deps[slug]
	return raw, ok, nil
}

// recoverHandlerPanic is deferred by every runner: it turns a handler panic into a *PanicError result.
func recoverHandlerPanic(d *stepDef, env *taskEnv, out *json.RawMessage, err *error) {
	if r := recover(); r != nil {
		*out = nil
		*err = &PanicError{Step: d.slug, TaskIndex: env.meta.TaskIndex, Value: r, Stack: debug.Stack()}
	}
}
