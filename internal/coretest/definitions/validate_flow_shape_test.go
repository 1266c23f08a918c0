package definitions_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// ensure_flow_compiled refuses every shape the DSL could not produce, with an error naming the bad value, and
// leaves the database as it was (v0.19.0 answered "compiled" for each of these).
func TestEnsureFlowCompiledRefusesInvalidShapes(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	step := func(slug string) string {
		return `{"slug": "` + slug + `", "stepType": "single", "dependencies": [], "whenUnmet": "skip", "whenExhausted": "fail",
			"requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}}`
	}
	cases := []struct {
		name, shape, message string
	}{
		{"null shape", ``, `Flow shape for "bad" is NULL, expected a JSON object with "steps"`},
		{"json string", `"{\"steps\": []}"`, `Flow shape for "bad" is a JSON string, expected an object with "steps": "{\"steps\": []}"`},
		{"no steps", `{}`, `Flow shape for "bad" has "steps" of type missing, expected an array`},
		{"duplicate slug", `{"steps": [` + step("a") + `, ` + step("a") + `]}`, `Flow shape for "bad": step slug "a" appears more than once`},
		{"flow maxAttempts 0", `{"steps": [` + step("a") + `], "options": {"maxAttempts": 0}}`,
			`Flow shape for "bad": flow options has maxAttempts: 0, expected a whole number between 1 and 2147483647`},
		{"step maxAttempts 0", `{"steps": [{"slug": "a", "options": {"maxAttempts": 0}}]}`,
			`Flow shape for "bad": step "a" options has maxAttempts: 0, expected a whole number between 1 and 2147483647`},
		{"fractional timeout", `{"steps": [{"slug": "a", "options": {"timeout": 1.5}}]}`,
			`Flow shape for "bad": step "a" options has timeout: 1.5, expected a whole number between 1 and 2147483647`},
		{"negative delay", `{"steps": [{"slug": "a"}], "options": {"baseDelay": -1}}`,
			`Flow shape for "bad": flow options has baseDelay: -1, expected a whole number between 0 and 2147483647`},
		{"step not object", `{"steps": ["a"]}`, `Flow shape for "bad": step #1 is a JSON string, expected an object`},
		{"slug not string", `{"steps": [{"slug": 7}]}`, `Flow shape for "bad": step #1 has "slug" of type number, expected a string`},
		{"bad dependencies", `{"steps": [{"slug": "a", "dependencies": "b"}]}`,
			`Flow shape for "bad": step "a" has "dependencies" "b", expected an array of step slugs`},
		{"bad step type", `{"steps": [{"slug": "a", "stepType": "loop"}]}`,
			`Flow shape for "bad": step "a" has "stepType" "loop", expected "single" or "map"`},
		{"bad when", `{"steps": [{"slug": "a", "whenExhausted": "retry"}]}`,
			`Flow shape for "bad": step "a" has "whenExhausted" "retry", expected "fail", "skip" or "skip-cascade"`},
	}
	for _, c := range cases {
		var shape any
		if c.shape != "" {
			shape = c.shape
		}
		_, err := pool.Exec(context.Background(), `select pgflow.ensure_flow_compiled('bad', $1::jsonb)`, shape)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%s: expected an error, got %v", c.name, err)
		require.Equal(t, "22023", pgErr.Code, c.name)
		require.Equal(t, c.message, pgErr.Message, c.name)
	}
	require.Zero(t, queryVal[int](t, pool, `select count(*)::int from pgflow.flows`), "nothing was created")

	// A valid shape still compiles.
	r := queryVal[string](t, pool, `select pgflow.ensure_flow_compiled('good', $1::jsonb) ->> 'status'`,
		`{"steps": [`+step("a")+`], "options": {"maxAttempts": 1, "timeout": 5}}`)
	require.Equal(t, "compiled", r)
}
