package definitions_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCompareFlowShapes(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	const stepA = `{"slug": "a", "stepType": "single", "dependencies": [], "whenUnmet": "skip", "whenExhausted": "fail",
		"requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}}`
	const stepB = `{"slug": "b", "stepType": "single", "dependencies": ["a"], "whenUnmet": "skip", "whenExhausted": "fail",
		"requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}}`

	cases := []struct {
		name        string
		local, db   string
		differences []string
	}{
		{"identical", `{"steps": [` + stepA + `,` + stepB + `]}`, `{"steps": [` + stepA + `,` + stepB + `]}`, []string{}},
		{"both empty", `{"steps": []}`, `{"steps": []}`, []string{}},
		{"missing steps key is empty", `{}`, `{"steps": []}`, []string{}},
		{"options are not compared",
			`{"steps": [{"slug": "a", "stepType": "single", "options": {"timeout": 5}}], "options": {"maxAttempts": 1}}`,
			`{"steps": [{"slug": "a", "stepType": "single", "options": {"timeout": 9}}]}`, []string{}},
		{"more local steps", `{"steps": [` + stepA + `,` + stepB + `]}`, `{"steps": [` + stepA + `]}`, []string{
			"Step count differs: 2 vs 1",
			"Step at index 1: missing in second shape (first has 'b')",
		}},
		{"more db steps", `{"steps": []}`, `{"steps": [` + stepA + `]}`, []string{
			"Step count differs: 0 vs 1",
			"Step at index 0: missing in first shape (second has 'a')",
		}},
		{"every field differs",
			`{"steps": [{"slug": "a", "stepType": "single", "dependencies": ["x", "y"], "whenUnmet": "skip", "whenExhausted": "fail",
			  "requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": true, "value": {"k": 1}}}]}`,
			`{"steps": [{"slug": "b", "stepType": "map", "dependencies": ["y"], "whenUnmet": "fail", "whenExhausted": "skip-cascade",
			  "requiredInputPattern": {"defined": true, "value": {"status": "active"}}, "forbiddenInputPattern": {"defined": false}}]}`,
			[]string{
				"Step at index 0: slug differs 'a' vs 'b'",
				"Step at index 0: type differs 'single' vs 'map'",
				"Step at index 0: dependencies differ [x, y] vs [y]",
				"Step at index 0: whenUnmet differs 'skip' vs 'fail'",
				"Step at index 0: whenExhausted differs 'fail' vs 'skip-cascade'",
				`Step at index 0: requiredInputPattern differs '{"defined": false}' vs '{"value": {"status": "active"}, "defined": true}'`,
				`Step at index 0: forbiddenInputPattern differs '{"value": {"k": 1}, "defined": true}' vs '{"defined": false}'`,
			}},
		{"dependency order does not matter",
			`{"steps": [{"slug": "c", "dependencies": ["b", "a"]}]}`,
			`{"steps": [{"slug": "c", "dependencies": ["a", "b"]}]}`,
			[]string{}}, // pattern keys missing on both sides are equal
		{"missing dependencies means none",
			`{"steps": [{"slug": "c"}]}`,
			`{"steps": [{"slug": "c", "dependencies": ["a"]}]}`,
			[]string{"Step at index 0: dependencies differ [] vs [a]"}},
		{"missing text keys never differ",
			`{"steps": [{"slug": "a", "requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}}]}`,
			`{"steps": [` + stepA + `]}`,
			[]string{}},
		{"missing pattern keys do differ and print empty",
			`{"steps": [{"slug": "a", "stepType": "single", "dependencies": [], "whenUnmet": "skip", "whenExhausted": "fail"}]}`,
			`{"steps": [` + stepA + `]}`,
			[]string{
				`Step at index 0: requiredInputPattern differs '' vs '{"defined": false}'`,
				`Step at index 0: forbiddenInputPattern differs '' vs '{"defined": false}'`,
			}},
		{"count and per-index differences together",
			`{"steps": [{"slug": "x"}, {"slug": "y"}]}`,
			`{"steps": [{"slug": "z"}]}`,
			[]string{
				"Step count differs: 2 vs 1",
				"Step at index 0: slug differs 'x' vs 'z'",
				"Step at index 1: missing in second shape (first has 'y')",
			}},
	}
	for _, c := range cases {
		got := queryVal[[]string](t, pool, `select pgflow._compare_flow_shapes($1::jsonb, $2::jsonb)`, c.local, c.db)
		require.Equal(t, c.differences, got, c.name)
	}
}

func TestCompareFlowShapesRejectsNonArraySteps(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	err := execErr(pool, `select pgflow._compare_flow_shapes('{"steps": {"a": 1}}', '{"steps": []}')`)
	requirePgError(t, err, "22023", `Flow shape (first) has "steps" of type object, expected an array`)
	err = execErr(pool, `select pgflow._compare_flow_shapes('{"steps": []}', '{"steps": "x"}')`)
	requirePgError(t, err, "22023", `Flow shape (second) has "steps" of type string, expected an array`)
}
