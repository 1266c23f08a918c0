package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pgflow-go/pgflow"
)

// benchFlow is a scenario's flow: its definition, its input and how many tasks one run has.
type benchFlow struct {
	flow        pgflow.AnyFlow
	slug        string
	input       json.RawMessage
	tasksPerRun int
	// handled counts the invocations of the flow's handlers when set (env.handled) before a worker serves the
	// flow: waitRuns follows a burn-down with it instead of counting runs in the database, which its workers
	// would pay for.
	handled *atomic.Int64
}

type empty struct{}

// handlerRan counts one invocation of a handler of the flow.
func (bf *benchFlow) handlerRan() {
	if bf.handled != nil {
		bf.handled.Add(1)
	}
}

// noop is the handler of every benchmark step: it does no work, so the figures measure the engine.
func (bf *benchFlow) noop(context.Context, *pgflow.Task[json.RawMessage]) (empty, error) {
	bf.handlerRan()
	return empty{}, nil
}

// flowFor returns a fresh definition of the flow a scenario works (definitions are frozen by workers, so every
// use builds its own); deleteMessages defines it with pgflow.DeleteTaskMessages.
func flowFor(scenario string, deleteMessages bool) (*benchFlow, error) {
	slug := "bench_" + strings.ReplaceAll(scenario, "-", "_")
	opts := []pgflow.FlowOption{pgflow.MaxAttempts(3), pgflow.Timeout(time.Minute)}
	if deleteMessages {
		opts = append(opts, pgflow.DeleteTaskMessages())
	}
	f := pgflow.NewFlow[json.RawMessage](slug, opts...)
	bf := &benchFlow{flow: f, slug: slug, input: json.RawMessage(`{}`)}
	noop := bf.noop
	switch scenario {
	case ScenarioOneStep, ScenarioLatency, ScenarioStart, ScenarioIdle, growthScenario, scaleScenario:
		pgflow.Step(f, "work", noop)
		bf.tasksPerRun = 1
	case ScenarioChain:
		s1 := pgflow.Step(f, "first", noop)
		s2 := pgflow.Step(f, "second", noop, pgflow.DependsOn(s1))
		pgflow.Step(f, "third", noop, pgflow.DependsOn(s2))
		bf.tasksPerRun = 3
	case ScenarioDiamond:
		a := pgflow.Step(f, "a", noop)
		b := pgflow.Step(f, "b", noop, pgflow.DependsOn(a))
		c := pgflow.Step(f, "c", noop, pgflow.DependsOn(a))
		pgflow.Step(f, "d", noop, pgflow.DependsOn(b, c))
		bf.tasksPerRun = 4
	case ScenarioDelayed:
		// Two root steps: one delayed at its start, one whose first attempt asks for its retry after a delay.
		pgflow.Step(f, DelayedStartStep, noop, pgflow.StartDelay(DelayedWorkDelay))
		pgflow.Step(f, DelayedRetryStep, func(_ context.Context, t *pgflow.Task[json.RawMessage]) (empty, error) {
			bf.handlerRan()
			if t.Attempt == 1 {
				return empty{}, pgflow.RetryAfter(DelayedWorkDelay, errors.New("bench: asks for a retry after a delay"))
			}
			return empty{}, nil
		})
		bf.tasksPerRun = 2
	case ScenarioMap:
		items := make([]json.RawMessage, MapElements)
		for i := range items {
			items[i] = json.RawMessage(fmt.Sprint(i))
		}
		raw, _ := json.Marshal(items)
		bf.input = raw
		mf := pgflow.NewFlow[[]json.RawMessage](slug, opts...)
		pgflow.MapInput(mf, "each", func(_ context.Context, _ *pgflow.Task[[]json.RawMessage], item json.RawMessage) (json.RawMessage, error) {
			bf.handlerRan()
			return item, nil
		})
		bf.flow = mf
		bf.tasksPerRun = MapElements
	default:
		return nil, fmt.Errorf("bench: no flow for scenario %q", scenario)
	}
	if err := bf.flow.Err(); err != nil {
		return nil, fmt.Errorf("bench: flow %q: %w", slug, err)
	}
	return bf, nil
}
