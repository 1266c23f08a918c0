package pgflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
)

// WhenMode says what happens to a step whose condition is not met (WhenUnmet) or whose task ran out of attempts
// (WhenExhausted).
type WhenMode string

const (
	// Fail fails the step and with it the run.
	Fail WhenMode = "fail"
	// Skip marks the step skipped and lets the run continue; dependents see the step's output as absent
	// (StepHandle.Output returns ErrDependencySkipped).
	Skip WhenMode = "skip"
	// SkipCascade skips the step and every step that depends on it, directly or transitively.
	SkipCascade WhenMode = "skip-cascade"
)

func (m WhenMode) valid() bool { return m == Fail || m == Skip || m == SkipCascade }

// FlowOption configures a flow (NewFlow): MaxAttempts, BaseDelay and Timeout, the defaults of its steps, and the
// flow-only QueuePerStep and DeleteTaskMessages.
type FlowOption interface{ flowOption() Option }

// StepOption configures a step (Step, Map, MapInput): every option. Step-only options (StartDelay, If, IfNot,
// WhenUnmet, WhenExhausted, DependsOn) are StepOnlyOption values, which NewFlow does not accept: using one on a
// flow does not compile.
type StepOption interface{ stepOption() Option }

// Option is an option of flows and steps alike (MaxAttempts, BaseDelay, Timeout). Options are validated when the
// flow or step is defined; a bad value is recorded as a *DefinitionError (see Flow.Err). The zero Option is
// invalid.
type Option struct {
	name  string // the constructor's name, e.g. "MaxAttempts"; used in error messages and duplicate detection
	apply func(v *optionValues) *optionProblem
}

func (o Option) flowOption() Option { return o }
func (o Option) stepOption() Option { return o }

// StepOnlyOption is an option of steps only (StartDelay, If, IfNot, WhenUnmet, WhenExhausted, DependsOn).
type StepOnlyOption struct{ o Option }

func (o StepOnlyOption) stepOption() Option { return o.o }

// FlowOnlyOption is an option of flows only (QueuePerStep, DeleteTaskMessages); a step does not accept it.
type FlowOnlyOption struct{ o Option }

func (o FlowOnlyOption) flowOption() Option { return o.o }

// optionProblem is what an Option reports when its value is unacceptable; the caller turns it into a
// *DefinitionError naming the flow and step.
type optionProblem struct {
	kind   error
	detail string
}

// optionValues collects the options of one flow or step. Nil / empty means "not set" (the database default or
// the flow's value applies).
type optionValues struct {
	maxAttempts    *int // attempts, >= 1
	baseDelay      *int // seconds, >= 1
	timeout        *int // seconds, >= 3
	startDelay     *int // seconds, >= 0 (steps only)
	ifPattern      json.RawMessage
	ifNotPattern   json.RawMessage
	whenUnmet      WhenMode
	whenExhausted  WhenMode
	deps           []AnyStep // DependsOn arguments in order (steps only)
	queuePerStep   bool      // QueuePerStep (flows only)
	deleteMessages bool      // DeleteTaskMessages (flows only)
}

// Upper bound of every integer option: the SQL columns are int4.
const maxSQLInt = math.MaxInt32

// MaxAttempts sets how many times a task is attempted before WhenExhausted applies (n >= 1). On a flow it is the
// default for its steps (database default 3); on a step it overrides the flow's value.
func MaxAttempts(n int) Option {
	return Option{name: "MaxAttempts", apply: func(v *optionValues) *optionProblem {
		if n < 1 || n > maxSQLInt {
			return &optionProblem{ErrOptionOutOfRange, fmt.Sprintf("MaxAttempts(%d): must be between 1 and %d", n, maxSQLInt)}
		}
		v.maxAttempts = &n
		return nil
	}}
}

// BaseDelay sets the base of the exponential retry delay, a whole number of seconds >= 1 s. The database waits
// floor(baseDelay * 2^attempts) seconds before retrying a failed task, so the first retry waits 2 × BaseDelay.
// Database default on a flow: 5 s.
func BaseDelay(d time.Duration) Option {
	return Option{name: "BaseDelay", apply: func(v *optionValues) *optionProblem {
		s, p := wholeSeconds("BaseDelay", d, 1)
		if p != nil {
			return p
		}
		v.baseDelay = &s
		return nil
	}}
}

// Timeout sets the task timeout, a whole number of seconds >= 3 s. The handler's context carries it as its
// deadline, measured from the claim; when it passes, the attempt fails with an error naming the step and the
// timeout (e.g. `step "charge" timed out after 5s (attempt 2 of 3)`) and the step's retry policy applies, even if
// the handler ignores its context (what it returns later is dropped). While a task runs its message stays
// invisible for Timeout + 2 s, and a task started longer than the timeout + 30 s ago is considered stalled and
// requeued. Database default on a flow: 60 s.
func Timeout(d time.Duration) Option {
	return Option{name: "Timeout", apply: func(v *optionValues) *optionProblem {
		s, p := wholeSeconds("Timeout", d, 3)
		if p != nil {
			return p
		}
		v.timeout = &s
		return nil
	}}
}

// QueuePerStep gives every step of the flow a private queue, named <flow>__<step> in lower case (or
// <flow>__<step index> when that would exceed PGMQ's 47 characters), instead of one queue for the whole flow.
// A busy step then cannot delay the tasks of the others, and a worker can serve chosen steps with their own
// concurrency (WorkerFlow.Steps), on any machine. The queue mode is stored with the flow and compared when a
// worker starts, like the flow's shape: switching an existing flow's mode is a definition change (see
// ShapeMismatchError). The names must stay unambiguous, so the flow slug has at most 40 characters, and neither
// it nor any step slug starts or ends with '_' or contains "__"; step slugs must differ in more than letter case.
// Flow option only. See docs/queues.md.
func QueuePerStep() FlowOnlyOption {
	return FlowOnlyOption{Option{name: "QueuePerStep", apply: func(v *optionValues) *optionProblem {
		v.queuePerStep = true
		return nil
	}}}
}

// DeleteTaskMessages makes workers delete a task's queue message when they claim the task, instead of keeping
// it in the queue while the task runs and archiving it (into PGMQ's a_<queue> table) when the task finishes. A
// task of the flow then costs the database two row writes fewer (five instead of seven for a one-step run) and
// about 600 bytes of WAL less. What is lost is only the archive's copy of the message: the task row
// (pgflow.step_tasks) keeps the task's status, attempts, output and errors either way, and a task whose worker
// dies, fails with attempts left, or is released at shutdown gets a new message, so no task is lost. Messages of
// tasks that never ran (a cancelled or failed run's queued tasks) are still archived.
//
// The choice is stored with the flow (pgflow.flows.message_retention) and applied whenever a worker or client
// compiles the flow, also for an existing flow: it is not a definition change, and it can be switched at any
// time, also while tasks run. Flow option only. See docs/queues.md.
func DeleteTaskMessages() FlowOnlyOption {
	return FlowOnlyOption{Option{name: "DeleteTaskMessages", apply: func(v *optionValues) *optionProblem {
		v.deleteMessages = true
		return nil
	}}}
}

// StartDelay delays the first delivery of a step's tasks once the step becomes ready (whole seconds >= 0).
// Retries are not delayed by it. Step option only.
func StartDelay(d time.Duration) StepOnlyOption {
	return StepOnlyOption{Option{name: "StartDelay", apply: func(v *optionValues) *optionProblem {
		s, p := wholeSeconds("StartDelay", d, 0)
		if p != nil {
			return p
		}
		v.startDelay = &s
		return nil
	}}}
}

// If makes the step run only when its condition input contains pattern (PostgreSQL jsonb containment, @>).
// The condition input is the flow input for a root step and the object {"<dep slug>": <dep output>, ...} of
// the completed dependencies for a dependent step. pattern must marshal to a JSON object, e.g.
// map[string]any{"fetch": map[string]any{"ok": true}}. Step option only.
func If(pattern any) StepOnlyOption {
	return StepOnlyOption{Option{name: "If", apply: func(v *optionValues) *optionProblem {
		raw, p := patternJSON("If", pattern)
		if p != nil {
			return p
		}
		v.ifPattern = raw
		return nil
	}}}
}

// IfNot makes the step run only when its condition input does NOT contain pattern (see If). If and IfNot
// together must both pass. IfNot(map[string]any{"dep": map[string]any{}}) runs the step only when "dep" was
// skipped. Step option only.
func IfNot(pattern any) StepOnlyOption {
	return StepOnlyOption{Option{name: "IfNot", apply: func(v *optionValues) *optionProblem {
		raw, p := patternJSON("IfNot", pattern)
		if p != nil {
			return p
		}
		v.ifNotPattern = raw
		return nil
	}}}
}

// WhenUnmet says what happens when the step's If/IfNot condition is not met (database default Skip). It is
// only allowed together with If or IfNot. Step option only.
func WhenUnmet(mode WhenMode) StepOnlyOption {
	return StepOnlyOption{Option{name: "WhenUnmet", apply: func(v *optionValues) *optionProblem {
		if !mode.valid() {
			return &optionProblem{ErrInvalidOption, fmt.Sprintf("WhenUnmet(%q): mode must be %q, %q or %q", string(mode), Fail, Skip, SkipCascade)}
		}
		v.whenUnmet = mode
		return nil
	}}}
}

// WhenExhausted says what happens when a task of the step fails on its last attempt (database default Fail).
// Step option only.
func WhenExhausted(mode WhenMode) StepOnlyOption {
	return StepOnlyOption{Option{name: "WhenExhausted", apply: func(v *optionValues) *optionProblem {
		if !mode.valid() {
			return &optionProblem{ErrInvalidOption, fmt.Sprintf("WhenExhausted(%q): mode must be %q, %q or %q", string(mode), Fail, Skip, SkipCascade)}
		}
		v.whenExhausted = mode
		return nil
	}}}
}

// DependsOn makes the step depend on the given steps of the same flow: it becomes ready when all of them have
// completed (or were skipped), and its handler reads their outputs with StepHandle.Output. May be given more
// than once; the dependencies accumulate in order. A Map step already depends on the step it maps over and
// accepts no other dependency; a MapInput step accepts none. Step option only.
func DependsOn(steps ...AnyStep) StepOnlyOption {
	return StepOnlyOption{Option{name: "DependsOn", apply: func(v *optionValues) *optionProblem {
		if len(steps) == 0 {
			return &optionProblem{ErrInvalidOption, "DependsOn(): needs at least one step"}
		}
		v.deps = append(v.deps, steps...)
		return nil
	}}}
}

// applyOptions applies opts in order and returns every problem found: zero Options, step options used on a flow,
// options given twice (DependsOn excepted) and the options' own validation failures.
func applyOptions(opts []Option, forFlow bool) (optionValues, []*optionProblem) {
	var v optionValues
	var problems []*optionProblem
	seen := make(map[string]bool, len(opts))
	for i, o := range opts {
		if o.apply == nil {
			problems = append(problems, &optionProblem{ErrInvalidOption, fmt.Sprintf("unknown option at position %d (zero Option value)", i+1)})
			continue
		}
		if o.name != "DependsOn" && seen[o.name] {
			problems = append(problems, &optionProblem{ErrInvalidOption, fmt.Sprintf("%s given more than once", o.name)})
			continue
		}
		seen[o.name] = true
		if p := o.apply(&v); p != nil {
			problems = append(problems, p)
		}
	}
	if !forFlow && v.whenUnmet != "" && v.ifPattern == nil && v.ifNotPattern == nil {
		problems = append(problems, &optionProblem{ErrInvalidOption, fmt.Sprintf("WhenUnmet(%q) requires If or IfNot", string(v.whenUnmet))})
	}
	return v, problems
}

// wholeSeconds converts d to seconds, requiring a whole number of seconds in [min, maxSQLInt].
func wholeSeconds(name string, d time.Duration, min int) (int, *optionProblem) {
	if d%time.Second != 0 {
		return 0, &optionProblem{ErrOptionOutOfRange, fmt.Sprintf("%s(%s): must be a whole number of seconds", name, d)}
	}
	s := int64(d / time.Second)
	if s < int64(min) || s > maxSQLInt {
		return 0, &optionProblem{ErrOptionOutOfRange, fmt.Sprintf("%s(%s): must be between %ds and %ds", name, d, min, maxSQLInt)}
	}
	return int(s), nil
}

// patternJSON marshals a condition pattern and returns its canonical JSON (object keys sorted, no insignificant
// whitespace, numbers as written). The pattern must be a JSON object and must not contain the character U+0000,
// which PostgreSQL's jsonb cannot store.
func patternJSON(name string, pattern any) (json.RawMessage, *optionProblem) {
	if pattern == nil {
		return nil, &optionProblem{ErrInvalidOption, name + "(nil): pattern must be a JSON object"}
	}
	raw, err := json.Marshal(pattern)
	if err != nil {
		return nil, &optionProblem{ErrInvalidOption, fmt.Sprintf("%s(%T): pattern does not marshal to JSON: %v", name, pattern, err)}
	}
	canon, val, err := canonicalJSON(raw)
	if err != nil {
		return nil, &optionProblem{ErrInvalidOption, fmt.Sprintf("%s(%s): %v", name, raw, err)}
	}
	if _, ok := val.(map[string]any); !ok {
		return nil, &optionProblem{ErrInvalidOption, fmt.Sprintf("%s(%s): pattern must be a JSON object", name, canon)}
	}
	if containsNUL(val) {
		return nil, &optionProblem{ErrInvalidOption, fmt.Sprintf("%s(%s): pattern contains \\u0000, which PostgreSQL jsonb cannot store", name, canon)}
	}
	return canon, nil
}

// canonicalJSON decodes raw (keeping numbers as written) and re-encodes it with sorted object keys, no
// insignificant whitespace and no HTML escaping. It returns the canonical bytes and the decoded value.
func canonicalJSON(raw []byte) (json.RawMessage, any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var val any
	if err := dec.Decode(&val); err != nil {
		return nil, nil, err
	}
	if dec.More() {
		return nil, nil, fmt.Errorf("trailing data after JSON value")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(val); err != nil {
		return nil, nil, err
	}
	return json.RawMessage(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), val, nil
}

func containsNUL(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.ContainsRune(x, 0)
	case []any:
		for _, e := range x {
			if containsNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if strings.ContainsRune(k, 0) || containsNUL(e) {
				return true
			}
		}
	}
	return false
}
