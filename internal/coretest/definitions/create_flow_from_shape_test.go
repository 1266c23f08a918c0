package definitions_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCreateFlowFromShape(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	const shape = `{
		"steps": [
			{"slug": "fetch", "stepType": "single", "dependencies": [], "whenUnmet": "skip", "whenExhausted": "fail",
			 "requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false},
			 "options": {"maxAttempts": 5, "baseDelay": 2, "timeout": 30, "startDelay": 4}},
			{"slug": "items", "stepType": "map", "dependencies": ["fetch"], "whenUnmet": "fail", "whenExhausted": "skip",
			 "requiredInputPattern": {"defined": true, "value": {"fetch": {"ok": true}}},
			 "forbiddenInputPattern": {"defined": true, "value": {"fetch": {"empty": true}}}},
			{"slug": "report", "stepType": "single", "dependencies": ["items", "fetch"], "whenUnmet": "skip-cascade",
			 "whenExhausted": "skip-cascade",
			 "requiredInputPattern": {"defined": false, "value": {"ignored": true}}, "forbiddenInputPattern": {"defined": false}}
		],
		"options": {"maxAttempts": 7, "baseDelay": 1, "timeout": 15}
	}`
	mustExec(t, pool, `select pgflow._create_flow_from_shape('shaped', $1::jsonb)`, shape)

	var f flowRow
	require.NoError(t, pool.QueryRow(t.Context(),
		`select flow_slug, opt_max_attempts, opt_base_delay, opt_timeout from pgflow.flows where flow_slug = 'shaped'`).
		Scan(&f.Slug, &f.MaxAttempts, &f.BaseDelay, &f.Timeout))
	require.Equal(t, flowRow{"shaped", 7, 1, 15}, f)
	require.True(t, queueExists(t, pool, "shaped"))

	require.Equal(t, stepRow{StepType: "single", StepIndex: 0, MaxAttempts: ptr(5), BaseDelay: ptr(2), Timeout: ptr(30),
		StartDelay: ptr(4), WhenUnmet: "skip", WhenExhausted: "fail"}, getStep(t, pool, "shaped", "fetch"))
	require.Equal(t, stepRow{StepType: "map", StepIndex: 1, DepsCount: 1,
		Required: ptr(`{"fetch": {"ok": true}}`), Forbidden: ptr(`{"fetch": {"empty": true}}`),
		WhenUnmet: "fail", WhenExhausted: "skip"}, getStep(t, pool, "shaped", "items"))
	require.Equal(t, stepRow{StepType: "single", StepIndex: 2, DepsCount: 2,
		WhenUnmet: "skip-cascade", WhenExhausted: "skip-cascade"}, getStep(t, pool, "shaped", "report"),
		"a pattern with defined=false is not stored even if it has a value")

	// The stored shape equals the input shape, except that the stored one drops the undefined pattern's value.
	require.Equal(t, []string{
		`Step at index 2: requiredInputPattern differs '{"value": {"ignored": true}, "defined": false}' vs '{"defined": false}'`,
	}, queryVal[[]string](t, pool, `select pgflow._compare_flow_shapes($1::jsonb, pgflow._get_flow_shape('shaped'))`, shape))
}

func TestCreateFlowFromShapeDefaults(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow._create_flow_from_shape('minimal', '{"steps": [{"slug": "a"}, {"slug": "b", "dependencies": ["a"]}]}')`)

	var f flowRow
	require.NoError(t, pool.QueryRow(t.Context(),
		`select flow_slug, opt_max_attempts, opt_base_delay, opt_timeout from pgflow.flows`).
		Scan(&f.Slug, &f.MaxAttempts, &f.BaseDelay, &f.Timeout))
	require.Equal(t, flowRow{"minimal", 3, 5, 60}, f, "absent flow options get create_flow's defaults")
	require.Equal(t, stepRow{StepType: "single", WhenUnmet: "skip", WhenExhausted: "fail"}, getStep(t, pool, "minimal", "a"))
	require.Equal(t, stepRow{StepType: "single", StepIndex: 1, DepsCount: 1, WhenUnmet: "skip", WhenExhausted: "fail"},
		getStep(t, pool, "minimal", "b"))

	mustExec(t, pool, `select pgflow._create_flow_from_shape('empty_flow', '{"steps": []}')`)
	require.True(t, queueExists(t, pool, "empty_flow"))
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.steps where flow_slug = 'empty_flow'`))
}

func TestCreateFlowFromShapeErrors(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	err := execErr(pool, `select pgflow._create_flow_from_shape('bad', '{"steps": [{"slug": "b", "dependencies": ["a"]}]}')`)
	requirePgError(t, err, "23503", `insert or update on table "deps" violates foreign key constraint "deps_flow_slug_dep_slug_fkey"`)
	err = execErr(pool, `select pgflow._create_flow_from_shape('bad', '{"steps": [{"slug": "m", "stepType": "map"}, {"slug": "n", "stepType": "map", "dependencies": ["m", "x"]}]}')`)
	requirePgError(t, err, "P0001", `Map step "n" can have at most one dependency, but 2 were provided: m, x`)
	err = execErr(pool, `select pgflow._create_flow_from_shape('bad', '{"steps": {"slug": "a"}}')`)
	requirePgError(t, err, "22023", `Flow shape for "bad" has "steps" of type object, expected an array`)
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.flows`))
}
