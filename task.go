package pgflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"

	"github.com/pgflow-go/pgflow/internal/taskrun"
)

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

// PanicValue returns the value passed to panic.
func (e *PanicError) PanicValue() any { return e.Value }

// PanicStack returns the stack of the panicking goroutine.
func (e *PanicError) PanicStack() []byte { return e.Stack }

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
	return TaskMeta(t.st.env.Meta)
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
			t.st.step.flowSlug(), t.st.env.Meta.RunID, t.st.step.slug, zero, err))
	}
	return in, nil
}

// taskState is the per-task state behind a Task: the env, the running step and lazily decoded inputs.
type taskState struct {
	env  *taskrun.Env
	step *stepDef

	mu         sync.Mutex
	flowInput  json.RawMessage
	depsParsed bool
	deps       map[string]json.RawMessage
	depsErr    error
}

func newTask[I any](env *taskrun.Env, d *stepDef) *Task[I] {
	logger := env.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Task[I]{TaskMeta: TaskMeta(env.Meta), Logger: logger, st: &taskState{env: env, step: d, flowInput: env.FlowInput}}
}

func (s *taskState) flowInputRaw(ctx context.Context) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flowInput != nil {
		return s.flowInput, nil
	}
	if s.env.LoadFlowInput == nil {
		return nil, fmt.Errorf("pgflow: step %q: the flow input of run %s is not available", s.step.slug, s.env.Meta.RunID)
	}
	raw, err := s.env.LoadFlowInput(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgflow: step %q: loading the flow input of run %s: %w", s.step.slug, s.env.Meta.RunID, err)
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
		if len(s.env.Input) > 0 && string(s.env.Input) != "null" {
			if err := json.Unmarshal(s.env.Input, &s.deps); err != nil {
				s.depsErr = Permanent(fmt.Errorf("pgflow: flow %q, run %s, step %q: the task input is not an object of dependency outputs: %w",
					s.step.flowSlug(), s.env.Meta.RunID, s.step.slug, err))
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
func recoverHandlerPanic(d *stepDef, env *taskrun.Env, out *json.RawMessage, err *error) {
	if r := recover(); r != nil {
		*out = nil
		*err = &PanicError{Step: d.slug, TaskIndex: env.Meta.TaskIndex, Value: r, Stack: debug.Stack()}
	}
}
