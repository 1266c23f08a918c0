package pgflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pgflow-go/pgflow/internal/taskrun"
	"github.com/stretchr/testify/require"
)

type runInput struct {
	URL   string `json:"url"`
	Limit int    `json:"limit"`
}

type fetched struct {
	OK    bool     `json:"ok"`
	Items []string `json:"items"`
}

// frozenStep freezes f and returns its step named slug.
func frozenStep(t *testing.T, f AnyFlow, slug string) *stepDef {
	t.Helper()
	steps, err := f.core().freeze()
	require.NoError(t, err)
	for _, d := range steps {
		if d.slug == slug {
			require.Same(t, d, f.core().step(slug))
			return d
		}
	}
	t.Fatalf("step %q not found", slug)
	return nil
}

func meta(step string, index int) taskrun.Meta {
	return taskrun.Meta{
		RunID: "0f8fad5b-d9cb-469f-a165-70867728950e", FlowSlug: "runner_flow", StepSlug: step, TaskIndex: index,
		Attempt: 2, MessageID: 9007199254740993, WorkerID: "7c9e6679-7425-40de-944b-e07fc1f90ae7", QueueName: "runner_flow",
	}
}

type ctxKey struct{}

func TestRunRootStepReadsFlowInputAndMeta(t *testing.T) {
	t.Parallel()
	f := NewFlow[runInput]("runner_flow")
	var gotMeta TaskMeta
	var gotLogger *slog.Logger
	Step(f, "fetch", func(ctx context.Context, tk *Task[runInput]) (fetched, error) {
		require.Equal(t, "marker", ctx.Value(ctxKey{}))
		gotMeta = tk.TaskMeta
		require.Equal(t, tk.TaskMeta, tk.Meta())
		gotLogger = tk.Logger
		in, err := tk.FlowInput(ctx)
		if err != nil {
			return fetched{}, err
		}
		return fetched{OK: in.Limit > 0, Items: []string{in.URL}}, nil
	})
	d := frozenStep(t, f, "fetch")

	var logBuf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logBuf, nil))
	env := &taskrun.Env{
		Meta:      meta("fetch", 0),
		Input:     json.RawMessage(`{}`),
		FlowInput: json.RawMessage(`{"url":"https://x","limit":3}`),
		LoadFlowInput: func(context.Context) (json.RawMessage, error) {
			return nil, errors.New("must not be called: flow input was provided")
		},
		Logger: logger,
	}
	ctx := context.WithValue(context.Background(), ctxKey{}, "marker")
	out, err := d.run(ctx, env)
	require.NoError(t, err)
	require.JSONEq(t, `{"ok":true,"items":["https://x"]}`, string(out))
	require.Equal(t, TaskMeta(meta("fetch", 0)), gotMeta)
	require.Same(t, logger, gotLogger)
}

func TestRunLazyFlowInput(t *testing.T) {
	t.Parallel()
	f := NewFlow[runInput]("runner_flow")
	root := Step(f, "root", func(context.Context, *Task[runInput]) (int, error) { return 1, nil })
	Step(f, "dep", func(ctx context.Context, tk *Task[runInput]) (string, error) {
		if tk.Logger == nil {
			return "", errors.New("nil logger")
		}
		// First call fails (the loader errors), the second loads, the third uses the cache.
		if _, err := tk.FlowInput(ctx); err == nil {
			return "", errors.New("expected the first load to fail")
		} else if !strings.Contains(err.Error(), `step "dep": loading the flow input of run 0f8fad5b`) || !strings.Contains(err.Error(), "db down") {
			return "", err
		}
		a, err := tk.FlowInput(ctx)
		if err != nil {
			return "", err
		}
		b, err := tk.FlowInput(ctx)
		if err != nil {
			return "", err
		}
		return a.URL + "|" + b.URL, nil
	}, DependsOn(root))
	d := frozenStep(t, f, "dep")

	var loads atomic.Int32
	env := &taskrun.Env{
		Meta:  meta("dep", 0),
		Input: json.RawMessage(`{"root":1}`),
		LoadFlowInput: func(context.Context) (json.RawMessage, error) {
			if loads.Add(1) == 1 {
				return nil, errors.New("db down")
			}
			return json.RawMessage(`{"url":"u"}`), nil
		},
	}
	out, err := d.run(context.Background(), env)
	require.NoError(t, err)
	require.Equal(t, `"u|u"`, string(out))
	require.Equal(t, int32(2), loads.Load())

	// Without loader and without flow input the error names the step and the run.
	env2 := &taskrun.Env{Meta: meta("dep", 0), Input: json.RawMessage(`{"root":1}`)}
	_, err = d.run(context.Background(), env2)
	require.ErrorContains(t, err, `step "dep": the flow input of run 0f8fad5b-d9cb-469f-a165-70867728950e is not available`)
}

func TestRunFlowInputDecodeError(t *testing.T) {
	t.Parallel()
	f := NewFlow[runInput]("runner_flow")
	Step(f, "root", func(ctx context.Context, tk *Task[runInput]) (int, error) {
		_, err := tk.FlowInput(ctx)
		return 0, err
	})
	d := frozenStep(t, f, "root")
	_, err := d.run(context.Background(), &taskrun.Env{Meta: meta("root", 0), Input: json.RawMessage(`{}`), FlowInput: json.RawMessage(`[1,2]`)})
	require.ErrorContains(t, err, `pgflow: flow "runner_flow", run 0f8fad5b-d9cb-469f-a165-70867728950e, step "root": cannot decode the flow input into pgflow.runInput`)
	require.ErrorIs(t, err, ErrPermanent, "an input that cannot be decoded is not retried")
}

func TestRunDependencyOutputs(t *testing.T) {
	t.Parallel()
	f := NewFlow[runInput]("runner_flow")
	fetch := Step(f, "fetch", func(context.Context, *Task[runInput]) (fetched, error) { return fetched{}, nil })
	count := Step(f, "count", func(context.Context, *Task[runInput]) (int, error) { return 0, nil })
	maybe := Step(f, "maybe", func(context.Context, *Task[runInput]) (*string, error) { return nil, nil }, WhenExhausted(Skip))
	unrelated := Step(f, "unrelated", func(context.Context, *Task[runInput]) (int, error) { return 0, nil })

	type result struct {
		Fetched   fetched
		Count     int
		Maybe     *string
		SkipErr   string
		NotDepErr string
	}
	Step(f, "join", func(ctx context.Context, tk *Task[runInput]) (result, error) {
		var r result
		var err error
		if r.Fetched, err = fetch.Output(tk); err != nil {
			return r, err
		}
		if r.Count, err = count.Output(tk); err != nil {
			return r, err
		}
		r.Maybe, err = maybe.Output(tk)
		if !errors.Is(err, ErrDependencySkipped) {
			return r, errors.New("expected ErrDependencySkipped, got " + errString(err))
		}
		r.SkipErr = err.Error()
		_, err = unrelated.Output(tk)
		if !errors.Is(err, ErrNotDependency) {
			return r, errors.New("expected ErrNotDependency, got " + errString(err))
		}
		if !errors.Is(err, ErrPermanent) {
			return r, errors.New("expected a permanent error, got " + errString(err))
		}
		r.NotDepErr = err.Error()
		return r, nil
	}, DependsOn(fetch, count, maybe))
	d := frozenStep(t, f, "join")

	// "maybe" was skipped: its key is absent. count's output 0 must stay 0.
	out, err := d.run(context.Background(), &taskrun.Env{Meta: meta("join", 0), Input: json.RawMessage(`{"fetch":{"ok":true,"items":["a","b"]},"count":0}`)})
	require.NoError(t, err)
	var r result
	require.NoError(t, json.Unmarshal(out, &r))
	require.Equal(t, fetched{OK: true, Items: []string{"a", "b"}}, r.Fetched)
	require.Equal(t, 0, r.Count)
	require.Nil(t, r.Maybe)
	require.Equal(t, `pgflow: step "join": output of dependency "maybe" is absent: dependency skipped`, r.SkipErr)
	require.Equal(t, `pgflow: flow "runner_flow", step "join" reads the output of step "unrelated", which is not among its dependencies: not a dependency of this step`, r.NotDepErr)

	// A JSON null output is not "skipped": it decodes to the zero value.
	out, err = d.run(context.Background(), &taskrun.Env{Meta: meta("join", 0), Input: json.RawMessage(`{"fetch":{"ok":false,"items":null},"count":7,"maybe":null}`)})
	require.Error(t, err) // maybe present → the handler's "expected ErrDependencySkipped" path
	require.Nil(t, out)
	require.Contains(t, err.Error(), "expected ErrDependencySkipped, got <nil>")
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func TestRunDependencyDecodeErrors(t *testing.T) {
	t.Parallel()
	f := NewFlow[runInput]("runner_flow")
	count := Step(f, "count", func(context.Context, *Task[runInput]) (int, error) { return 0, nil })
	Step(f, "use", func(_ context.Context, tk *Task[runInput]) (int, error) { return count.Output(tk) }, DependsOn(count))
	d := frozenStep(t, f, "use")

	_, err := d.run(context.Background(), &taskrun.Env{Meta: meta("use", 0), Input: json.RawMessage(`{"count":"seven"}`)})
	require.ErrorContains(t, err, `pgflow: flow "runner_flow", run 0f8fad5b-d9cb-469f-a165-70867728950e, step "use": cannot decode the output of dependency "count" into int`)
	require.ErrorIs(t, err, ErrPermanent)

	_, err = d.run(context.Background(), &taskrun.Env{Meta: meta("use", 0), Input: json.RawMessage(`[1]`)})
	require.ErrorContains(t, err, `pgflow: flow "runner_flow", run 0f8fad5b-d9cb-469f-a165-70867728950e, step "use": the task input is not an object of dependency outputs`)
	require.ErrorIs(t, err, ErrPermanent)

	// A zero handle and a task outside a run are reported, not panicking.
	var zero StepHandle[int]
	_, err = zero.Output(&Task[runInput]{st: &taskState{env: &taskrun.Env{}}})
	require.ErrorIs(t, err, ErrNotDependency)
	zeroTask := &Task[runInput]{TaskMeta: TaskMeta{StepSlug: "x"}}
	_, err = count.Output(zeroTask)
	require.ErrorIs(t, err, ErrNotDependency)
	_, err = zeroTask.FlowInput(context.Background())
	require.ErrorContains(t, err, "not created by a worker")
	require.Equal(t, "x", zeroTask.Meta().StepSlug)
}

func TestRunKeepsFalsyOutputs(t *testing.T) {
	t.Parallel()
	f := NewFlow[runInput]("runner_flow")
	Step(f, "zero", func(context.Context, *Task[runInput]) (int, error) { return 0, nil })
	Step(f, "false", func(context.Context, *Task[runInput]) (bool, error) { return false, nil })
	Step(f, "empty", func(context.Context, *Task[runInput]) (string, error) { return "", nil })
	Step(f, "nilptr", func(context.Context, *Task[runInput]) (*int, error) { return nil, nil })
	Step(f, "nilslice", func(context.Context, *Task[runInput]) ([]int, error) { return nil, nil })
	Step(f, "emptyslice", func(context.Context, *Task[runInput]) ([]int, error) { return []int{}, nil })
	Step(f, "anynil", func(context.Context, *Task[runInput]) (any, error) { return nil, nil })
	Step(f, "raw", func(context.Context, *Task[runInput]) (json.RawMessage, error) {
		return json.RawMessage(`{"a": [1, 2]}`), nil
	})
	want := map[string]string{
		"zero": `0`, "false": `false`, "empty": `""`, "nilptr": `null`, "nilslice": `null`, "emptyslice": `[]`,
		"anynil": `null`, "raw": `{"a":[1,2]}`,
	}
	for slug, w := range want {
		d := frozenStep(t, f, slug)
		out, err := d.run(context.Background(), &taskrun.Env{Meta: meta(slug, 0), Input: json.RawMessage(`{}`), FlowInput: json.RawMessage(`{}`)})
		require.NoError(t, err, slug)
		require.Equal(t, w, string(out), slug)
	}
}

func TestRunHandlerErrorsAndPanics(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom: upstream 503")
	errInPanic := errors.New("wrapped panic error")
	f := NewFlow[runInput]("runner_flow")
	Step(f, "fails", func(context.Context, *Task[runInput]) (int, error) { return 42, errBoom })
	Step(f, "panics", func(context.Context, *Task[runInput]) (int, error) { panic("index out of range [3]") })
	Step(f, "panics_err", func(context.Context, *Task[runInput]) (int, error) { panic(errInPanic) })
	Step(f, "bad_output", func(context.Context, *Task[runInput]) (chan int, error) { return make(chan int), nil })
	env := func(step string) *taskrun.Env {
		return &taskrun.Env{Meta: meta(step, 0), Input: json.RawMessage(`{}`), FlowInput: json.RawMessage(`{}`)}
	}

	out, err := frozenStep(t, f, "fails").run(context.Background(), env("fails"))
	require.Nil(t, out)
	require.Same(t, errBoom, err) // returned as is: its message goes to fail_task unchanged

	out, err = frozenStep(t, f, "panics").run(context.Background(), env("panics"))
	require.Nil(t, out)
	var pe *PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "panics", pe.Step)
	require.Equal(t, "index out of range [3]", pe.Value)
	require.Contains(t, string(pe.Stack), "task_test.go")
	require.Equal(t, `panic in handler of step "panics" (task 0): index out of range [3]`, err.Error())
	require.Nil(t, pe.Unwrap())

	_, err = frozenStep(t, f, "panics_err").run(context.Background(), env("panics_err"))
	require.ErrorIs(t, err, errInPanic)

	_, err = frozenStep(t, f, "bad_output").run(context.Background(), env("bad_output"))
	require.ErrorContains(t, err, `pgflow: step "bad_output": cannot encode the handler result chan int as JSON`)
}

type item struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

type itemList []item

func TestRunMapSteps(t *testing.T) {
	t.Parallel()
	f := NewFlow[runInput]("runner_flow")
	list := Step(f, "list", func(context.Context, *Task[runInput]) (itemList, error) { return nil, nil })
	Map(f, "price", list, func(ctx context.Context, tk *Task[runInput], it item) (map[string]any, error) {
		in, err := tk.FlowInput(ctx)
		if err != nil {
			return nil, err
		}
		_, depErr := list.Output(tk) // map tasks get one element, not their dependency's output
		if !errors.Is(depErr, ErrNotDependency) {
			return nil, errors.New("expected ErrNotDependency, got " + errString(depErr))
		}
		return map[string]any{"sku": it.SKU, "total": it.Qty * in.Limit, "index": tk.TaskIndex}, nil
	})
	d := frozenStep(t, f, "price")
	require.Equal(t, stepTypeMap, d.stepType)
	require.Equal(t, []string{"list"}, d.depSlugs())

	env := &taskrun.Env{
		Meta:          meta("price", 3),
		Input:         json.RawMessage(`{"sku":"A-1","qty":4}`),
		LoadFlowInput: func(context.Context) (json.RawMessage, error) { return json.RawMessage(`{"limit":10}`), nil },
	}
	out, err := d.run(context.Background(), env)
	require.NoError(t, err)
	require.JSONEq(t, `{"sku":"A-1","total":40,"index":3}`, string(out))

	_, err = d.run(context.Background(), &taskrun.Env{Meta: meta("price", 5), Input: json.RawMessage(`"not an item"`)})
	require.ErrorContains(t, err, `step "price" task 5: cannot decode the map element into pgflow.item`)
	require.ErrorIs(t, err, ErrPermanent)

	// Root map: the flow input is the array, each task gets one element (null elements decode to zero).
	g := NewFlow[[]int]("root_map_flow")
	MapInput(g, "double", func(_ context.Context, tk *Task[[]int], n int) (int, error) { return 2 * n, nil })
	rd := frozenStep(t, g, "double")
	for _, tc := range []struct{ in, want string }{{`21`, `42`}, {`0`, `0`}, {`null`, `0`}, {``, `0`}} {
		out, err := rd.run(context.Background(), &taskrun.Env{Meta: meta("double", 0), Input: json.RawMessage(tc.in)})
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, string(out), tc.in)
	}
}

func TestRunConcurrentOutputReads(t *testing.T) {
	t.Parallel()
	f := NewFlow[runInput]("runner_flow")
	a := Step(f, "a", func(context.Context, *Task[runInput]) (int, error) { return 0, nil })
	b := Step(f, "b", func(context.Context, *Task[runInput]) (string, error) { return "", nil })
	Step(f, "c", func(ctx context.Context, tk *Task[runInput]) (int, error) {
		var wg sync.WaitGroup
		var sum atomic.Int64
		errs := make(chan error, 16)
		for range 8 {
			wg.Go(func() {
				x, err := a.Output(tk)
				if err != nil {
					errs <- err
					return
				}
				s, err := b.Output(tk)
				if err != nil {
					errs <- err
					return
				}
				in, err := tk.FlowInput(ctx)
				if err != nil {
					errs <- err
					return
				}
				sum.Add(int64(x + len(s) + in.Limit))
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			return 0, err
		}
		return int(sum.Load()), nil
	}, DependsOn(a, b))
	d := frozenStep(t, f, "c")
	var loads atomic.Int32
	out, err := d.run(context.Background(), &taskrun.Env{
		Meta:  meta("c", 0),
		Input: json.RawMessage(`{"a":5,"b":"xyz"}`),
		LoadFlowInput: func(context.Context) (json.RawMessage, error) {
			loads.Add(1)
			return json.RawMessage(`{"limit":2}`), nil
		},
	})
	require.NoError(t, err)
	require.Equal(t, `80`, string(out)) // 8 × (5 + 3 + 2)
	require.Equal(t, int32(1), loads.Load())
}

func TestFreezeContract(t *testing.T) {
	t.Parallel()
	f := NewFlow[runInput]("contract_flow", MaxAttempts(4))
	a := Step(f, "a", func(context.Context, *Task[runInput]) (int, error) { return 0, nil }, Timeout(7e9))
	Step(f, "b", func(context.Context, *Task[runInput]) (int, error) { return 0, nil }, DependsOn(a))
	steps, err := f.core().freeze()
	require.NoError(t, err)
	require.Len(t, steps, 2)
	require.Equal(t, 0, steps[0].index)
	require.Equal(t, 1, steps[1].index)
	require.Equal(t, stepTypeSingle, steps[1].stepType)
	require.Equal(t, []string{"a"}, steps[1].depSlugs())
	require.Equal(t, 7, *steps[0].opts.timeout)
	require.Nil(t, steps[0].opts.maxAttempts)
	require.Equal(t, 4, *f.core().opts.maxAttempts)
	require.Nil(t, f.core().step("nope"))

	// The snapshot is a copy: a rejected late step does not appear in it.
	Step(f, "late", func(context.Context, *Task[runInput]) (int, error) { return 0, nil })
	require.Len(t, steps, 2)
	_, err = f.core().freeze()
	require.ErrorIs(t, err, ErrFlowFrozen)
	require.Nil(t, f.core().step("late"))
}
