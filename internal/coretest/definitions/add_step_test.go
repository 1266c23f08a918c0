package definitions_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

type stepRow struct {
	StepType      string
	StepIndex     int
	DepsCount     int
	MaxAttempts   *int
	BaseDelay     *int
	Timeout       *int
	StartDelay    *int
	Required      *string
	Forbidden     *string
	WhenUnmet     string
	WhenExhausted string
}

func getStep(t *testing.T, pool *pgxpool.Pool, flow, step string) stepRow {
	t.Helper()
	var s stepRow
	require.NoError(t, pool.QueryRow(t.Context(), `
		select step_type, step_index, deps_count, opt_max_attempts, opt_base_delay, opt_timeout, opt_start_delay,
		       required_input_pattern::text, forbidden_input_pattern::text, when_unmet, when_exhausted
		from pgflow.steps where flow_slug = $1 and step_slug = $2`, flow, step).
		Scan(&s.StepType, &s.StepIndex, &s.DepsCount, &s.MaxAttempts, &s.BaseDelay, &s.Timeout, &s.StartDelay,
			&s.Required, &s.Forbidden, &s.WhenUnmet, &s.WhenExhausted))
	return s
}

func deps(t *testing.T, pool *pgxpool.Pool, flow, step string) []string {
	t.Helper()
	return queryVal[[]string](t, pool, `
		select coalesce(array_agg(dep_slug order by dep_slug), '{}') from pgflow.deps
		where flow_slug = $1 and step_slug = $2`, flow, step)
}

func TestAddStepBasics(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('test_flow')`)

	var slug, stepType string
	var index, depsCount int
	require.NoError(t, pool.QueryRow(t.Context(),
		`select step_slug, step_type, step_index, deps_count from pgflow.add_step('test_flow', 'first')`).
		Scan(&slug, &stepType, &index, &depsCount))
	require.Equal(t, "first", slug)
	require.Equal(t, "single", stepType)
	require.Equal(t, 0, index)
	require.Equal(t, 0, depsCount)

	mustExec(t, pool, `select pgflow.add_step('test_flow', 'second', ARRAY['first'])`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'third', ARRAY['second', 'first'])`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'fourth', deps_slugs => NULL)`)

	require.Equal(t, stepRow{StepType: "single", StepIndex: 0, WhenUnmet: "skip", WhenExhausted: "fail"}, getStep(t, pool, "test_flow", "first"))
	require.Equal(t, 1, getStep(t, pool, "test_flow", "second").StepIndex)
	require.Equal(t, 1, getStep(t, pool, "test_flow", "second").DepsCount)
	require.Equal(t, []string{"first"}, deps(t, pool, "test_flow", "second"))
	third := getStep(t, pool, "test_flow", "third")
	require.Equal(t, 2, third.StepIndex)
	require.Equal(t, 2, third.DepsCount)
	require.Equal(t, []string{"first", "second"}, deps(t, pool, "test_flow", "third"))
	fourth := getStep(t, pool, "test_flow", "fourth")
	require.Equal(t, 3, fourth.StepIndex)
	require.Equal(t, 0, fourth.DepsCount, "deps_slugs => NULL behaves like no dependencies")
	require.Empty(t, deps(t, pool, "test_flow", "fourth"))
}

func TestAddStepIndexIsPerFlow(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('flow_a')`)
	mustExec(t, pool, `select pgflow.create_flow('flow_b')`)
	mustExec(t, pool, `select pgflow.add_step('flow_a', 'a1')`)
	mustExec(t, pool, `select pgflow.add_step('flow_a', 'a2')`)
	mustExec(t, pool, `select pgflow.add_step('flow_b', 'a1')`)
	require.Equal(t, 1, getStep(t, pool, "flow_a", "a2").StepIndex)
	require.Equal(t, 0, getStep(t, pool, "flow_b", "a1").StepIndex, "same step slug in another flow is independent")

	err := execErr(pool, `select pgflow.add_step('flow_b', 'b2', ARRAY['a2'])`)
	requirePgError(t, err, "23503", `insert or update on table "deps" violates foreign key constraint "deps_flow_slug_dep_slug_fkey"`)
}

func TestAddStepOptions(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('test_flow')`)

	mustExec(t, pool, `select pgflow.add_step('test_flow', 'positional', ARRAY[]::text[], 5, 2, 30, 10)`)
	require.Equal(t, stepRow{StepType: "single", MaxAttempts: ptr(5), BaseDelay: ptr(2), Timeout: ptr(30),
		StartDelay: ptr(10), WhenUnmet: "skip", WhenExhausted: "fail"}, getStep(t, pool, "test_flow", "positional"))

	mustExec(t, pool, `select pgflow.add_step('test_flow', 'named', timeout => 7, max_attempts => 0,
		required_input_pattern => '{"status": "active"}', forbidden_input_pattern => '{"blocked": true}',
		when_unmet => 'skip-cascade', when_exhausted => 'skip', start_delay => 0)`)
	require.Equal(t, stepRow{StepType: "single", StepIndex: 1, MaxAttempts: ptr(0), Timeout: ptr(7), StartDelay: ptr(0),
		Required: ptr(`{"status": "active"}`), Forbidden: ptr(`{"blocked": true}`),
		WhenUnmet: "skip-cascade", WhenExhausted: "skip"}, getStep(t, pool, "test_flow", "named"))

	mustExec(t, pool, `select pgflow.add_step('test_flow', 'modes', when_unmet => 'fail', when_exhausted => 'skip-cascade')`)
	s := getStep(t, pool, "test_flow", "modes")
	require.Equal(t, "fail", s.WhenUnmet)
	require.Equal(t, "skip-cascade", s.WhenExhausted)
	require.Nil(t, s.MaxAttempts, "unset options stay NULL and inherit the flow's")
}

func TestAddStepMap(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('test_flow')`)

	mustExec(t, pool, `select pgflow.add_step('test_flow', 'root_map', step_type => 'map')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'single')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'dep_map', ARRAY['single'], NULL, NULL, NULL, NULL, 'map')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'null_type', step_type => NULL)`)

	require.Equal(t, "map", getStep(t, pool, "test_flow", "root_map").StepType)
	require.Equal(t, 0, getStep(t, pool, "test_flow", "root_map").DepsCount)
	dm := getStep(t, pool, "test_flow", "dep_map")
	require.Equal(t, "map", dm.StepType)
	require.Equal(t, 1, dm.DepsCount)
	require.Equal(t, "single", getStep(t, pool, "test_flow", "null_type").StepType, "step_type NULL means single")

	err := execErr(pool, `select pgflow.add_step('test_flow', 'two_dep_map', ARRAY['single', 'root_map'], step_type => 'map')`)
	requirePgError(t, err, "P0001", `Map step "two_dep_map" can have at most one dependency, but 2 were provided: single, root_map`)

	err = execErr(pool, `select pgflow.add_step('test_flow', 'bad_type', step_type => 'parallel')`)
	pgErr := requirePgError(t, err, "23514", `new row for relation "steps" violates check constraint "steps_step_type_check"`)
	require.Equal(t, "steps_step_type_check", pgErr.ConstraintName)

	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.steps where step_slug in ('two_dep_map', 'bad_type')`))
}

func TestAddStepIsIdempotent(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('test_flow')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'a')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'b')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'c', ARRAY['a', 'b'], max_attempts => 4)`)
	before := getStep(t, pool, "test_flow", "c")

	// Same dependencies (any order), other options: the existing row comes back unchanged.
	var index, maxAttempts int
	require.NoError(t, pool.QueryRow(t.Context(),
		`select step_index, opt_max_attempts from pgflow.add_step('test_flow', 'c', ARRAY['b', 'a'], max_attempts => 9, when_unmet => 'fail')`).
		Scan(&index, &maxAttempts))
	require.Equal(t, 2, index)
	require.Equal(t, 4, maxAttempts)
	require.Equal(t, before, getStep(t, pool, "test_flow", "c"))
	require.Equal(t, 3, count(t, pool, `select 1 from pgflow.steps`))
	require.Equal(t, 2, count(t, pool, `select 1 from pgflow.deps`))

	mustExec(t, pool, `select pgflow.add_step('test_flow', 'a')`)
	require.Equal(t, 0, getStep(t, pool, "test_flow", "a").StepIndex)
	require.Equal(t, 3, count(t, pool, `select 1 from pgflow.steps`), "repeated calls create no duplicates")
}

// pgflow's add_step adds the new edges of a repeated call but keeps the old deps_count, so runs wait forever for a
// dependency that is never counted down (and edges to later steps can form cycles). pgflow-go refuses to change the
// dependencies of an existing step.
func TestAddStepRejectsChangedDependencies(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('test_flow')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'a')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'b', ARRAY['a'])`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'c')`)

	cases := []struct {
		sql, message string
	}{
		{`select pgflow.add_step('test_flow', 'b', ARRAY['a', 'c'])`,
			`Step "b" of flow "test_flow" already exists with dependencies [a]; add_step cannot change them to [a, c]`},
		{`select pgflow.add_step('test_flow', 'b')`,
			`Step "b" of flow "test_flow" already exists with dependencies [a]; add_step cannot change them to []`},
		{`select pgflow.add_step('test_flow', 'a', ARRAY['b'])`,
			`Step "a" of flow "test_flow" already exists with dependencies []; add_step cannot change them to [b]`},
	}
	for _, c := range cases {
		pgErr := requirePgError(t, execErr(pool, c.sql), "23514", c.message)
		require.Contains(t, pgErr.Hint, "delete_flow_and_data")
	}
	require.Equal(t, 1, getStep(t, pool, "test_flow", "b").DepsCount)
	require.Equal(t, []string{"a"}, deps(t, pool, "test_flow", "b"))
	require.Empty(t, deps(t, pool, "test_flow", "a"))
}

// pgflow counts a dependency named twice twice in deps_count but stores one edge, so the step never becomes ready.
func TestAddStepDuplicateDependenciesCountOnce(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('test_flow')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'a')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'b', ARRAY['a', 'a'])`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'm', ARRAY['a', 'a'], step_type => 'map')`)

	require.Equal(t, 1, getStep(t, pool, "test_flow", "b").DepsCount)
	require.Equal(t, []string{"a"}, deps(t, pool, "test_flow", "b"))
	require.Equal(t, 1, getStep(t, pool, "test_flow", "m").DepsCount, "a map may name its one dependency twice")

	err := execErr(pool, `select pgflow.add_step('test_flow', 'n', ARRAY['a', NULL])`)
	requirePgError(t, err, "22004", `Step "n" of flow "test_flow": deps_slugs must not contain NULL (got {a,NULL})`)
}

func TestAddStepErrors(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('test_flow')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'first_step')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'second_step', ARRAY['first_step'])`)

	checkViolation := func(constraint string) string {
		return fmt.Sprintf(`new row for relation "steps" violates check constraint "%s"`, constraint)
	}
	cases := []struct {
		name, sql, code, message string
	}{
		{"nonexistent flow", `select pgflow.add_step('no_such_flow', 'step')`, "23503",
			`insert or update on table "steps" violates foreign key constraint "steps_flow_slug_fkey"`},
		{"nonexistent dependency", `select pgflow.add_step('test_flow', 'x', ARRAY['missing'])`, "23503",
			`insert or update on table "deps" violates foreign key constraint "deps_flow_slug_dep_slug_fkey"`},
		{"self dependency", `select pgflow.add_step('test_flow', 'circular', ARRAY['second_step', 'circular'])`, "23514",
			`new row for relation "deps" violates check constraint "deps_check"`},
		{"bad step slug", `select pgflow.add_step('test_flow', '1st')`, "23514", checkViolation("steps_step_slug_check")},
		{"bad when_unmet", `select pgflow.add_step('test_flow', 'x', when_unmet => 'ignore')`, "23514", checkViolation("when_unmet_is_valid")},
		{"bad when_exhausted", `select pgflow.add_step('test_flow', 'x', when_exhausted => 'retry')`, "23514", checkViolation("when_exhausted_is_valid")},
		{"negative start delay", `select pgflow.add_step('test_flow', 'x', start_delay => -1)`, "23514", checkViolation("opt_start_delay_is_nonnegative")},
		{"negative max attempts", `select pgflow.add_step('test_flow', 'x', max_attempts => -1)`, "23514", checkViolation("opt_max_attempts_is_nonnegative")},
		{"negative base delay", `select pgflow.add_step('test_flow', 'x', base_delay => -1)`, "23514", checkViolation("opt_base_delay_is_nonnegative")},
		{"zero timeout", `select pgflow.add_step('test_flow', 'x', timeout => 0)`, "23514", checkViolation("opt_timeout_is_positive")},
		{"array required pattern", `select pgflow.add_step('test_flow', 'x', required_input_pattern => '[1]')`, "23514", checkViolation("required_input_pattern_is_object")},
		{"string forbidden pattern", `select pgflow.add_step('test_flow', 'x', forbidden_input_pattern => '"a"')`, "23514", checkViolation("forbidden_input_pattern_is_object")},
		{"JSON null pattern", `select pgflow.add_step('test_flow', 'x', required_input_pattern => 'null'::jsonb)`, "23514", checkViolation("required_input_pattern_is_object")},
		{"explicit NULL when_unmet", `select pgflow.add_step('test_flow', 'x', when_unmet => NULL)`, "23502",
			`null value in column "when_unmet" of relation "steps" violates not-null constraint`},
	}
	for _, c := range cases {
		requirePgError(t, execErr(pool, c.sql), c.code, c.message)
	}
	require.Equal(t, 2, count(t, pool, `select 1 from pgflow.steps`), "failed calls leave nothing behind")
	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.deps`))
}

func TestStepIndexIsUnique(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('test_flow')`)
	mustExec(t, pool, `select pgflow.add_step('test_flow', 'a')`)
	err := execErr(pool, `insert into pgflow.steps (flow_slug, step_slug, step_index, queue_name) values ('test_flow', 'b', 0, 'test_flow')`)
	requirePgError(t, err, "23505", `duplicate key value violates unique constraint "steps_flow_slug_step_index_key"`)
}

func TestDefinitionTimestamps(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(t.Context()) }()
	for _, sql := range []string{
		`select pgflow.create_flow('test_flow')`,
		`select pgflow.add_step('test_flow', 'a')`,
		`select pgflow.add_step('test_flow', 'b', ARRAY['a'])`,
	} {
		_, err := tx.Exec(t.Context(), sql)
		require.NoError(t, err)
	}
	var ok bool
	require.NoError(t, tx.QueryRow(t.Context(), `
		select (select created_at = now() from pgflow.flows)
		   and (select bool_and(created_at = now()) from pgflow.steps)
		   and (select bool_and(created_at = now()) from pgflow.deps)`).Scan(&ok))
	require.True(t, ok, "flows, steps and deps are stamped with the transaction time")
}

// Without serialisation, two transactions adding steps to one flow both pick the same step_index and the second
// fails with a duplicate key error.
func TestAddStepConcurrentCallsGetDistinctIndexes(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ctx := t.Context()
	mustExec(t, pool, `select pgflow.create_flow('test_flow')`)

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(ctx) }()
	_, err = first.Exec(ctx, `select pgflow.add_step('test_flow', 'a')`)
	require.NoError(t, err)

	second, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer second.Release()
	pid := second.Conn().PgConn().PID()
	done := make(chan error, 1)
	go func() {
		_, err := second.Exec(ctx, `select pgflow.add_step('test_flow', 'b')`)
		done <- err
	}()
	var secondErr error
	waitUntilBlocked(t, pool, pid, func() bool {
		select {
		case secondErr = <-done:
			return true
		default:
			return false
		}
	})
	require.NoError(t, first.Commit(ctx))
	secondErr = <-done
	require.NoError(t, secondErr)
	require.Equal(t, 0, getStep(t, pool, "test_flow", "a").StepIndex)
	require.Equal(t, 1, getStep(t, pool, "test_flow", "b").StepIndex)
}
