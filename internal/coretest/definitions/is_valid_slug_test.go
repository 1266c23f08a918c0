package definitions_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIsValidSlug(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	cases := []struct {
		name string
		slug *string
		want bool
	}{
		{"simple", ptr("my_flow"), true},
		{"single underscore", ptr("_"), true},
		{"leading underscore", ptr("_private"), true},
		{"letters and digits", ptr("step2"), true},
		{"capitalised Run is not reserved", ptr("Run"), true},
		{"128 characters", ptr("a" + strings.Repeat("b", 127)), true},
		{"NULL", nil, false},
		{"empty", ptr(""), false},
		{"129 characters", ptr("a" + strings.Repeat("b", 128)), false},
		{"reserved word run", ptr("run"), false},
		{"leading digit", ptr("1step"), false},
		{"dash", ptr("my-flow"), false},
		{"space", ptr("my flow"), false},
		{"dollar", ptr("a$b"), false},
		{"non-ASCII letter", ptr("café"), false},
		{"trailing newline", ptr("abc\n"), false},
	}
	for _, c := range cases {
		got := queryVal[bool](t, pool, `select pgflow.is_valid_slug($1)`, c.slug)
		require.Equal(t, c.want, got, "is_valid_slug(%s)", c.name)
	}
}

func TestSlugConstraints(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	err := execErr(pool, `select pgflow.create_flow('invalid-flow')`)
	requirePgError(t, err, "23514", `new row for relation "flows" violates check constraint "slug_is_valid"`)

	err = execErr(pool, `select pgflow.create_flow('run')`)
	requirePgError(t, err, "23514", `new row for relation "flows" violates check constraint "slug_is_valid"`)

	mustExec(t, pool, `select pgflow.create_flow('valid_flow')`)
	err = execErr(pool, `select pgflow.add_step('valid_flow', 'invalid-step')`)
	requirePgError(t, err, "23514", `new row for relation "steps" violates check constraint "steps_step_slug_check"`)

	err = execErr(pool, `select pgflow.add_step('valid_flow', 'run')`)
	requirePgError(t, err, "23514", `new row for relation "steps" violates check constraint "steps_step_slug_check"`)

	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.steps`))
}

func ptr[T any](v T) *T { return &v }
