package pgflow_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-go/pgflow"
	"github.com/stretchr/testify/require"
)

type orderInput struct {
	ID    int    `json:"id"`
	Email string `json:"email"`
}

type page struct {
	OK    bool     `json:"ok"`
	Items []string `json:"items"`
}

// Handlers used to build test flows; they are never run by these tests.
func pageHandler(context.Context, *pgflow.Task[orderInput]) (page, error)     { return page{}, nil }
func intHandler(context.Context, *pgflow.Task[orderInput]) (int, error)       { return 0, nil }
func strHandler(context.Context, *pgflow.Task[orderInput]) (string, error)    { return "", nil }
func listHandler(context.Context, *pgflow.Task[orderInput]) ([]int, error)    { return nil, nil }
func itemHandler(context.Context, *pgflow.Task[orderInput], int) (int, error) { return 0, nil }
func numsItem(context.Context, *pgflow.Task[[]int], int) (int, error)         { return 0, nil }

// defErrors flattens the errors.Join tree returned by Flow.Err into its *DefinitionError leaves.
func defErrors(t *testing.T, err error) []*pgflow.DefinitionError {
	t.Helper()
	var out []*pgflow.DefinitionError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if de, ok := e.(*pgflow.DefinitionError); ok {
			out = append(out, de)
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		t.Fatalf("unexpected error type %T in definition errors: %v", e, e)
	}
	walk(err)
	return out
}

// requireOneDefErr requires that err holds exactly one *DefinitionError, of the given kind, for the given flow
// and step, whose message names every string in mentions.
func requireOneDefErr(t *testing.T, err error, kind error, flow, step string, mentions ...string) *pgflow.DefinitionError {
	t.Helper()
	require.Error(t, err)
	des := defErrors(t, err)
	require.Len(t, des, 1, "errors: %v", err)
	de := des[0]
	require.ErrorIs(t, de, kind)
	require.ErrorIs(t, err, kind)
	require.Equal(t, flow, de.Flow)
	require.Equal(t, step, de.Step)
	msg := de.Error()
	require.Contains(t, msg, `flow "`+flow+`"`)
	if step != "" {
		require.Contains(t, msg, `step "`+step+`"`)
	} else {
		require.NotContains(t, msg, "step \"")
	}
	for _, m := range mentions {
		require.Contains(t, msg, m)
	}
	return de
}

func TestValidFlowHasNoErrors(t *testing.T) {
	t.Parallel()
	f := pgflow.NewFlow[orderInput]("process_order", pgflow.MaxAttempts(3), pgflow.BaseDelay(time.Second), pgflow.Timeout(30*time.Second))
	fetch := pgflow.Step(f, "fetch", pageHandler)
	list := pgflow.Step(f, "list", listHandler, pgflow.DependsOn(fetch), pgflow.StartDelay(0), pgflow.WhenExhausted(pgflow.SkipCascade))
	each := pgflow.Map(f, "each", list, itemHandler, pgflow.If(map[string]any{"list": []int{1}}), pgflow.WhenUnmet(pgflow.Fail))
	pgflow.Step(f, "sum", intHandler, pgflow.DependsOn(each, fetch), pgflow.IfNot(map[string]any{"fetch": map[string]any{"ok": false}}))
	require.NoError(t, f.Err())
	require.Equal(t, "process_order", f.Slug())
	require.Equal(t, "fetch", fetch.Slug())
	require.Equal(t, "each", each.Slug())
	var zero pgflow.StepHandle[int]
	require.Equal(t, "", zero.Slug())
}

func TestFlowSlugValidation(t *testing.T) {
	t.Parallel()
	long48 := strings.Repeat("a", 48)
	cases := []struct{ slug, mention string }{
		{"", "slug is empty"},
		{long48, `"` + long48 + `" is 48 characters long`},
		{"run", `"run" is a reserved word`},
		{"1flow", `"1flow" starts with a digit`},
		{"my-flow", `"my-flow" may contain only`},
		{"flow.x", `"flow.x" may contain only`},
		{"caf\u00e9", "\"caf\u00e9\" may contain only"},
		{" flow", `" flow" may contain only`},
	}
	for _, tc := range cases {
		f := pgflow.NewFlow[int](tc.slug)
		requireOneDefErr(t, f.Err(), pgflow.ErrInvalidSlug, tc.slug, "", tc.mention)
	}
	for _, ok := range []string{"a", "_", "Run", "run_", "_1", "camelCase", "snake_case_2", strings.Repeat("b", 47)} {
		require.NoError(t, pgflow.NewFlow[int](ok).Err(), "slug %q", ok)
	}
}

func TestStepSlugValidation(t *testing.T) {
	t.Parallel()
	long129 := strings.Repeat("s", 129)
	cases := []struct{ slug, mention string }{
		{"", "slug is empty"},
		{long129, "129 characters long; at most 128"},
		{"run", `"run" is a reserved word`},
		{"9lives", `"9lives" starts with a digit`},
		{"step-one", `"step-one" may contain only`},
	}
	for _, tc := range cases {
		f := pgflow.NewFlow[orderInput]("flow_a")
		pgflow.Step(f, tc.slug, intHandler)
		requireOneDefErr(t, f.Err(), pgflow.ErrInvalidSlug, "flow_a", tc.slug, tc.mention)
	}
	f := pgflow.NewFlow[orderInput]("flow_b")
	pgflow.Step(f, strings.Repeat("s", 128), intHandler)
	pgflow.Step(f, "Run", intHandler)
	pgflow.Step(f, "_", intHandler)
	require.NoError(t, f.Err())
}

func TestDuplicateStep(t *testing.T) {
	t.Parallel()
	f := pgflow.NewFlow[orderInput]("dup_flow")
	pgflow.Step(f, "a", intHandler)
	pgflow.Step(f, "b", intHandler)
	second := pgflow.Step(f, "a", strHandler)
	requireOneDefErr(t, f.Err(), pgflow.ErrDuplicateStep, "dup_flow", "a", `step "a" is already defined (step index 0)`)
	// The duplicate's handle is broken: using it as a dependency adds no second error and no step.
	pgflow.Step(f, "c", intHandler, pgflow.DependsOn(second))
	require.Len(t, defErrors(t, f.Err()), 1)
}

func TestUnknownDependency(t *testing.T) {
	t.Parallel()
	other := pgflow.NewFlow[orderInput]("other_flow")
	foreign := pgflow.Step(other, "foreign", intHandler)
	require.NoError(t, other.Err())

	f := pgflow.NewFlow[orderInput]("main_flow")
	pgflow.Step(f, "uses_foreign", intHandler, pgflow.DependsOn(foreign))
	requireOneDefErr(t, f.Err(), pgflow.ErrUnknownDependency, "main_flow", "uses_foreign", `step "foreign" belongs to flow "other_flow"`)

	f2 := pgflow.NewFlow[orderInput]("main_flow2")
	var zero pgflow.StepHandle[int]
	pgflow.Step(f2, "uses_zero", intHandler, pgflow.DependsOn(zero))
	requireOneDefErr(t, f2.Err(), pgflow.ErrUnknownDependency, "main_flow2", "uses_zero", "nil or zero")

	f3 := pgflow.NewFlow[orderInput]("main_flow3")
	pgflow.Step(f3, "uses_nil", intHandler, pgflow.DependsOn(nil))
	requireOneDefErr(t, f3.Err(), pgflow.ErrUnknownDependency, "main_flow3", "uses_nil", "nil or zero")

	f4 := pgflow.NewFlow[orderInput]("main_flow4")
	var zeroList pgflow.StepHandle[[]int]
	pgflow.Map(f4, "map_zero", zeroList, itemHandler)
	requireOneDefErr(t, f4.Err(), pgflow.ErrUnknownDependency, "main_flow4", "map_zero", "Map over")

	f5 := pgflow.NewFlow[orderInput]("main_flow5")
	foreignList := pgflow.Step(other, "foreign_list", listHandler)
	pgflow.Map(f5, "map_foreign", foreignList, itemHandler)
	requireOneDefErr(t, f5.Err(), pgflow.ErrUnknownDependency, "main_flow5", "map_foreign", `"foreign_list" belongs to flow "other_flow"`)
}

func TestDuplicateDependency(t *testing.T) {
	t.Parallel()
	f := pgflow.NewFlow[orderInput]("dd_flow")
	a := pgflow.Step(f, "a", intHandler)
	pgflow.Step(f, "b", intHandler, pgflow.DependsOn(a), pgflow.DependsOn(a))
	requireOneDefErr(t, f.Err(), pgflow.ErrInvalidOption, "dd_flow", "b", `step "a" is listed more than once`)
}

func TestMapDependencies(t *testing.T) {
	t.Parallel()
	f := pgflow.NewFlow[orderInput]("map_flow")
	list := pgflow.Step(f, "list", listHandler)
	other := pgflow.Step(f, "other", intHandler)
	pgflow.Map(f, "two_deps", list, itemHandler, pgflow.DependsOn(other))
	requireOneDefErr(t, f.Err(), pgflow.ErrMapDependencies, "map_flow", "two_deps", `map over "list" cannot also depend on "other"`)

	// Repeating the array dependency is allowed.
	g := pgflow.NewFlow[orderInput]("map_flow2")
	list2 := pgflow.Step(g, "list", listHandler)
	pgflow.Map(g, "same_dep", list2, itemHandler, pgflow.DependsOn(list2))
	require.NoError(t, g.Err())

	h := pgflow.NewFlow[[]int]("map_input_flow")
	root := pgflow.Step(h, "root", func(context.Context, *pgflow.Task[[]int]) (int, error) { return 0, nil })
	pgflow.MapInput(h, "doubled", numsItem, pgflow.DependsOn(root))
	requireOneDefErr(t, h.Err(), pgflow.ErrMapDependencies, "map_input_flow", "doubled", `DependsOn("root")`)
}

func TestOptionRanges(t *testing.T) {
	t.Parallel()
	cases := []struct {
		opt     pgflow.StepOption
		mention string
	}{
		{pgflow.MaxAttempts(0), "MaxAttempts(0): must be between 1 and 2147483647"},
		{pgflow.MaxAttempts(-3), "MaxAttempts(-3)"},
		{pgflow.MaxAttempts(math.MaxInt32 + 1), "MaxAttempts(2147483648)"},
		{pgflow.BaseDelay(0), "BaseDelay(0s): must be between 1s and"},
		{pgflow.BaseDelay(1500 * time.Millisecond), "BaseDelay(1.5s): must be a whole number of seconds"},
		{pgflow.Timeout(2 * time.Second), "Timeout(2s): must be between 3s and"},
		{pgflow.Timeout(time.Duration(math.MaxInt32+1) * time.Second), "Timeout(596523h14m8s)"},
		{pgflow.StartDelay(-time.Second), "StartDelay(-1s): must be between 0s and"},
		{pgflow.StartDelay(time.Millisecond), "StartDelay(1ms): must be a whole number of seconds"},
	}
	for i, tc := range cases {
		f := pgflow.NewFlow[orderInput]("range_flow")
		pgflow.Step(f, "s", intHandler, tc.opt)
		requireOneDefErr(t, f.Err(), pgflow.ErrOptionOutOfRange, "range_flow", "s", tc.mention)

		if i < 7 { // flow-level options
			g := pgflow.NewFlow[orderInput]("range_flow_level", tc.opt.(pgflow.FlowOption))
			requireOneDefErr(t, g.Err(), pgflow.ErrOptionOutOfRange, "range_flow_level", "", tc.mention)
		}
	}
	// Boundaries are accepted.
	f := pgflow.NewFlow[orderInput]("bounds", pgflow.MaxAttempts(1), pgflow.BaseDelay(time.Second), pgflow.Timeout(3*time.Second))
	pgflow.Step(f, "s", intHandler, pgflow.MaxAttempts(math.MaxInt32), pgflow.BaseDelay(time.Duration(math.MaxInt32)*time.Second), pgflow.Timeout(3*time.Second), pgflow.StartDelay(0))
	require.NoError(t, f.Err())
}

func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	flowCases := []struct {
		opt     pgflow.Option
		mention string
	}{
		{pgflow.Option{}, "unknown option at position 1 (zero Option value)"},
	}
	for _, tc := range flowCases {
		f := pgflow.NewFlow[orderInput]("opt_flow", tc.opt)
		requireOneDefErr(t, f.Err(), pgflow.ErrInvalidOption, "opt_flow", "", tc.mention)
	}
	f := pgflow.NewFlow[orderInput]("twice_flow", pgflow.MaxAttempts(2), pgflow.MaxAttempts(3))
	requireOneDefErr(t, f.Err(), pgflow.ErrInvalidOption, "twice_flow", "", "MaxAttempts given more than once")

	stepCases := []struct {
		opts    []pgflow.StepOption
		mention string
	}{
		{[]pgflow.StepOption{pgflow.Timeout(5 * time.Second), pgflow.Option{}}, "unknown option at position 2"},
		{[]pgflow.StepOption{pgflow.StartDelay(0), pgflow.StartDelay(time.Second)}, "StartDelay given more than once"},
		{[]pgflow.StepOption{pgflow.WhenUnmet(pgflow.Skip)}, `WhenUnmet("skip") requires If or IfNot`},
		{[]pgflow.StepOption{pgflow.If(map[string]any{"x": 1}), pgflow.WhenUnmet("bogus")}, `WhenUnmet("bogus"): mode must be "fail", "skip" or "skip-cascade"`},
		{[]pgflow.StepOption{pgflow.WhenExhausted("")}, `WhenExhausted(""): mode must be`},
		{[]pgflow.StepOption{pgflow.If([]int{1, 2})}, "If([1,2]): pattern must be a JSON object"},
		{[]pgflow.StepOption{pgflow.IfNot("text")}, `IfNot("text"): pattern must be a JSON object`},
		{[]pgflow.StepOption{pgflow.If(nil)}, "If(nil): pattern must be a JSON object"},
		{[]pgflow.StepOption{pgflow.If(map[string]any{"c": make(chan int)})}, "If(map[string]interface {}): pattern does not marshal to JSON"},
		{[]pgflow.StepOption{pgflow.IfNot(map[string]any{"a\x00b": 1})}, `pattern contains \u0000`},
		{[]pgflow.StepOption{pgflow.If(map[string]any{"a": "x\x00"})}, `pattern contains \u0000`},
		{[]pgflow.StepOption{pgflow.DependsOn()}, "DependsOn(): needs at least one step"},
	}
	for _, tc := range stepCases {
		f := pgflow.NewFlow[orderInput]("step_opt_flow")
		pgflow.Step(f, "s", intHandler, tc.opts...)
		requireOneDefErr(t, f.Err(), pgflow.ErrInvalidOption, "step_opt_flow", "s", tc.mention)
	}
}

func TestConditionPatternKeysMustBeDependencies(t *testing.T) {
	t.Parallel()
	f := pgflow.NewFlow[orderInput]("cond_flow")
	fetch := pgflow.Step(f, "fetch", pageHandler)
	pgflow.Step(f, "typo", intHandler, pgflow.DependsOn(fetch), pgflow.If(map[string]any{"fecth": map[string]any{"ok": true}}))
	requireOneDefErr(t, f.Err(), pgflow.ErrUnknownDependency, "cond_flow", "typo", `If({"fecth":{"ok":true}}): key "fecth" is not a dependency`, "[fetch]")

	// Root steps match the flow input: any key is fine.
	g := pgflow.NewFlow[orderInput]("cond_root")
	pgflow.Step(g, "root", intHandler, pgflow.If(map[string]any{"email": "a@b"}), pgflow.IfNot(map[string]any{"id": 0}))
	require.NoError(t, g.Err())

	h := pgflow.NewFlow[[]int]("cond_root_map")
	pgflow.MapInput(h, "m", numsItem, pgflow.IfNot(map[string]any{"x": 1}))
	requireOneDefErr(t, h.Err(), pgflow.ErrInvalidOption, "cond_root_map", "m", `IfNot({"x":1}): a map over the flow input cannot have a condition`)
}

func TestNilHandler(t *testing.T) {
	t.Parallel()
	f := pgflow.NewFlow[orderInput]("nil_flow")
	pgflow.Step[orderInput, int](f, "s", nil)
	requireOneDefErr(t, f.Err(), pgflow.ErrInvalidHandler, "nil_flow", "s", "handler is nil")
}

func TestNilFlowPanics(t *testing.T) {
	t.Parallel()
	require.PanicsWithValue(t, "pgflow: Step called with a nil or zero *Flow; create flows with NewFlow", func() {
		pgflow.Step(nil, "s", intHandler)
	})
}

func TestErrorsAccumulateAndShapeRefuses(t *testing.T) {
	t.Parallel()
	f := pgflow.NewFlow[orderInput]("bad-flow", pgflow.MaxAttempts(0))
	a := pgflow.Step(f, "a", intHandler, pgflow.Timeout(time.Second))
	pgflow.Step(f, "b", intHandler, pgflow.DependsOn(a)) // a is broken: no extra error
	pgflow.Step(f, "a b", intHandler)
	des := defErrors(t, f.Err())
	require.Len(t, des, 4)
	require.ErrorIs(t, des[0], pgflow.ErrInvalidSlug)
	require.ErrorIs(t, des[1], pgflow.ErrOptionOutOfRange)
	require.Equal(t, "", des[1].Step)
	require.ErrorIs(t, des[2], pgflow.ErrOptionOutOfRange)
	require.Equal(t, "a", des[2].Step)
	require.ErrorIs(t, des[3], pgflow.ErrInvalidSlug)
	require.Equal(t, "a b", des[3].Step)

	shape, err := f.Shape()
	require.Nil(t, shape)
	require.Equal(t, f.Err().Error(), err.Error())
	sql, err := f.CompileSQL()
	require.Nil(t, sql)
	require.ErrorIs(t, err, pgflow.ErrInvalidSlug)
}

func TestDefinitionErrorMessage(t *testing.T) {
	t.Parallel()
	f := pgflow.NewFlow[orderInput]("orders")
	pgflow.Step(f, "fetch", intHandler, pgflow.MaxAttempts(0))
	require.EqualError(t, f.Err(), `pgflow: flow "orders", step "fetch": option out of range: MaxAttempts(0): must be between 1 and 2147483647`)
	g := pgflow.NewFlow[orderInput]("")
	require.EqualError(t, g.Err(), `pgflow: flow "": invalid slug: slug is empty`)
}

func TestFreezeOnUse(t *testing.T) {
	t.Parallel()
	uses := map[string]func(f *pgflow.Flow[orderInput]) error{
		"Shape":      func(f *pgflow.Flow[orderInput]) error { _, err := f.Shape(); return err },
		"CompileSQL": func(f *pgflow.Flow[orderInput]) error { _, err := f.CompileSQL(); return err },
	}
	for name, use := range uses {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := pgflow.NewFlow[orderInput]("frozen_flow")
			a := pgflow.Step(f, "a", intHandler)
			require.NoError(t, use(f))
			before, err := f.Shape()
			require.NoError(t, err)

			late := pgflow.Step(f, "late", intHandler, pgflow.DependsOn(a))
			requireOneDefErr(t, f.Err(), pgflow.ErrFlowFrozen, "frozen_flow", "late", `step "late" cannot be added: the flow was already used`)
			require.ErrorIs(t, use(f), pgflow.ErrFlowFrozen)
			_, err = f.Shape()
			require.ErrorIs(t, err, pgflow.ErrFlowFrozen)
			require.NotContains(t, string(before), "late")

			// A step depending on the rejected one records nothing more.
			pgflow.Step(f, "later", intHandler, pgflow.DependsOn(late))
			require.Len(t, defErrors(t, f.Err()), 2)
		})
	}
}

func TestAnyFlowHoldsFlowsOfDifferentInputs(t *testing.T) {
	t.Parallel()
	a := pgflow.NewFlow[orderInput]("flow_one")
	pgflow.Step(a, "s", intHandler)
	b := pgflow.NewFlow[[]int]("flow_two")
	pgflow.MapInput(b, "m", numsItem)
	flows := []pgflow.AnyFlow{a, b}
	var slugs []string
	for _, f := range flows {
		require.NoError(t, f.Err())
		_, err := f.Shape()
		require.NoError(t, err)
		slugs = append(slugs, f.Slug())
	}
	require.Equal(t, []string{"flow_one", "flow_two"}, slugs)
}

func TestDefinitionErrorUnwrap(t *testing.T) {
	t.Parallel()
	de := &pgflow.DefinitionError{Flow: "f", Step: "s", Err: pgflow.ErrDuplicateStep, Detail: "d"}
	require.True(t, errors.Is(de, pgflow.ErrDuplicateStep))
	require.False(t, errors.Is(de, pgflow.ErrInvalidSlug))
	require.Equal(t, `pgflow: flow "f", step "s": duplicate step: d`, de.Error())
}

// QueuePerStep names each step's queue <flow>__<step>, so its slugs must keep those names unambiguous; the same
// rules as pgflow._check_step_mode_slug, reported when the flow is defined.
func TestQueuePerStepSlugRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ slug, mention string }{
		{"_orders", `"_orders" starts or ends with '_'`},
		{"orders_", `"orders_" starts or ends with '_'`},
		{"my__orders", `"my__orders" contains "__"`},
		{strings.Repeat("o", 41), "with QueuePerStep a flow slug may have at most 40"},
	} {
		f := pgflow.NewFlow[int](tc.slug, pgflow.QueuePerStep())
		requireOneDefErr(t, f.Err(), pgflow.ErrInvalidSlug, tc.slug, "", tc.mention)
	}
	// The same slugs are fine for a flow with one queue.
	require.NoError(t, pgflow.NewFlow[int]("my__orders").Err())

	f := pgflow.NewFlow[orderInput]("orders", pgflow.QueuePerStep())
	pgflow.Step(f, "fetch", intHandler)
	pgflow.Step(f, "a__b", intHandler)
	requireOneDefErr(t, f.Err(), pgflow.ErrInvalidSlug, "orders", "a__b", `contains "__"`)
	g := pgflow.NewFlow[orderInput]("orders", pgflow.QueuePerStep())
	pgflow.Step(g, "fetch", intHandler)
	pgflow.Step(g, "Fetch", intHandler)
	requireOneDefErr(t, g.Err(), pgflow.ErrDuplicateStep, "orders", "Fetch",
		`differs only in letter case from step "fetch"; with QueuePerStep both would use queue "orders__fetch"`)
}
