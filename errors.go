package pgflow

import (
	"errors"
	"strconv"
	"strings"
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
