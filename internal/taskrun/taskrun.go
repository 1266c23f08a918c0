// Package taskrun is the contract between the flow DSL (package pgflow, which knows handlers and their Go types)
// and the engine (which knows queues, claims and SQL): a claimed task's identity, what a step's runner needs to
// run it, and how the runner says what kind of failure it returned. It imports nothing of the project, so every
// engine part can depend on it.
package taskrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Meta identifies one attempt of one task. Package pgflow exposes it as TaskMeta (same fields).
type Meta struct {
	RunID     string // run id, canonical UUID text
	FlowSlug  string
	StepSlug  string
	TaskIndex int    // 0 for single steps; the element index for map steps
	Attempt   int    // 1 for the first attempt
	MessageID int64  // PGMQ message id of the task
	WorkerID  string // id of the worker row serving the task's queue, canonical UUID text
	QueueName string // PGMQ queue the message was read from
}

// Env is what the engine hands a step's runner for one claimed task.
type Env struct {
	Meta Meta
	// Input is start_tasks' input: {} for a root step, the object of dependency outputs, or the map element.
	Input json.RawMessage
	// FlowInput is the run input when the claim provided it (root single steps); nil otherwise.
	FlowInput json.RawMessage
	// LoadFlowInput reads the run input; the engine caches it per run. Never nil.
	LoadFlowInput func(ctx context.Context) (json.RawMessage, error)
	// Logger carries the task's attributes. Never nil.
	Logger *slog.Logger
}

// RunFunc runs a step's handler for one task and returns its JSON output (never nil on success: a nil result is
// the JSON null). It recovers handler panics (returning an error that implements Panicked) and never panics.
type RunFunc func(ctx context.Context, env *Env) (json.RawMessage, error)

// Step is what the engine needs of one step of a flow.
type Step struct {
	Slug string
	Map  bool // a map step: one task per element
	Run  RunFunc
}

// Flow is what the engine needs of one flow: its slug, the shape pgflow.ensure_flow_compiled checks, and its
// steps by slug.
type Flow struct {
	Slug      string
	Shape     json.RawMessage
	QueueMode string // "flow" (one queue) or "step" (one queue per step): pgflow.flows.queue_mode
	// MessageRetention is "archive" or "delete": pgflow.flows.message_retention ("" leaves the stored value).
	MessageRetention string
	StepOrder        []string // step slugs in definition order (= step_index)
	Steps            map[string]*Step
}

// Permanent reports whether err, or an error it wraps, asks not to be retried: it has a method Permanent() bool
// that returns true (pgflow.Permanent's error does).
func Permanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

// Panicked is implemented by the error a runner returns for a handler that panicked.
type Panicked interface {
	error
	PanicValue() any
	PanicStack() []byte
}

// AsPanic returns the panic error in err's chain, if any.
func AsPanic(err error) (Panicked, bool) {
	var p Panicked
	ok := errors.As(err, &p)
	return p, ok
}

// ErrStepTimeout is matched (errors.Is) by a TimeoutError. Package pgflow exports it as pgflow.ErrStepTimeout.
var ErrStepTimeout = errors.New("step timed out")

// TimeoutError is the cause of a handler's context whose deadline, the step's timeout measured from the claim,
// passed, and the error recorded for that attempt.
type TimeoutError struct {
	Step        string
	TaskIndex   int
	MapStep     bool
	Timeout     time.Duration
	Attempt     int
	MaxAttempts int
}

func (e *TimeoutError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %q", e.Step)
	if e.MapStep {
		fmt.Fprintf(&b, " task %d", e.TaskIndex)
	}
	fmt.Fprintf(&b, " timed out after %s (attempt %d of %d)", e.Timeout, e.Attempt, e.MaxAttempts)
	return b.String()
}

// Is reports whether target is ErrStepTimeout or context.DeadlineExceeded.
func (e *TimeoutError) Is(target error) bool {
	return target == ErrStepTimeout || target == context.DeadlineExceeded
}

// ErrRunCancelled is matched (errors.Is) by a RunCancelledError. Package pgflow exports it as
// pgflow.ErrRunCancelled.
var ErrRunCancelled = errors.New("run cancelled")

// RunCancelledError says that a run was cancelled (pgflow.cancel_run). It is the cause of the context of a
// handler whose run was cancelled while it ran (context.Cause), and what pgflow's Run.Err returns for a cancelled
// run. It matches ErrRunCancelled and context.Canceled.
type RunCancelledError struct {
	RunID    string
	FlowSlug string     // set when known
	Reason   string     // the reason given to cancel_run, when known ("" for a handler's context: the worker learns only the id)
	At       *time.Time // when the run was cancelled, when known
}

func (e *RunCancelledError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "run %s", e.RunID)
	if e.FlowSlug != "" {
		fmt.Fprintf(&b, " of flow %q", e.FlowSlug)
	}
	b.WriteString(" was cancelled")
	if e.Reason != "" {
		fmt.Fprintf(&b, ": %s", e.Reason)
	}
	return b.String()
}

// Is reports whether target is ErrRunCancelled or context.Canceled.
func (e *RunCancelledError) Is(target error) bool {
	return target == ErrRunCancelled || target == context.Canceled
}
