package pgflow

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/pgflow-go/pgflow/internal/taskrun"
)

// Kinds of flow definition errors. Every *DefinitionError wraps exactly one of them, so callers can test with
// errors.Is(err, pgflow.ErrDuplicateStep) on the value returned by Flow.Err, Flow.Shape or Flow.CompileSQL.
var (
	// ErrInvalidSlug: a flow or step slug is empty, too long, the reserved word "run", starts with a digit or
	// contains characters other than ASCII letters, digits and '_'.
	ErrInvalidSlug = errors.New("invalid slug")
	// ErrDuplicateStep: a step slug is used twice in the same flow.
	ErrDuplicateStep = errors.New("duplicate step")
	// ErrUnknownDependency: a dependency handle does not belong to this flow (a handle of another flow, a zero
	// StepHandle or a nil AnyStep), or a condition pattern names a step that is not a dependency.
	ErrUnknownDependency = errors.New("unknown dependency")
	// ErrMapDependencies: a map step would depend on more than one step (or a map over the flow input on any).
	ErrMapDependencies = errors.New("map step over more than one dependency")
	// ErrOptionOutOfRange: a numeric or duration option is outside the range the database accepts.
	ErrOptionOutOfRange = errors.New("option out of range")
	// ErrInvalidOption: an option is unknown, given twice, not allowed where it is used (a step option on a flow,
	// WhenUnmet without If/IfNot), or has an invalid value (a pattern that is not a JSON object, an unknown mode).
	ErrInvalidOption = errors.New("invalid option")
	// ErrInvalidHandler: a step was defined with a nil handler.
	ErrInvalidHandler = errors.New("invalid handler")
	// ErrFlowFrozen: a step was added after the flow was first used (Shape, CompileSQL or a worker start).
	ErrFlowFrozen = errors.New("flow is frozen")
)

// DefinitionError describes one mistake in a flow definition. It names the flow, the step (empty for flow-level
// mistakes) and, in Detail, the offending value.
type DefinitionError struct {
	Flow   string // flow slug as given to NewFlow
	Step   string // step slug as given, "" for a flow-level error
	Err    error  // the kind: one of the Err* variables of this package
	Detail string // what is wrong, naming the bad value
}

// Error renders e.g. `pgflow: flow "orders", step "fetch": option out of range: MaxAttempts(0): must be >= 1`.
func (e *DefinitionError) Error() string {
	var b strings.Builder
	b.WriteString("pgflow: flow ")
	b.WriteString(strconv.Quote(e.Flow))
	if e.Step != "" {
		b.WriteString(", step ")
		b.WriteString(strconv.Quote(e.Step))
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns the error kind.
func (e *DefinitionError) Unwrap() error { return e.Err }

// ErrPermanent is matched (errors.Is) by every error made with Permanent.
var ErrPermanent = errors.New("permanent failure")

// PermanentError marks a handler error that retrying cannot fix; create it with Permanent.
type PermanentError struct {
	Err error // the handler's error
}

// Permanent wraps err so that the worker fails the task at once, without retry, whatever attempts remain: the
// task is failed as if its attempts were exhausted and the step's WhenExhausted policy applies (the run fails,
// or the step is skipped). Permanent(nil) is nil. The message is err's own; errors.Is and errors.As see err
// through the wrapper, and errors.Is(e, ErrPermanent) reports whether e (or an error it wraps) is permanent.
//
// Use it for failures that are the input's fault, not the moment's: a malformed record, an unknown customer, a
// request the remote side rejected as invalid.
//
//	charge := pgflow.Step(f, "charge", func(ctx context.Context, t *pgflow.Task[Order]) (Receipt, error) {
//		o, err := t.FlowInput(ctx)
//		if err != nil {
//			return Receipt{}, err
//		}
//		r, err := payments.Charge(ctx, o.Card, o.Amount)
//		if errors.Is(err, payments.ErrCardDeclined) {
//			return Receipt{}, pgflow.Permanent(fmt.Errorf("order %d: %w", o.ID, err)) // retrying will not help
//		}
//		return r, err // other errors (timeouts, 503s) are retried per MaxAttempts and BaseDelay
//	})
//
// The worker itself treats as permanent a flow input or map element that cannot be decoded into the handler's
// type, and StepHandle.Output called for a step that is not a declared dependency.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return ErrPermanent.Error()
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Is reports whether target is ErrPermanent.
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }

// Permanent reports true: the worker fails the task without retry.
func (e *PermanentError) Permanent() bool { return true }

// ErrStepTimeout is matched (errors.Is) by the cause of a handler's context whose step timeout passed
// (context.Cause(ctx)) and by the error the worker records for such an attempt.
var ErrStepTimeout = taskrun.ErrStepTimeout

// ErrShapeMismatch is wrapped by the error Start returns when a flow stored in the database differs from the
// flow in code and the worker may not recompile it; errors.As the error to a *ShapeMismatchError for the list.
var ErrShapeMismatch = errors.New("flow definition differs from the one in the database")

// ShapeMismatchError reports that the flow stored in the database has a different shape (steps, dependencies,
// step types, conditions or modes) than the flow in the code, in a database where recompiling is not allowed.
// Nothing was changed in the database.
type ShapeMismatchError struct {
	Flow        string   // flow slug
	Differences []string // one entry per difference, as reported by pgflow.ensure_flow_compiled (code first, database second)
}

func (e *ShapeMismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pgflow: flow %q: the code's definition differs from the database's (%d difference", e.Flow, len(e.Differences))
	if len(e.Differences) != 1 {
		b.WriteString("s")
	}
	b.WriteString("; each names the code's side first, then the database's):")
	for _, d := range e.Differences {
		b.WriteString("\n  - ")
		b.WriteString(d)
	}
	b.WriteString("\napply a migration with the new definition (Flow.CompileSQL), give the changed flow a new slug, " +
		"or set WorkerConfig.AllowDataLoss to recompile it (this deletes the flow's runs and queue)")
	return b.String()
}

// Unwrap returns ErrShapeMismatch.
func (e *ShapeMismatchError) Unwrap() error { return ErrShapeMismatch }
