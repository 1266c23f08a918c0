package pgflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/pgflow-go/pgflow/internal/taskrun"
)

// Flow is the definition of a workflow whose run input has type I: a slug, flow-level options and a DAG of
// steps added with Step, Map and MapInput. Steps can only depend on steps added before them, so the order of
// definition is a topological order and cycles are impossible.
//
// A Flow is a builder that accumulates steps and records every definition mistake instead of panicking; Err
// returns them. Once the flow is used — Shape, CompileSQL or a worker start — it is frozen: a step added later
// is not added and is recorded as an ErrFlowFrozen error, so a running definition never changes. A Flow is safe
// for concurrent use.
type Flow[I any] struct {
	c *flowCore
}

// AnyFlow is implemented by every *Flow[I], whatever its input type; it lets non-generic code (a worker, a CLI,
// a list of flows) hold flows of different input types.
type AnyFlow interface {
	Slug() string
	Err() error
	Shape() (json.RawMessage, error)
	CompileSQL() ([]string, error)
	// EngineFlow freezes the flow and returns what pgflow's engine runs of it (used by Worker and by package
	// pgflowtest; its result type is internal to this module). It fails with the flow's definition errors.
	EngineFlow() (*taskrun.Flow, error)
	core() *flowCore
}

// EngineFlow freezes the flow and returns what pgflow's engine runs of it: its slug, its shape and a runner per
// step. Worker and package pgflowtest use it; applications have no need to.
func (f *Flow[I]) EngineFlow() (*taskrun.Flow, error) {
	steps, err := f.c.freeze()
	if err != nil {
		return nil, fmt.Errorf("flow %q has definition errors: %w", f.c.slug, err)
	}
	shape, err := f.Shape()
	if err != nil {
		return nil, fmt.Errorf("shape of flow %q: %w", f.c.slug, err)
	}
	def := &taskrun.Flow{Slug: f.c.slug, Shape: shape, QueueMode: f.c.queueMode(),
		MessageRetention: f.c.messageRetention(),
		Steps:            make(map[string]*taskrun.Step, len(steps))}
	for _, d := range steps {
		def.StepOrder = append(def.StepOrder, d.slug)
		def.Steps[d.slug] = &taskrun.Step{Slug: d.slug, Map: d.stepType == stepTypeMap, Run: d.run}
	}
	return def, nil
}

// flowCore is the non-generic state of a Flow.
type flowCore struct {
	slug string
	opts optionValues // flow-level: only maxAttempts, baseDelay, timeout are ever set

	mu     sync.Mutex
	steps  []*stepDef // in definition order (= step_index order)
	bySlug map[string]*stepDef
	errs   []error // *DefinitionError, in the order they were found
	frozen bool
}

// NewFlow starts the definition of a flow. slug names the flow, its database rows and its queue: 1 to 47
// characters (the PGMQ queue-name limit), ASCII letters, digits and '_', not starting with a digit, not "run".
// Accepted options: MaxAttempts, BaseDelay, Timeout. Mistakes are recorded and reported by Err.
func NewFlow[I any](slug string, opts ...FlowOption) *Flow[I] {
	c := &flowCore{slug: slug, bySlug: make(map[string]*stepDef)}
	if detail := validateSlug(slug, maxFlowSlugLen); detail != "" {
		c.errs = append(c.errs, &DefinitionError{Flow: slug, Err: ErrInvalidSlug, Detail: detail})
	}
	flat := make([]Option, len(opts))
	for i, o := range opts {
		if o != nil {
			flat[i] = o.flowOption()
		}
	}
	v, problems := applyOptions(flat, true)
	for _, p := range problems {
		c.errs = append(c.errs, &DefinitionError{Flow: slug, Err: p.kind, Detail: p.detail})
	}
	if v.queuePerStep && len(c.errs) == 0 {
		if detail := stepModeSlugProblem(slug, maxStepModeFlowSlugLen); detail != "" {
			c.errs = append(c.errs, &DefinitionError{Flow: slug, Err: ErrInvalidSlug, Detail: detail})
		}
	}
	c.opts = v
	return &Flow[I]{c: c}
}

// Slug returns the flow slug.
func (f *Flow[I]) Slug() string { return f.c.slug }

// Err returns every definition mistake recorded so far, joined with errors.Join (each one a *DefinitionError
// naming the flow, the step and the bad value), or nil if the definition is valid.
func (f *Flow[I]) Err() error { return f.c.err() }

func (f *Flow[I]) core() *flowCore { return f.c }

func (c *flowCore) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.errs...)
}

// freeze marks the flow as used and returns a snapshot of its steps in definition order, or the recorded
// definition errors. After freeze no step can be added.
func (c *flowCore) freeze() ([]*stepDef, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = true
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return append([]*stepDef(nil), c.steps...), nil
}

// queueMode is the flow's queue mode as pgflow.flows.queue_mode spells it.
func (c *flowCore) queueMode() string {
	if c.opts.queuePerStep {
		return queueModeStep
	}
	return queueModeFlow
}

// messageRetention is the flow's message retention as pgflow.flows.message_retention spells it.
func (c *flowCore) messageRetention() string {
	if c.opts.deleteMessages {
		return messageRetentionDelete
	}
	return messageRetentionArchive
}

// step returns the step with the given slug, or nil.
func (c *flowCore) step(slug string) *stepDef {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bySlug[slug]
}

// recordLocked appends a definition error; c.mu must be held.
func (c *flowCore) recordLocked(step string, kind error, detail string) {
	c.errs = append(c.errs, &DefinitionError{Flow: c.slug, Step: step, Err: kind, Detail: detail})
}

// Queue modes of a flow (pgflow.flows.queue_mode).
const (
	queueModeFlow = "flow"
	queueModeStep = "step"
)

// Message retentions of a flow (pgflow.flows.message_retention).
const (
	messageRetentionArchive = "archive"
	messageRetentionDelete  = "delete"
)

const (
	maxFlowSlugLen         = 47  // PGMQ queue names are limited to 47 characters and a flow's queue is named like the flow
	maxStepSlugLen         = 128 // pgflow.is_valid_slug
	maxStepModeFlowSlugLen = 40  // QueuePerStep: room for "__" and a step index in 47 characters (pgflow._check_step_mode_slug)
)

// stepModeSlugProblem checks the extra rules of a slug in a flow with QueuePerStep, those of
// pgflow._check_step_mode_slug (maxLen 0: no length rule), and returns "" or the problem naming the slug.
func stepModeSlugProblem(slug string, maxLen int) string {
	switch {
	case maxLen > 0 && len(slug) > maxLen:
		return fmt.Sprintf("%q is %d characters long; with QueuePerStep a flow slug may have at most %d, so that its steps' queue names fit PGMQ's 47", slug, len(slug), maxLen)
	case strings.HasPrefix(slug, "_") || strings.HasSuffix(slug, "_"):
		return fmt.Sprintf("%q starts or ends with '_', which QueuePerStep does not allow (queues are named <flow>__<step>)", slug)
	case strings.Contains(slug, "__"):
		return fmt.Sprintf("%q contains \"__\", which QueuePerStep does not allow (queues are named <flow>__<step>)", slug)
	}
	return ""
}

// stepQueueName is the private queue of a step of a flow with QueuePerStep: pgflow._step_queue_name.
func stepQueueName(flowSlug, stepSlug string, stepIndex int) string {
	name := strings.ToLower(flowSlug) + "__" + strings.ToLower(stepSlug)
	if len(name) <= maxFlowSlugLen {
		return name
	}
	return strings.ToLower(flowSlug) + "__" + strconv.Itoa(stepIndex)
}

var slugPattern = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// validateSlug checks a flow or step slug and returns "" or a description of the problem naming the slug.
// The rules are those of pgflow.is_valid_slug, checked in this order: non-empty, at most maxLen characters, not
// the reserved word "run", not starting with a digit, only ASCII letters, digits and '_'.
func validateSlug(slug string, maxLen int) string {
	switch {
	case slug == "":
		return "slug is empty"
	case len(slug) > maxLen:
		if maxLen == maxFlowSlugLen {
			return fmt.Sprintf("%q is %d characters long; a flow slug names its queue and may have at most %d", slug, len(slug), maxLen)
		}
		return fmt.Sprintf("%q is %d characters long; at most %d allowed", slug, len(slug), maxLen)
	case slug == "run":
		return `"run" is a reserved word`
	case slug[0] >= '0' && slug[0] <= '9':
		return fmt.Sprintf("%q starts with a digit", slug)
	case !slugPattern.MatchString(slug):
		return fmt.Sprintf("%q may contain only ASCII letters, digits and '_'", slug)
	}
	return ""
}
