package definitions_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

func flowShape(t *testing.T, pool *pgxpool.Pool, flow string) string {
	t.Helper()
	return queryVal[string](t, pool, `select pgflow._get_flow_shape($1)::text`, flow)
}

func TestGetFlowShape(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('test_flow', 9, 9, 9)`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'root', max_attempts => 5)`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'zeta')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'alpha', ARRAY['zeta', 'root'],
		required_input_pattern => '{"root": {"ok": true}}', when_unmet => 'skip-cascade', when_exhausted => 'skip')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'items', ARRAY['alpha'], step_type => 'map',
		forbidden_input_pattern => '{"alpha": null}', when_unmet => 'fail', start_delay => 3)`)

	require.JSONEq(t, `{"steps": [
		{"slug": "root", "stepType": "single", "dependencies": [], "whenUnmet": "skip", "whenExhausted": "fail",
		 "requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}},
		{"slug": "zeta", "stepType": "single", "dependencies": [], "whenUnmet": "skip", "whenExhausted": "fail",
		 "requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}},
		{"slug": "alpha", "stepType": "single", "dependencies": ["root", "zeta"], "whenUnmet": "skip-cascade",
		 "whenExhausted": "skip", "requiredInputPattern": {"defined": true, "value": {"root": {"ok": true}}},
		 "forbiddenInputPattern": {"defined": false}},
		{"slug": "items", "stepType": "map", "dependencies": ["alpha"], "whenUnmet": "fail", "whenExhausted": "fail",
		 "requiredInputPattern": {"defined": false},
		 "forbiddenInputPattern": {"defined": true, "value": {"alpha": null}}}
	]}`, flowShape(t, pool, "test_flow"), "steps in step_index order, sorted dependencies, no options")
}

func TestGetFlowShapeEmpty(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('no_steps')`)
	require.JSONEq(t, `{"steps": []}`, flowShape(t, pool, "no_steps"))
	require.JSONEq(t, `{"steps": []}`, flowShape(t, pool, "unknown_flow"))
}

func TestGetFlowShapeDependencyOrderIsCodePoint(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('test_flow')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'b')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'B')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', '_a')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'last', ARRAY['b', '_a', 'B'])`)
	got := queryVal[[]string](t, pool,
		`select array(select jsonb_array_elements_text(pgflow._get_flow_shape('test_flow') -> 'steps' -> 3 -> 'dependencies'))`)
	require.Equal(t, []string{"B", "_a", "b"}, got, "the order a JavaScript or Go sort of the slugs gives")
}
