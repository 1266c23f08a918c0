package pgflow_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pgflow-go/pgflow"
	"github.com/stretchr/testify/require"
)

// expStep is what a test expects of one step in a shape; expShape renders the expectation in the documented
// format (compact JSON, keys in the order slug, stepType, dependencies, whenUnmet, whenExhausted,
// requiredInputPattern, forbiddenInputPattern, options).
type expStep struct {
	slug, stepType string
	deps           []string // in the expected (sorted) order
	unmet, exh     string
	req, forb      string // JSON of the pattern value; "" = not defined
	opts           string // JSON of the options object; "" = absent
}

func expShape(flowOpts string, steps ...expStep) string {
	parts := make([]string, 0, len(steps))
	for _, s := range steps {
		deps := make([]string, len(s.deps))
		for i, d := range s.deps {
			deps[i] = `"` + d + `"`
		}
		pattern := func(p string) string {
			if p == "" {
				return `{"defined":false}`
			}
			return `{"defined":true,"value":` + p + `}`
		}
		one := `{"slug":"` + s.slug + `","stepType":"` + s.stepType + `","dependencies":[` + strings.Join(deps, ",") +
			`],"whenUnmet":"` + s.unmet + `","whenExhausted":"` + s.exh + `","requiredInputPattern":` + pattern(s.req) +
			`,"forbiddenInputPattern":` + pattern(s.forb)
		if s.opts != "" {
			one += `,"options":` + s.opts
		}
		parts = append(parts, one+"}")
	}
	out := `{"steps":[` + strings.Join(parts, ",") + `]`
	if flowOpts != "" {
		out += `,"options":` + flowOpts
	}
	return out + "}"
}

// single and mapStep build the expectation of a step with default modes and no patterns or options.
func single(slug string, deps ...string) expStep {
	if deps == nil {
		deps = []string{}
	}
	return expStep{slug: slug, stepType: "single", deps: deps, unmet: "skip", exh: "fail"}
}

func mapStep(slug string, deps ...string) expStep {
	s := single(slug, deps...)
	s.stepType = "map"
	return s
}

func (s expStep) with(mod func(*expStep)) expStep { mod(&s); return s }

type reversedKeys struct {
	Zeta  int    `json:"zeta"`
	Alpha string `json:"alpha"`
}

// shapeCase is a flow definition and the shape expected for it.
type shapeCase struct {
	name  string
	build func() pgflow.AnyFlow
	want  string
}

func shapeCases() []shapeCase {
	return []shapeCase{
		{
			name:  "empty flow",
			build: func() pgflow.AnyFlow { return pgflow.NewFlow[orderInput]("shape_empty") },
			want:  `{"steps":[]}`,
		},
		{
			name: "one root step",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[orderInput]("shape_one")
				pgflow.Step(f, "only", intHandler)
				return f
			},
			want: expShape("", single("only")),
		},
		{
			name: "chain with flow options",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[orderInput]("shape_chain", pgflow.MaxAttempts(3), pgflow.BaseDelay(time.Second), pgflow.Timeout(30*time.Second))
				a := pgflow.Step(f, "a", intHandler)
				b := pgflow.Step(f, "b", intHandler, pgflow.DependsOn(a))
				pgflow.Step(f, "c", intHandler, pgflow.DependsOn(b))
				return f
			},
			want: expShape(`{"maxAttempts":3,"baseDelay":1,"timeout":30}`, single("a"), single("b", "a"), single("c", "b")),
		},
		{
			name: "partial flow options",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[orderInput]("shape_partial", pgflow.Timeout(10*time.Second))
				pgflow.Step(f, "s", intHandler)
				return f
			},
			want: expShape(`{"timeout":10}`, single("s")),
		},
		{
			name: "diamond with dependencies sorted",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[orderInput]("shape_diamond")
				root := pgflow.Step(f, "root", pageHandler)
				zeta := pgflow.Step(f, "zeta", intHandler, pgflow.DependsOn(root))
				alpha := pgflow.Step(f, "alpha", strHandler, pgflow.DependsOn(root))
				mid := pgflow.Step(f, "Mid", intHandler, pgflow.DependsOn(root))
				pgflow.Step(f, "join", intHandler, pgflow.DependsOn(zeta, alpha), pgflow.DependsOn(mid))
				return f
			},
			// Sorted by byte value: upper case before lower case.
			want: expShape("", single("root"), single("zeta", "root"), single("alpha", "root"), single("Mid", "root"), single("join", "Mid", "alpha", "zeta")),
		},
		{
			name: "maps over a step and over a map",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[orderInput]("shape_maps")
				list := pgflow.Step(f, "list", listHandler)
				doubled := pgflow.Map(f, "doubled", list, itemHandler)
				squared := pgflow.Map(f, "squared", doubled, func(_ context.Context, _ *pgflow.Task[orderInput], n int) (int, error) { return n * n, nil })
				pgflow.Step(f, "total", intHandler, pgflow.DependsOn(squared, list))
				return f
			},
			want: expShape("", single("list"), mapStep("doubled", "list"), mapStep("squared", "doubled"), single("total", "list", "squared")),
		},
		{
			name: "root map over the flow input",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[[]int]("shape_root_map")
				m := pgflow.MapInput(f, "double", numsItem, pgflow.MaxAttempts(2))
				pgflow.Step(f, "sum", func(context.Context, *pgflow.Task[[]int]) (int, error) { return 0, nil }, pgflow.DependsOn(m))
				return f
			},
			want: expShape("", mapStep("double").with(func(s *expStep) { s.opts = `{"maxAttempts":2}` }), single("sum", "double")),
		},
		{
			name: "conditions and modes",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[orderInput]("shape_cond")
				fetch := pgflow.Step(f, "fetch", pageHandler,
					pgflow.If(map[string]any{"id": 7, "email": "a<b>&c@d"}), pgflow.WhenUnmet(pgflow.SkipCascade), pgflow.WhenExhausted(pgflow.Skip))
				pgflow.Step(f, "on_ok", intHandler, pgflow.DependsOn(fetch),
					pgflow.If(map[string]any{"fetch": map[string]any{"ok": true, "items": []string{"x"}}}),
					pgflow.IfNot(map[string]any{"fetch": map[string]any{"items": []string{}}}),
					pgflow.WhenUnmet(pgflow.Fail), pgflow.WhenExhausted(pgflow.SkipCascade))
				pgflow.Step(f, "on_skip", intHandler, pgflow.DependsOn(fetch), pgflow.IfNot(map[string]any{"fetch": map[string]any{}}))
				pgflow.Step(f, "struct_pattern", intHandler, pgflow.If(reversedKeys{Zeta: 1, Alpha: "é'\\\""}))
				pgflow.Step(f, "raw_pattern", intHandler, pgflow.IfNot(json.RawMessage(` { "n" : 1.50 , "big": 12345678901234567890, "neg": -0.0e1 } `)))
				pgflow.Step(f, "exhaust_only", intHandler, pgflow.WhenExhausted(pgflow.Fail))
				return f
			},
			want: expShape("",
				single("fetch").with(func(s *expStep) {
					s.req = `{"email":"a<b>&c@d","id":7}`
					s.unmet, s.exh = "skip-cascade", "skip"
				}),
				single("on_ok", "fetch").with(func(s *expStep) {
					s.req = `{"fetch":{"items":["x"],"ok":true}}`
					s.forb = `{"fetch":{"items":[]}}`
					s.unmet, s.exh = "fail", "skip-cascade"
				}),
				single("on_skip", "fetch").with(func(s *expStep) { s.forb = `{"fetch":{}}` }),
				single("struct_pattern").with(func(s *expStep) { s.req = `{"alpha":"é'\\\"","zeta":1}` }),
				single("raw_pattern").with(func(s *expStep) { s.forb = `{"big":12345678901234567890,"n":1.50,"neg":-0.0e1}` }),
				single("exhaust_only").with(func(s *expStep) { s.exh = "fail" }),
			),
		},
		{
			name: "step options incl. zero start delay",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[orderInput]("shape_opts", pgflow.BaseDelay(2*time.Second))
				a := pgflow.Step(f, "a", intHandler, pgflow.MaxAttempts(5), pgflow.BaseDelay(10*time.Second), pgflow.Timeout(120*time.Second), pgflow.StartDelay(15*time.Minute))
				b := pgflow.Step(f, "b", listHandler, pgflow.DependsOn(a), pgflow.StartDelay(0))
				pgflow.Map(f, "c", b, itemHandler, pgflow.Timeout(3*time.Second), pgflow.WhenExhausted(pgflow.Skip))
				return f
			},
			want: expShape(`{"baseDelay":2}`,
				single("a").with(func(s *expStep) { s.opts = `{"maxAttempts":5,"baseDelay":10,"timeout":120,"startDelay":900}` }),
				single("b", "a").with(func(s *expStep) { s.opts = `{"startDelay":0}` }),
				mapStep("c", "b").with(func(s *expStep) { s.opts = `{"timeout":3}`; s.exh = "skip" }),
			),
		},
		{
			name: "wide fan-in",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[orderInput]("shape_fan")
				var deps []pgflow.AnyStep
				for _, s := range []string{"s3", "s1", "s10", "s2", "S0", "_x"} {
					deps = append(deps, pgflow.Step(f, s, intHandler))
				}
				pgflow.Step(f, "all", intHandler, pgflow.DependsOn(deps...))
				return f
			},
			want: expShape("", single("s3"), single("s1"), single("s10"), single("s2"), single("S0"), single("_x"),
				single("all", "S0", "_x", "s1", "s10", "s2", "s3")),
		},
	}
}

func TestShapeExactJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range shapeCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := tc.build()
			require.NoError(t, f.Err())
			got, err := f.Shape()
			require.NoError(t, err)
			require.True(t, json.Valid(got))
			require.Equal(t, tc.want, string(got))
			again, err := f.Shape()
			require.NoError(t, err)
			require.Equal(t, string(got), string(again))
		})
	}
}
