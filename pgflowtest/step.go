package pgflowtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/taskrun"
)

// Defaults of the database (pgflow.flows), used when neither the step nor the flow sets the option.
const (
	defaultTimeout     = 60 * time.Second
	defaultMaxAttempts = 3
)

// DefaultRunID is the run id a handler run by RunStep, RunStepJSON or RunMapTask sees in its TaskMeta unless
// RunStepOpts.RunID sets one; its TaskMeta.WorkerID is this nil UUID too, its MessageID 0 and its QueueName the
// flow's queue (the lower-case flow slug).
const DefaultRunID = "00000000-0000-0000-0000-000000000000"

// RunStepOpts is what a handler run by RunStep, RunStepJSON or RunMapTask receives besides its context: the run
// input, its dependencies' outputs and its task's identity. A nil *RunStepOpts means the zero value.
type RunStepOpts struct {
	// FlowInput is the run input the handler reads with Task.FlowInput, encoded with encoding/json (a
	// json.RawMessage is used as it is). When it is nil, Task.FlowInput returns an error saying so; pass
	// json.RawMessage("null") for a run whose input is JSON null. RunStep of a map step over the flow input
	// (MapInput) runs one task per element of this array.
	FlowInput any
	// Deps are the outputs of the step's dependencies by dependency slug, each encoded with encoding/json (a
	// json.RawMessage is used as it is): what StepHandle.Output returns in the handler. A dependency that is left
	// out is seen as skipped (Output returns an error wrapping pgflow.ErrDependencySkipped), as in a run where it
	// was skipped. Every key must be a dependency of the step. RunStep of a map step over another step runs one
	// task per element of the array Deps holds for that step; RunMapTask takes no Deps (a map task receives its
	// element and no dependency output).
	Deps map[string]any
	// TaskIndex is the index of the map task RunMapTask runs (its element's position), as TaskMeta.TaskIndex and
	// PanicError.TaskIndex report it. RunStep numbers map tasks itself and refuses a TaskIndex.
	TaskIndex int
	// Attempt is the attempt the task sees in TaskMeta.Attempt; 0 means 1, the first attempt.
	Attempt int
	// RunID is the run id the task sees in TaskMeta.RunID; "" means DefaultRunID.
	RunID string
	// Logger is the base of the handler's Task.Logger, which adds the task's attributes as a worker does;
	// nil discards the records.
	Logger *slog.Logger
}

// flowShape is what the kit reads of a flow's shape (pgflow.Flow.Shape).
type flowShape struct {
	Steps   []stepShape  `json:"steps"`
	Options shapeOptions `json:"options"`
}

type stepShape struct {
	Slug         string       `json:"slug"`
	StepType     string       `json:"stepType"`
	Dependencies []string     `json:"dependencies"`
	Options      shapeOptions `json:"options"`
}

type shapeOptions struct {
	MaxAttempts *int `json:"maxAttempts"`
	Timeout     *int `json:"timeout"` // seconds
}

// target is one step of a flow, ready to run.
type target struct {
	flow        string
	step        *taskrun.Step
	deps        []string // dependency slugs as the shape lists them
	timeout     time.Duration
	maxAttempts int
}

func (tg *target) subject() string { return fmt.Sprintf("flow %q, step %q", tg.flow, tg.step.Slug) }

// resolve finds step slug in flow. fn names the kit's function for error messages.
func resolve(fn string, flow pgflow.AnyFlow, slug string) (*target, error) {
	if isNil(flow) {
		return nil, fmt.Errorf("pgflowtest: %s: the flow is nil", fn)
	}
	ef, err := flow.EngineFlow()
	if err != nil {
		return nil, fmt.Errorf("pgflowtest: %s: %w", fn, err)
	}
	if slug == "" {
		return nil, fmt.Errorf("pgflowtest: %s: flow %q: the step handle is zero (not returned by Step, Map or MapInput)", fn, ef.Slug)
	}
	var shape flowShape
	if err := json.Unmarshal(ef.Shape, &shape); err != nil {
		return nil, fmt.Errorf("pgflowtest: %s: flow %q: read its shape: %w", fn, ef.Slug, err)
	}
	step := ef.Steps[slug]
	i := slices.IndexFunc(shape.Steps, func(s stepShape) bool { return s.Slug == slug })
	if step == nil || i < 0 {
		names := make([]string, len(shape.Steps))
		for j, s := range shape.Steps {
			names[j] = s.Slug
		}
		return nil, fmt.Errorf("pgflowtest: %s: flow %q has no step %q (its steps: %s)", fn, ef.Slug, slug, strings.Join(names, ", "))
	}
	ss := shape.Steps[i]
	tg := &target{flow: ef.Slug, step: step, deps: ss.Dependencies, timeout: defaultTimeout, maxAttempts: defaultMaxAttempts}
	for _, o := range []shapeOptions{shape.Options, ss.Options} { // the step's options override the flow's
		if o.Timeout != nil {
			tg.timeout = time.Duration(*o.Timeout) * time.Second
		}
		if o.MaxAttempts != nil {
			tg.maxAttempts = *o.MaxAttempts
		}
	}
	return tg, nil
}

// encodeJSON encodes v with encoding/json; a json.RawMessage must be valid JSON and is used as it is.
func encodeJSON(v any) (json.RawMessage, error) {
	if raw, ok := v.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return nil, fmt.Errorf("not valid JSON: %.100q", raw)
		}
		return raw, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return b, nil
}

// taskEnv is what runTask needs of one task besides its step.
type taskEnv struct {
	input     json.RawMessage // start_tasks' input: {} / the object of dependency outputs / the map element
	flowInput json.RawMessage // nil: not given
	index     int
}

// runTask runs one task of tg through the step's real runner, with the step's timeout as the deadline of the
// handler's context (its cause a *taskrun.TimeoutError, as a worker sets it). A handler that returns after the
// deadline has timed out, whatever it returned, as in a worker. The handler runs on the calling goroutine.
func runTask(ctx context.Context, tg *target, opts *RunStepOpts, te taskEnv) (json.RawMessage, error) {
	attempt := max(opts.Attempt, 1)
	runID := opts.RunID
	if runID == "" {
		runID = DefaultRunID
	}
	meta := taskrun.Meta{RunID: runID, FlowSlug: tg.flow, StepSlug: tg.step.Slug, TaskIndex: te.index, Attempt: attempt,
		WorkerID: DefaultRunID, QueueName: strings.ToLower(tg.flow)}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("flow", tg.flow, "run_id", runID, "step", tg.step.Slug, "task_index", te.index, "attempt", attempt)
	env := &taskrun.Env{
		Meta:  meta,
		Input: te.input,
		LoadFlowInput: func(context.Context) (json.RawMessage, error) {
			if te.flowInput == nil {
				return nil, fmt.Errorf("pgflowtest: %s: the handler read the flow input, but RunStepOpts.FlowInput is nil", tg.subject())
			}
			return te.flowInput, nil
		},
		Logger: log,
	}
	if !tg.step.Map && len(tg.deps) == 0 {
		env.FlowInput = te.flowInput // root single steps get the input with their claim, as from start_tasks
	}
	timedOut := &taskrun.TimeoutError{Step: tg.step.Slug, TaskIndex: te.index, MapStep: tg.step.Map, Timeout: tg.timeout,
		Attempt: attempt, MaxAttempts: tg.maxAttempts}
	hctx, cancel := context.WithTimeoutCause(ctx, tg.timeout, timedOut)
	defer cancel()
	out, err := tg.step.Run(hctx, env)
	if errors.Is(context.Cause(hctx), timedOut) { // this deadline, not the parent context's end
		return nil, timedOut
	}
	return out, err
}

func (o *RunStepOpts) orZero() *RunStepOpts {
	if o == nil {
		return &RunStepOpts{}
	}
	return o
}

// encodeInputs encodes opts.FlowInput (nil when not given) and checks opts.Deps against tg's dependencies.
func encodeInputs(fn string, tg *target, opts *RunStepOpts) (flowInput json.RawMessage, deps map[string]json.RawMessage, err error) {
	if opts.Attempt < 0 {
		return nil, nil, fmt.Errorf("pgflowtest: %s: %s: RunStepOpts.Attempt is %d, want >= 1 (or 0 for 1)", fn, tg.subject(), opts.Attempt)
	}
	if opts.FlowInput != nil {
		if flowInput, err = encodeJSON(opts.FlowInput); err != nil {
			return nil, nil, fmt.Errorf("pgflowtest: %s: %s: RunStepOpts.FlowInput: %w", fn, tg.subject(), err)
		}
	}
	deps = make(map[string]json.RawMessage, len(opts.Deps))
	for _, slug := range slices.Sorted(maps.Keys(opts.Deps)) {
		if !slices.Contains(tg.deps, slug) {
			return nil, nil, fmt.Errorf("pgflowtest: %s: %s: RunStepOpts.Deps has %q, which is not a dependency of the step (its dependencies: %s)",
				fn, tg.subject(), slug, listOrNone(tg.deps))
		}
		if deps[slug], err = encodeJSON(opts.Deps[slug]); err != nil {
			return nil, nil, fmt.Errorf("pgflowtest: %s: %s: RunStepOpts.Deps[%q]: %w", fn, tg.subject(), slug, err)
		}
	}
	return flowInput, deps, nil
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// RunStep runs the real handler of step, a step of flow, without a database, and returns the step's output as
// a run would store it: the handler's result encoded to JSON and decoded into O, so what does not survive the
// round trip (unexported fields, say) is not there either.
//
// The handler runs through the same runner a worker uses: opts.FlowInput and opts.Deps are encoded to JSON and
// decoded by Task.FlowInput and StepHandle.Output into the handler's types (an undecodable value is a Permanent
// error, as in a worker), a panic is recovered and returned as a *pgflow.PanicError, and the handler's context
// carries the step's timeout as its deadline (a handler that returns after it gets the error a worker records,
// matching pgflow.ErrStepTimeout). The handler runs on the calling goroutine.
//
// A single step runs one task. A map step runs one task per element of the array it maps over — opts.Deps of
// its dependency, or opts.FlowInput for a MapInput step — in element order, stopping at the first failure, and
// its output is the array of their outputs (an empty array runs no task, as in the database); RunMapTask runs
// one task.
//
// The handler's error is returned as it is, unwrapped: its message is what a worker would record, and errors.Is
// (pgflow.ErrPermanent, ErrDependencySkipped...) and errors.As work on it. Errors of the kit itself — a step that
// is not in the flow, a Deps key that is not a dependency, an input that cannot be encoded — start with
// "pgflowtest:" and name the flow and the step.
func RunStep[O any](ctx context.Context, flow pgflow.AnyFlow, step pgflow.StepHandle[O], opts *RunStepOpts) (O, error) {
	var zero O
	raw, err := runStep(ctx, "RunStep", flow, step.Slug(), opts)
	if err != nil {
		return zero, err
	}
	return decodeOutput[O]("RunStep", flow.Slug(), step.Slug(), raw)
}

// RunStepJSON is RunStep for a step named by its slug, for flows whose step handles are out of the test's reach
// (kept inside the function that builds the flow). It returns the step's output as JSON.
func RunStepJSON(ctx context.Context, flow pgflow.AnyFlow, stepSlug string, opts *RunStepOpts) (json.RawMessage, error) {
	return runStep(ctx, "RunStepJSON", flow, stepSlug, opts)
}

func runStep(ctx context.Context, fn string, flow pgflow.AnyFlow, slug string, opts *RunStepOpts) (json.RawMessage, error) {
	tg, err := resolve(fn, flow, slug)
	if err != nil {
		return nil, err
	}
	opts = opts.orZero()
	if opts.TaskIndex != 0 {
		return nil, fmt.Errorf("pgflowtest: %s: %s: RunStepOpts.TaskIndex is %d, but %s gives every task its own index (use RunMapTask to run one task of a map step)",
			fn, tg.subject(), opts.TaskIndex, fn)
	}
	flowInput, deps, err := encodeInputs(fn, tg, opts)
	if err != nil {
		return nil, err
	}
	if !tg.step.Map {
		input, err := json.Marshal(deps) // {} without dependencies; only the given ones, as only completed ones are
		if err != nil {
			return nil, fmt.Errorf("pgflowtest: %s: %s: encode the dependency outputs: %w", fn, tg.subject(), err)
		}
		return runTask(ctx, tg, opts, taskEnv{input: input, flowInput: flowInput})
	}

	// A map step: one task per element of the array it maps over.
	var array json.RawMessage
	var source string
	if len(tg.deps) == 0 {
		source = "RunStepOpts.FlowInput (the step maps over the flow input)"
		if flowInput == nil {
			return nil, fmt.Errorf("pgflowtest: %s: %s maps over the flow input: set RunStepOpts.FlowInput to the array", fn, tg.subject())
		}
		array = flowInput
	} else {
		over := tg.deps[0]
		source = fmt.Sprintf("RunStepOpts.Deps[%q] (the step maps over step %q)", over, over)
		if array = deps[over]; array == nil {
			return nil, fmt.Errorf("pgflowtest: %s: %s maps over step %q: set RunStepOpts.Deps[%q] to the array", fn, tg.subject(), over, over)
		}
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(array, &elems); err != nil || elems == nil {
		return nil, fmt.Errorf("pgflowtest: %s: %s: %s must be a JSON array, got %.100s", fn, tg.subject(), source, array)
	}
	outs := make([]json.RawMessage, len(elems))
	for i, el := range elems {
		if outs[i], err = runTask(ctx, tg, opts, taskEnv{input: el, flowInput: flowInput, index: i}); err != nil {
			return nil, err
		}
	}
	out, err := json.Marshal(outs)
	if err != nil {
		return nil, fmt.Errorf("pgflowtest: %s: %s: join the task outputs: %w", fn, tg.subject(), err)
	}
	return out, nil
}

// RunMapTask runs one task of step, a map step of flow, with element as its item (encoded to JSON and decoded
// into the handler's element type, as in a worker: an undecodable element is a Permanent error) and
// opts.TaskIndex as its index, without a database, and returns the task's output decoded into O. Everything
// else is as in RunStep. opts.Deps must be empty: map tasks read no dependency output.
func RunMapTask[O any](ctx context.Context, flow pgflow.AnyFlow, step pgflow.StepHandle[[]O], element any, opts *RunStepOpts) (O, error) {
	var zero O
	const fn = "RunMapTask"
	tg, err := resolve(fn, flow, step.Slug())
	if err != nil {
		return zero, err
	}
	if !tg.step.Map {
		return zero, fmt.Errorf("pgflowtest: %s: %s is a single step, not a map step: use RunStep", fn, tg.subject())
	}
	opts = opts.orZero()
	if len(opts.Deps) > 0 {
		return zero, fmt.Errorf("pgflowtest: %s: %s: RunStepOpts.Deps has %s, but a map task reads no dependency output (it receives its element)",
			fn, tg.subject(), strings.Join(slices.Sorted(maps.Keys(opts.Deps)), ", "))
	}
	if opts.TaskIndex < 0 {
		return zero, fmt.Errorf("pgflowtest: %s: %s: RunStepOpts.TaskIndex is %d, want >= 0", fn, tg.subject(), opts.TaskIndex)
	}
	flowInput, _, err := encodeInputs(fn, tg, opts)
	if err != nil {
		return zero, err
	}
	el, err := encodeJSON(element)
	if err != nil {
		return zero, fmt.Errorf("pgflowtest: %s: %s: the element: %w", fn, tg.subject(), err)
	}
	raw, err := runTask(ctx, tg, opts, taskEnv{input: el, flowInput: flowInput, index: opts.TaskIndex})
	if err != nil {
		return zero, err
	}
	return decodeOutput[O](fn, tg.flow, tg.step.Slug, raw)
}

func decodeOutput[O any](fn, flow, step string, raw json.RawMessage) (O, error) {
	var out O
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("pgflowtest: %s: flow %q, step %q: cannot decode the output %.200s into %T: %w", fn, flow, step, raw, out, err)
	}
	return out, nil
}
