package pgflowtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/pgflowtest"
)

type page struct {
	Title string `json:"title"`
	Words int    `json:"words"`
	note  string // unexported: lost in JSON, as in a run
}

// articleFlow is a flow with a root step, a dependent step, a map over the root's output and a map over the
// flow input. Handlers record what they received in seen.
type articleFlow struct {
	f        *pgflow.Flow[[]string]
	fetch    pgflow.StepHandle[page]
	render   pgflow.StepHandle[string]
	count    pgflow.StepHandle[[]int]
	perInput pgflow.StepHandle[[]string]
	metas    []pgflow.TaskMeta
}

func newArticleFlow() *articleFlow {
	a := &articleFlow{f: pgflow.NewFlow[[]string]("articles", pgflow.Timeout(30*time.Second))}
	a.fetch = pgflow.Step(a.f, "fetch", func(ctx context.Context, t *pgflow.Task[[]string]) (page, error) {
		urls, err := t.FlowInput(ctx)
		if err != nil {
			return page{}, err
		}
		a.metas = append(a.metas, t.Meta())
		return page{Title: strings.Join(urls, "+"), Words: len(urls), note: "dropped"}, nil
	})
	a.render = pgflow.Step(a.f, "render", func(ctx context.Context, t *pgflow.Task[[]string]) (string, error) {
		p, err := a.fetch.Output(t)
		if err != nil {
			return "", err
		}
		if p.note != "" {
			return "", errors.New("an unexported field reached the dependent step")
		}
		t.Logger.Info("rendering", "title", p.Title)
		return fmt.Sprintf("%s (%d words)", p.Title, p.Words), nil
	}, pgflow.DependsOn(a.fetch), pgflow.Timeout(5*time.Second))
	words := pgflow.Step(a.f, "words", func(ctx context.Context, t *pgflow.Task[[]string]) ([]string, error) {
		return []string{"a", "bb"}, nil
	})
	a.count = pgflow.Map(a.f, "count", words, func(ctx context.Context, t *pgflow.Task[[]string], w string) (int, error) {
		a.metas = append(a.metas, t.Meta())
		switch w {
		case "panic":
			panic("boom: " + w)
		case "permanent":
			return 0, pgflow.Permanent(errors.New("cannot count " + w))
		}
		return len(w), nil
	})
	a.perInput = pgflow.MapInput(a.f, "per_input", func(ctx context.Context, t *pgflow.Task[[]string], url string) (string, error) {
		return strings.ToUpper(url), nil
	})
	return a
}

func TestRunStepRootStepReadsTheFlowInput(t *testing.T) {
	t.Parallel()
	a := newArticleFlow()
	p, err := pgflowtest.RunStep(t.Context(), a.f, a.fetch, &pgflowtest.RunStepOpts{
		FlowInput: []string{"x", "y"}, Attempt: 2, RunID: "11111111-2222-3333-4444-555555555555",
	})
	require.NoError(t, err)
	require.Equal(t, page{Title: "x+y", Words: 2}, p, "the output went through JSON: the unexported field is gone")
	require.Equal(t, []pgflow.TaskMeta{{RunID: "11111111-2222-3333-4444-555555555555", FlowSlug: "articles",
		StepSlug: "fetch", Attempt: 2, WorkerID: pgflowtest.DefaultRunID, QueueName: "articles"}}, a.metas)

	// A raw JSON input is used as it is.
	p, err = pgflowtest.RunStep(t.Context(), a.f, a.fetch, &pgflowtest.RunStepOpts{FlowInput: json.RawMessage(`["z"]`)})
	require.NoError(t, err)
	require.Equal(t, "z", p.Title)
	require.Equal(t, 1, a.metas[1].Attempt, "Attempt defaults to 1")
	require.Equal(t, pgflowtest.DefaultRunID, a.metas[1].RunID)

	// Without a flow input the handler's FlowInput fails and says what to set.
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.fetch, nil)
	require.ErrorContains(t, err, `flow "articles", step "fetch": the handler read the flow input, but RunStepOpts.FlowInput is nil`)

	// An input the handler cannot decode is a permanent error, as in a worker.
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.fetch, &pgflowtest.RunStepOpts{FlowInput: map[string]int{"a": 1}})
	require.ErrorIs(t, err, pgflow.ErrPermanent)
	require.ErrorContains(t, err, "cannot decode the flow input into []string")
}

func TestRunStepDependencyOutputReachesTheHandler(t *testing.T) {
	t.Parallel()
	a := newArticleFlow()
	var logs bytes.Buffer
	out, err := pgflowtest.RunStep(t.Context(), a.f, a.render, &pgflowtest.RunStepOpts{
		Deps:   map[string]any{"fetch": page{Title: "Queues", Words: 12, note: "not encoded"}},
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	require.NoError(t, err)
	require.Equal(t, "Queues (12 words)", out)
	require.Contains(t, logs.String(), `"msg":"rendering","flow":"articles","run_id":"00000000-0000-0000-0000-000000000000","step":"render","task_index":0,"attempt":1,"title":"Queues"`,
		"the handler's logger carries the task's attributes")

	// A dependency left out is seen as skipped.
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.render, nil)
	require.ErrorIs(t, err, pgflow.ErrDependencySkipped)
	require.ErrorContains(t, err, `"fetch"`)

	// An output the handler cannot decode is a permanent error naming the dependency.
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.render, &pgflowtest.RunStepOpts{Deps: map[string]any{"fetch": "not an object"}})
	require.ErrorIs(t, err, pgflow.ErrPermanent)
	require.ErrorContains(t, err, `cannot decode the output of dependency "fetch"`)

	// A key that is not a dependency is the test's mistake, named.
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.render, &pgflowtest.RunStepOpts{Deps: map[string]any{"words": []string{}}})
	require.EqualError(t, err, `pgflowtest: RunStep: flow "articles", step "render": RunStepOpts.Deps has "words", which is not a dependency of the step (its dependencies: fetch)`)
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.fetch, &pgflowtest.RunStepOpts{Deps: map[string]any{"fetch": 1}})
	require.ErrorContains(t, err, `RunStepOpts.Deps has "fetch", which is not a dependency of the step (its dependencies: none)`)
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.render, &pgflowtest.RunStepOpts{Deps: map[string]any{"fetch": json.RawMessage(`{`)}})
	require.ErrorContains(t, err, `RunStepOpts.Deps["fetch"]: not valid JSON`)
}

func TestRunMapTaskDecodesTheElement(t *testing.T) {
	t.Parallel()
	a := newArticleFlow()
	n, err := pgflowtest.RunMapTask(t.Context(), a.f, a.count, "abcd", &pgflowtest.RunStepOpts{TaskIndex: 3})
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, 3, a.metas[0].TaskIndex)
	require.Equal(t, "count", a.metas[0].StepSlug)

	// An element the handler cannot decode is a permanent error naming the step and the task.
	_, err = pgflowtest.RunMapTask(t.Context(), a.f, a.count, 42, &pgflowtest.RunStepOpts{TaskIndex: 1})
	require.ErrorIs(t, err, pgflow.ErrPermanent)
	require.ErrorContains(t, err, `step "count" task 1: cannot decode the map element into string`)

	// Map tasks read no dependency output; RunMapTask is for map steps only.
	_, err = pgflowtest.RunMapTask(t.Context(), a.f, a.count, "x", &pgflowtest.RunStepOpts{Deps: map[string]any{"words": []string{"x"}}})
	require.EqualError(t, err, `pgflowtest: RunMapTask: flow "articles", step "count": RunStepOpts.Deps has words, but a map task reads no dependency output (it receives its element)`)
	_, err = pgflowtest.RunMapTask(t.Context(), a.f, a.count, "x", &pgflowtest.RunStepOpts{TaskIndex: -1})
	require.ErrorContains(t, err, "RunStepOpts.TaskIndex is -1, want >= 0")
	single := pgflow.NewFlow[int]("single")
	list := pgflow.Step(single, "list", func(ctx context.Context, t *pgflow.Task[int]) ([]int, error) { return nil, nil })
	_, err = pgflowtest.RunMapTask(t.Context(), single, list, 1, nil)
	require.EqualError(t, err, `pgflowtest: RunMapTask: flow "single", step "list" is a single step, not a map step: use RunStep`)
}

func TestRunStepRunsEveryTaskOfAMapStep(t *testing.T) {
	t.Parallel()
	a := newArticleFlow()
	counts, err := pgflowtest.RunStep(t.Context(), a.f, a.count, &pgflowtest.RunStepOpts{Deps: map[string]any{"words": []string{"a", "bbb", "cc"}}})
	require.NoError(t, err)
	require.Equal(t, []int{1, 3, 2}, counts)
	for i, m := range a.metas {
		require.Equal(t, i, m.TaskIndex, "tasks run in element order with their own index")
	}

	// An empty array runs no task and gives [], as in the database.
	a.metas = nil
	counts, err = pgflowtest.RunStep(t.Context(), a.f, a.count, &pgflowtest.RunStepOpts{Deps: map[string]any{"words": []string{}}})
	require.NoError(t, err)
	require.Equal(t, []int{}, counts)
	require.Empty(t, a.metas)

	// The first failing task stops the step.
	a.metas = nil
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.count, &pgflowtest.RunStepOpts{Deps: map[string]any{"words": []string{"a", "permanent", "c"}}})
	require.ErrorIs(t, err, pgflow.ErrPermanent)
	require.EqualError(t, err, "cannot count permanent", "the handler's error comes back as it is")
	require.Len(t, a.metas, 2)

	// A map over the flow input takes its elements from FlowInput.
	upper, err := pgflowtest.RunStep(t.Context(), a.f, a.perInput, &pgflowtest.RunStepOpts{FlowInput: []string{"a", "b"}})
	require.NoError(t, err)
	require.Equal(t, []string{"A", "B"}, upper)

	// The array must be given, and be an array.
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.count, nil)
	require.EqualError(t, err, `pgflowtest: RunStep: flow "articles", step "count" maps over step "words": set RunStepOpts.Deps["words"] to the array`)
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.perInput, nil)
	require.EqualError(t, err, `pgflowtest: RunStep: flow "articles", step "per_input" maps over the flow input: set RunStepOpts.FlowInput to the array`)
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.count, &pgflowtest.RunStepOpts{Deps: map[string]any{"words": map[string]int{}}})
	require.ErrorContains(t, err, `RunStepOpts.Deps["words"] (the step maps over step "words") must be a JSON array, got {}`)
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.count, &pgflowtest.RunStepOpts{TaskIndex: 1, Deps: map[string]any{"words": []string{}}})
	require.ErrorContains(t, err, "RunStepOpts.TaskIndex is 1, but RunStep gives every task its own index (use RunMapTask")
}

func TestRunStepRecoversAPanic(t *testing.T) {
	t.Parallel()
	a := newArticleFlow()
	_, err := pgflowtest.RunMapTask(t.Context(), a.f, a.count, "panic", &pgflowtest.RunStepOpts{TaskIndex: 2})
	var p *pgflow.PanicError
	require.ErrorAs(t, err, &p)
	require.Equal(t, "count", p.Step)
	require.Equal(t, 2, p.TaskIndex)
	require.Equal(t, "boom: panic", p.Value)
	require.Contains(t, string(p.Stack), "step_test.go", "the stack is the handler's")
	require.EqualError(t, err, `panic in handler of step "count" (task 2): boom: panic`)

	// Also inside RunStep of the whole map step.
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.count, &pgflowtest.RunStepOpts{Deps: map[string]any{"words": []string{"ok", "panic"}}})
	require.ErrorAs(t, err, &p)
	require.Equal(t, 1, p.TaskIndex)
}

func TestRunStepReturnsTheHandlersErrorAsItIs(t *testing.T) {
	t.Parallel()
	errDown := errors.New("service down")
	f := pgflow.NewFlow[int]("errs")
	s := pgflow.Step(f, "s", func(ctx context.Context, t *pgflow.Task[int]) (int, error) { return 0, errDown })
	notDep := pgflow.Step(f, "not_dep", func(ctx context.Context, t *pgflow.Task[int]) (int, error) { return s.Output(t) })
	_, err := pgflowtest.RunStep(t.Context(), f, s, nil)
	require.Same(t, errDown, err)
	require.NotErrorIs(t, err, pgflow.ErrPermanent, "an ordinary error stays retryable")

	// Reading the output of a step that is not a dependency is a permanent error of the flow's code.
	_, err = pgflowtest.RunStep(t.Context(), f, notDep, nil)
	require.ErrorIs(t, err, pgflow.ErrNotDependency)
	require.ErrorIs(t, err, pgflow.ErrPermanent)
}

func TestRunStepNamesTheStepThatIsNotInTheFlow(t *testing.T) {
	t.Parallel()
	a := newArticleFlow()
	other := pgflow.NewFlow[int]("other")
	alien := pgflow.Step(other, "alien", func(ctx context.Context, t *pgflow.Task[int]) (int, error) { return 1, nil })
	_, err := pgflowtest.RunStep(t.Context(), a.f, alien, nil)
	require.EqualError(t, err, `pgflowtest: RunStep: flow "articles" has no step "alien" (its steps: fetch, render, words, count, per_input)`)

	_, err = pgflowtest.RunStep(t.Context(), a.f, pgflow.StepHandle[int]{}, nil)
	require.EqualError(t, err, `pgflowtest: RunStep: flow "articles": the step handle is zero (not returned by Step, Map or MapInput)`)

	_, err = pgflowtest.RunStepJSON(t.Context(), a.f, "nope", nil)
	require.ErrorContains(t, err, `pgflowtest: RunStepJSON: flow "articles" has no step "nope"`)

	var nilFlow *pgflow.Flow[int]
	_, err = pgflowtest.RunStep(t.Context(), nilFlow, alien, nil)
	require.EqualError(t, err, "pgflowtest: RunStep: the flow is nil")

	broken := pgflow.NewFlow[int]("broken")
	b := pgflow.Step(broken, "b", func(ctx context.Context, t *pgflow.Task[int]) (int, error) { return 1, nil }, pgflow.MaxAttempts(0))
	_, err = pgflowtest.RunStep(t.Context(), broken, b, nil)
	var def *pgflow.DefinitionError
	require.ErrorAs(t, err, &def)
	require.ErrorContains(t, err, `pgflowtest: RunStep: flow "broken" has definition errors`)

	_, err = pgflowtest.RunStep(t.Context(), a.f, a.fetch, &pgflowtest.RunStepOpts{Attempt: -1, FlowInput: []string{}})
	require.ErrorContains(t, err, "RunStepOpts.Attempt is -1")
	_, err = pgflowtest.RunStep(t.Context(), a.f, a.fetch, &pgflowtest.RunStepOpts{FlowInput: func() {}})
	require.ErrorContains(t, err, `pgflowtest: RunStep: flow "articles", step "fetch": RunStepOpts.FlowInput: encode func()`)
}

func TestRunStepJSONRunsAStepBySlug(t *testing.T) {
	t.Parallel()
	a := newArticleFlow()
	raw, err := pgflowtest.RunStepJSON(t.Context(), a.f, "render", &pgflowtest.RunStepOpts{Deps: map[string]any{"fetch": json.RawMessage(`{"title":"T","words":2}`)}})
	require.NoError(t, err)
	require.JSONEq(t, `"T (2 words)"`, string(raw))
	raw, err = pgflowtest.RunStepJSON(t.Context(), a.f, "count", &pgflowtest.RunStepOpts{Deps: map[string]any{"words": []string{"abc"}}})
	require.NoError(t, err)
	require.JSONEq(t, `[3]`, string(raw))
}

func TestRunStepAppliesTheStepTimeout(t *testing.T) {
	t.Parallel()
	f := pgflow.NewFlow[int]("slow")
	var cause error
	slow := pgflow.Step(f, "slow", func(ctx context.Context, t *pgflow.Task[int]) (int, error) {
		deadline, ok := ctx.Deadline()
		if !ok || time.Until(deadline) > 3*time.Second {
			return 0, fmt.Errorf("deadline %v, %t: want the step's 3 s timeout", deadline, ok)
		}
		<-ctx.Done() // returns once the step timeout has passed
		cause = context.Cause(ctx)
		return 1, nil
	}, pgflow.Timeout(3*time.Second), pgflow.MaxAttempts(2))
	_, err := pgflowtest.RunStep(t.Context(), f, slow, nil)
	require.ErrorIs(t, err, pgflow.ErrStepTimeout)
	require.ErrorIs(t, cause, pgflow.ErrStepTimeout, "the handler's context says why it ended")
	require.EqualError(t, err, `step "slow" timed out after 3s (attempt 1 of 2)`, "the error a worker records")
}
