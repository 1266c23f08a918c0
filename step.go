package pgflow

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/pgflow-go/pgflow/internal/taskrun"
)

// Step types as stored in pgflow.steps.step_type.
const (
	stepTypeSingle = "single"
	stepTypeMap    = "map"
)

// AnyStep is any step handle of any output type (every StepHandle[O] implements it). DependsOn accepts it.
type AnyStep interface {
	// Slug returns the step slug.
	Slug() string
	def() *stepDef
}

// StepHandle refers to a step whose output has type O. It is returned by Step, Map and MapInput and is how other
// steps name their dependencies (DependsOn, Map) and read the step's output in a handler (Output), so a
// misspelled dependency is a compile error and reading an output needs no JSON decoding. The zero StepHandle
// refers to no step.
type StepHandle[O any] struct {
	d *stepDef
}

// Slug returns the step slug ("" for the zero StepHandle).
func (h StepHandle[O]) Slug() string {
	if h.d == nil {
		return ""
	}
	return h.d.slug
}

func (h StepHandle[O]) def() *stepDef { return h.d }

// Output returns this step's output as seen by the task t, which must belong to a step that depends on this one
// (DependsOn). It returns an error wrapping ErrDependencySkipped (naming the step) when this step was skipped, so
// its output is absent; ErrNotDependency when t's step does not depend on this step (this includes map tasks,
// which receive one element instead of their dependency's output); or a decoding error naming the flow, the steps
// and O. The last two are Permanent errors: returned by the handler, they fail the task without retry.
// A JSON null output decodes to the zero value of O.
func (h StepHandle[O]) Output(t TaskInfo) (O, error) {
	var zero O
	if h.d == nil {
		return zero, fmt.Errorf("pgflow: Output called on a zero StepHandle: %w", ErrNotDependency)
	}
	st := t.state()
	if st == nil || st.step == nil {
		return zero, fmt.Errorf("pgflow: output of step %q requested outside a running task: %w", h.d.slug, ErrNotDependency)
	}
	if st.step.stepType == stepTypeMap || !st.step.dependsOn(h.d) {
		// A bug in the flow's code: no retry can fix it.
		return zero, Permanent(fmt.Errorf("pgflow: flow %q, step %q reads the output of step %q, which is not among its dependencies: %w",
			st.step.flowSlug(), st.step.slug, h.d.slug, ErrNotDependency))
	}
	raw, ok, err := st.depOutput(h.d.slug)
	if err != nil {
		return zero, err
	}
	if !ok {
		return zero, fmt.Errorf("pgflow: step %q: output of dependency %q is absent: %w", st.step.slug, h.d.slug, ErrDependencySkipped)
	}
	var out O
	if err := json.Unmarshal(raw, &out); err != nil {
		// A stored output never changes: retrying cannot help.
		return zero, Permanent(fmt.Errorf("pgflow: flow %q, run %s, step %q: cannot decode the output of dependency %q into %T: %w",
			st.step.flowSlug(), st.env.Meta.RunID, st.step.slug, h.d.slug, zero, err))
	}
	return out, nil
}

// runFunc runs a step's handler for one claimed task; see the worker contract at the top of task.go.
type runFunc = taskrun.RunFunc

// stepDef is the immutable definition of one step, created by Step, Map or MapInput. Only valid steps are added
// to a flow; a step with definition errors gets a broken stepDef that is never added.
type stepDef struct {
	flow     *flowCore
	slug     string
	stepType string     // stepTypeSingle or stepTypeMap
	deps     []*stepDef // in declaration order; a map step has at most one
	opts     optionValues
	index    int // position in the flow (= pgflow.steps.step_index)
	run      runFunc
	broken   bool // had definition errors; never added to the flow
}

// flowSlug returns the slug of the flow the step belongs to.
func (d *stepDef) flowSlug() string {
	if d.flow == nil {
		return ""
	}
	return d.flow.slug
}

// depSlugs returns the dependency slugs in declaration order.
func (d *stepDef) depSlugs() []string {
	out := make([]string, len(d.deps))
	for i, dep := range d.deps {
		out[i] = dep.slug
	}
	return out
}

func (d *stepDef) dependsOn(dep *stepDef) bool {
	for _, x := range d.deps {
		if x == dep {
			return true
		}
	}
	return false
}

// Step adds a single step to f: one task per run, whose handler returns the step output (any value that
// json.Marshal accepts; 0, false, "" and nil are stored as such). Without DependsOn it is a root step, which reads
// the flow input with t.FlowInput. With DependsOn it runs once all its dependencies have completed or been
// skipped, and reads their outputs with handle.Output(t).
//
// Accepted options: MaxAttempts, BaseDelay, Timeout, StartDelay, If, IfNot, WhenUnmet, WhenExhausted,
// DependsOn. Definition mistakes are recorded on f (see Flow.Err); the returned handle is then not usable as a
// dependency of a valid flow.
func Step[I, O any](f *Flow[I], slug string, handler func(ctx context.Context, t *Task[I]) (O, error), opts ...StepOption) StepHandle[O] {
	c := mustCore(f, "Step")
	d := c.addStep(slug, stepTypeSingle, nil, handler == nil, opts, func(d *stepDef) runFunc {
		return func(ctx context.Context, env *taskrun.Env) (out json.RawMessage, err error) {
			t := newTask[I](env, d)
			defer recoverHandlerPanic(d, env, &out, &err)
			o, err := handler(ctx, t)
			if err != nil {
				return nil, err
			}
			return marshalOutput(d, o)
		}
	})
	return StepHandle[O]{d: d}
}

// Map adds a map step that runs handler once per element of the array output of the step over, in parallel
// tasks; its output is the array of the handler results in element order. An empty array completes the step at
// once with []. The step depends on over and on nothing else.
//
// Accepted options: those of Step; DependsOn may only repeat over.
func Map[I any, S ~[]E, E, O any](f *Flow[I], slug string, over StepHandle[S], handler func(ctx context.Context, t *Task[I], item E) (O, error), opts ...StepOption) StepHandle[[]O] {
	c := mustCore(f, "Map")
	d := c.addStep(slug, stepTypeMap, over, handler == nil, opts, mapRunner(handler))
	return StepHandle[[]O]{d: d}
}

// MapInput adds a root map step that runs handler once per element of the flow input, which is an array (I is
// a slice type); its output is the array of the handler results in element order. An empty input completes the
// step at once with [].
//
// Accepted options: those of Step except DependsOn, If and IfNot (the condition input of a root map is the input
// array, which never contains an object pattern).
func MapInput[I ~[]E, E, O any](f *Flow[I], slug string, handler func(ctx context.Context, t *Task[I], item E) (O, error), opts ...StepOption) StepHandle[[]O] {
	c := mustCore(f, "MapInput")
	d := c.addStep(slug, stepTypeMap, nil, handler == nil, opts, mapRunner(handler))
	return StepHandle[[]O]{d: d}
}

func mapRunner[I, E, O any](handler func(ctx context.Context, t *Task[I], item E) (O, error)) func(d *stepDef) runFunc {
	return func(d *stepDef) runFunc {
		return func(ctx context.Context, env *taskrun.Env) (out json.RawMessage, err error) {
			t := newTask[I](env, d)
			defer recoverHandlerPanic(d, env, &out, &err)
			var item E
			raw := env.Input
			if len(raw) == 0 {
				raw = json.RawMessage("null")
			}
			if err := json.Unmarshal(raw, &item); err != nil {
				// The element never changes: retrying cannot help.
				return nil, Permanent(fmt.Errorf("pgflow: flow %q, run %s, step %q task %d: cannot decode the map element into %T: %w",
					d.flowSlug(), env.Meta.RunID, d.slug, env.Meta.TaskIndex, item, err))
			}
			o, err := handler(ctx, t, item)
			if err != nil {
				return nil, err
			}
			return marshalOutput(d, o)
		}
	}
}

func mustCore[I any](f *Flow[I], fn string) *flowCore {
	if f == nil || f.c == nil {
		panic("pgflow: " + fn + " called with a nil or zero *Flow; create flows with NewFlow")
	}
	return f.c
}

func marshalOutput(d *stepDef, o any) (json.RawMessage, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("pgflow: step %q: cannot encode the handler result %T as JSON: %w", d.slug, o, err)
	}
	return b, nil
}

// addStep validates and adds a step. over is the array dependency of a Map step (nil otherwise); a map step
// without over is a MapInput step. mkRun builds the runner once the stepDef exists. It always returns a stepDef;
// a step with errors is returned broken and not added.
func (c *flowCore) addStep(slug, stepType string, over AnyStep, nilHandler bool, opts []StepOption, mkRun func(*stepDef) runFunc) *stepDef {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := &stepDef{flow: c, slug: slug, stepType: stepType}
	nErrs := len(c.errs)
	if c.frozen {
		c.recordLocked(slug, ErrFlowFrozen, fmt.Sprintf("step %q cannot be added: the flow was already used (Shape, CompileSQL or a worker start); define all steps before using the flow", slug))
		d.broken = true
		return d
	}
	if detail := validateSlug(slug, maxStepSlugLen); detail != "" {
		c.recordLocked(slug, ErrInvalidSlug, detail)
	} else if prev, dup := c.bySlug[slug]; dup {
		c.recordLocked(slug, ErrDuplicateStep, fmt.Sprintf("step %q is already defined (step index %d)", slug, prev.index))
	} else if c.opts.queuePerStep {
		if detail := stepModeSlugProblem(slug, 0); detail != "" {
			c.recordLocked(slug, ErrInvalidSlug, detail)
		}
		for _, other := range c.steps {
			if strings.EqualFold(other.slug, slug) {
				c.recordLocked(slug, ErrDuplicateStep, fmt.Sprintf(
					"step %q differs only in letter case from step %q; with QueuePerStep both would use queue %q",
					slug, other.slug, stepQueueName(c.slug, slug, len(c.steps))))
				break
			}
		}
	}
	if nilHandler {
		c.recordLocked(slug, ErrInvalidHandler, "handler is nil")
	}
	flat := make([]Option, len(opts))
	for i, o := range opts {
		if o != nil {
			flat[i] = o.stepOption()
		}
	}
	v, problems := applyOptions(flat, false)
	for _, p := range problems {
		c.recordLocked(slug, p.kind, p.detail)
	}

	// Resolve dependencies: the array dependency of a Map first, then DependsOn in order.
	isMap := stepType == stepTypeMap
	refs := v.deps
	if over != nil {
		refs = append([]AnyStep{over}, refs...)
	}
	var deps []*stepDef
	brokenDep := false
	for i, ref := range refs {
		what := "DependsOn"
		if over != nil && i == 0 {
			what = "Map over"
		}
		dep := stepOf(ref)
		switch {
		case dep == nil:
			c.recordLocked(slug, ErrUnknownDependency, what+": the step handle is nil or zero (not returned by Step, Map or MapInput)")
		case dep.flow != c:
			c.recordLocked(slug, ErrUnknownDependency, fmt.Sprintf("%s: step %q belongs to flow %q, not to this flow", what, dep.slug, dep.flow.slug))
		case dep.broken:
			brokenDep = true // its own error is already recorded
		case containsStep(deps, dep):
			if !(isMap && over != nil && dep == stepOf(over)) {
				c.recordLocked(slug, ErrInvalidOption, fmt.Sprintf("DependsOn: step %q is listed more than once", dep.slug))
			}
		default:
			deps = append(deps, dep)
		}
	}
	if isMap && over == nil && len(refs) > 0 {
		c.recordLocked(slug, ErrMapDependencies, fmt.Sprintf("a map over the flow input cannot depend on other steps (got DependsOn(%s)); use Map to map over a step's output", joinRefs(refs)))
	} else if isMap && len(deps) > 1 {
		c.recordLocked(slug, ErrMapDependencies, fmt.Sprintf("the map over %q cannot also depend on %s; a map step has exactly one dependency, the array it maps over", deps[0].slug, joinSlugs(deps[1:])))
	}

	// Condition patterns: keys must name dependencies for dependent steps; none on a root map.
	for _, pc := range []struct {
		name string
		raw  json.RawMessage
	}{{"If", v.ifPattern}, {"IfNot", v.ifNotPattern}} {
		if pc.raw == nil {
			continue
		}
		if isMap && over == nil {
			c.recordLocked(slug, ErrInvalidOption, fmt.Sprintf("%s(%s): a map over the flow input cannot have a condition (its condition input is the input array, which never contains an object pattern)", pc.name, pc.raw))
			continue
		}
		if len(refs) == 0 {
			continue // root step: the pattern is matched against the flow input, any keys allowed
		}
		var keys map[string]json.RawMessage
		_ = json.Unmarshal(pc.raw, &keys) // canonical JSON object, cannot fail
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			if !slugIn(deps, k) && !brokenDep {
				c.recordLocked(slug, ErrUnknownDependency, fmt.Sprintf("%s(%s): key %q is not a dependency of this step; the condition input of a dependent step is {\"<dependency slug>\": <output>, ...} with dependencies [%s]", pc.name, pc.raw, k, strings.Join(slugsOf(deps), ", ")))
			}
		}
	}

	if len(c.errs) > nErrs || brokenDep {
		d.broken = true
		return d
	}
	v.deps = nil
	d.deps = deps
	d.opts = v
	d.index = len(c.steps)
	d.run = mkRun(d)
	c.steps = append(c.steps, d)
	c.bySlug[slug] = d
	return d
}

// stepOf returns the stepDef behind an AnyStep, or nil for a nil interface or a zero handle.
func stepOf(s AnyStep) *stepDef {
	if s == nil {
		return nil
	}
	return s.def()
}

func containsStep(list []*stepDef, d *stepDef) bool {
	for _, x := range list {
		if x == d {
			return true
		}
	}
	return false
}

func slugIn(list []*stepDef, slug string) bool {
	for _, x := range list {
		if x.slug == slug {
			return true
		}
	}
	return false
}

func slugsOf(list []*stepDef) []string {
	out := make([]string, len(list))
	for i, d := range list {
		out[i] = d.slug
	}
	return out
}

func joinSlugs(list []*stepDef) string {
	q := make([]string, len(list))
	for i, d := range list {
		q[i] = strconv.Quote(d.slug)
	}
	return strings.Join(q, ", ")
}

func joinRefs(refs []AnyStep) string {
	q := make([]string, len(refs))
	for i, r := range refs {
		if d := stepOf(r); d != nil {
			q[i] = strconv.Quote(d.slug)
		} else {
			q[i] = "<nil>"
		}
	}
	return strings.Join(q, ", ")
}
