// Package reliability holds what the reliability tests (reliability_*_test.go in the root package), the test
// worker binary (testworker) and the soak command share: flows whose handlers record every invocation and can be
// told to hang or fail, the SQL that records invocations and events in a test database, the end-of-run invariant
// checks, and helpers that build and drive worker subprocesses.
package reliability

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgflow-go/pgflow"
)

// Flow slugs of the reliability flows.
const (
	OneStepFlow = "rel_one" // one single step, "work"
	MapFlow     = "rel_map" // "list" (single, returns Input.Items numbers) then "each" (map over list)
)

// StepTimeout is the task timeout of every reliability step (the smallest the DSL accepts): a claimed message
// stays hidden for 5 s and a task is stalled 33 s after it started.
const StepTimeout = 3 * time.Second

// Input is the run input of the reliability flows. Besides the map size it tells handlers how to misbehave, per
// attempt, so a run's story is fixed when it starts and every process running it agrees.
type Input struct {
	Items        int `json:"items,omitempty"`         // MapFlow: how many map tasks "each" gets
	HangAttempts int `json:"hang_attempts,omitempty"` // the handler blocks on the Gate while its attempt <= HangAttempts
	FailAttempts int `json:"fail_attempts,omitempty"` // the handler returns an error while its attempt <= FailAttempts
	SleepMS      int `json:"sleep_ms,omitempty"`      // the handler sleeps this long before returning
}

// Output is what every reliability handler returns: which invocation produced the result.
type Output struct {
	Invocation string `json:"invocation"` // id given by the Recorder
	Worker     string `json:"worker"`
	Attempt    int    `json:"attempt"`
	Item       int    `json:"item"` // the map element (MapFlow "each"), else 0
}

// Recorder records that a handler invocation started and returns an id for it. It is called before the handler
// does anything else, so a handler that is killed later is still on record.
type Recorder interface {
	Started(ctx context.Context, meta pgflow.TaskMeta) (string, error)
}

// Gate is where a hanging handler waits. Wait returns nil once the gate is released, or ctx's error.
type Gate interface {
	Wait(ctx context.Context, meta pgflow.TaskMeta) error
}

// Handlers are the dependencies of the reliability flows' handlers.
type Handlers struct {
	Recorder Recorder
	Gate     Gate // nil: hanging handlers wait until their context ends
}

// ErrInjected is the error handlers return while their attempt <= Input.FailAttempts.
var ErrInjected = errors.New("reliability: injected handler failure")

// FlowOptions are the options every reliability flow is created with (a worker only uses them when it creates the
// flow; shapes compare without them).
func FlowOptions() []pgflow.FlowOption {
	return []pgflow.FlowOption{pgflow.Timeout(StepTimeout), pgflow.MaxAttempts(5), pgflow.BaseDelay(time.Second)}
}

// NewFlow returns the reliability flow named slug (OneStepFlow or MapFlow) wired to h.
func NewFlow(slug string, h Handlers) (*pgflow.Flow[Input], error) {
	switch slug {
	case OneStepFlow:
		f := pgflow.NewFlow[Input](OneStepFlow, FlowOptions()...)
		pgflow.Step(f, "work", func(ctx context.Context, t *pgflow.Task[Input]) (Output, error) {
			in, err := t.FlowInput(ctx)
			if err != nil {
				return Output{}, err
			}
			return h.run(ctx, t.Meta(), in, 0)
		})
		return f, f.Err()
	case MapFlow:
		f := pgflow.NewFlow[Input](MapFlow, FlowOptions()...)
		list := pgflow.Step(f, "list", func(ctx context.Context, t *pgflow.Task[Input]) ([]int, error) {
			in, err := t.FlowInput(ctx)
			if err != nil {
				return nil, err
			}
			items := make([]int, in.Items)
			for i := range items {
				items[i] = i
			}
			return items, nil
		})
		pgflow.Map(f, "each", list, func(ctx context.Context, t *pgflow.Task[Input], item int) (Output, error) {
			in, err := t.FlowInput(ctx)
			if err != nil {
				return Output{}, err
			}
			return h.run(ctx, t.Meta(), in, item)
		})
		return f, f.Err()
	}
	return nil, fmt.Errorf("reliability: unknown flow %q (want %q or %q)", slug, OneStepFlow, MapFlow)
}

// run is the body shared by the recording handlers.
func (h Handlers) run(ctx context.Context, meta pgflow.TaskMeta, in Input, item int) (Output, error) {
	id, err := h.Recorder.Started(ctx, meta)
	if err != nil {
		return Output{}, fmt.Errorf("reliability: record invocation of run %s step %s task %d: %w", meta.RunID, meta.StepSlug, meta.TaskIndex, err)
	}
	if meta.Attempt <= in.HangAttempts {
		if h.Gate == nil {
			<-ctx.Done()
			return Output{}, ctx.Err()
		}
		if err := h.Gate.Wait(ctx, meta); err != nil {
			return Output{}, err
		}
	}
	if in.SleepMS > 0 {
		t := time.NewTimer(time.Duration(in.SleepMS) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Output{}, ctx.Err()
		}
	}
	if meta.Attempt <= in.FailAttempts {
		return Output{}, fmt.Errorf("%w (attempt %d of task %d)", ErrInjected, meta.Attempt, meta.TaskIndex)
	}
	return Output{Invocation: id, Worker: meta.WorkerID, Attempt: meta.Attempt, Item: item}, nil
}
