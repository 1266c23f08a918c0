package definitions_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

const (
	shapeV1 = `{"steps": [
		{"slug": "first", "stepType": "single", "dependencies": [], "whenUnmet": "skip", "whenExhausted": "fail",
		 "requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}},
		{"slug": "second", "stepType": "single", "dependencies": ["first"], "whenUnmet": "skip", "whenExhausted": "fail",
		 "requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}}],
		"options": {"timeout": 10}}`
	shapeV2 = `{"steps": [
		{"slug": "first", "stepType": "single", "dependencies": [], "whenUnmet": "skip", "whenExhausted": "fail",
		 "requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}},
		{"slug": "other", "stepType": "map", "dependencies": ["first"], "whenUnmet": "skip", "whenExhausted": "fail",
		 "requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}}]}`
)

var v1v2Differences = []string{
	"Step at index 1: slug differs 'other' vs 'second'",
	"Step at index 1: type differs 'map' vs 'single'",
}

type compileResult struct {
	Status      string   `json:"status"`
	Differences []string `json:"differences"`
}

func ensureCompiled(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string, args ...any) compileResult {
	t.Helper()
	var raw []byte
	require.NoError(t, q.QueryRow(t.Context(), sql, args...).Scan(&raw))
	var r compileResult
	require.NoError(t, json.Unmarshal(raw, &r), "result %s", raw)
	require.NotNil(t, r.Differences, "differences is always an array: %s", raw)
	return r
}

// seedRun puts a run with a state, a task and a queue message into flow so tests can see what a recompile deletes.
func seedRun(t *testing.T, pool *pgxpool.Pool, flow, step string) {
	t.Helper()
	mustExec(t, pool, `
		with r as (
			insert into pgflow.runs (flow_slug, input, remaining_steps) values ($1, '{}', 1) returning run_id
		), s as (
			insert into pgflow.step_states (flow_slug, run_id, step_slug, status, remaining_tasks, initial_tasks, started_at)
			select $1, r.run_id, $2, 'started', 1, 1, now() from r returning run_id
		)
		insert into pgflow.step_tasks (flow_slug, run_id, step_slug, message_id, queue_name)
		select $1, s.run_id, $2, (select * from pgmq.send(lower($1), '{}'::jsonb)), lower($1) from s`, flow, step)
}

func TestEnsureFlowCompiledCompilesMissingFlow(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	r := ensureCompiled(t, pool, `select pgflow.ensure_flow_compiled('my_flow', $1::jsonb)`, shapeV1)
	require.Equal(t, compileResult{"compiled", []string{}}, r)
	require.Equal(t, 10, queryVal[int](t, pool, `select opt_timeout from pgflow.flows where flow_slug = 'my_flow'`))
	require.Equal(t, []string{}, queryVal[[]string](t, pool,
		`select pgflow._compare_flow_shapes($1::jsonb, pgflow._get_flow_shape('my_flow'))`, shapeV1))
	require.True(t, queueExists(t, pool, "my_flow"))
}

func TestEnsureFlowCompiledVerifiesMatchingShape(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ensureCompiled(t, pool, `select pgflow.ensure_flow_compiled('my_flow', $1::jsonb)`, shapeV1)
	seedRun(t, pool, "my_flow", "first")
	mustExec(t, pool, `update pgflow.flows set opt_timeout = 99`) // tuned at runtime: options are not compared

	r := ensureCompiled(t, pool, `select pgflow.ensure_flow_compiled('my_flow', $1::jsonb)`, shapeV1)
	require.Equal(t, compileResult{"verified", []string{}}, r)
	require.Equal(t, 99, queryVal[int](t, pool, `select opt_timeout from pgflow.flows`))
	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.runs`))
}

func TestEnsureFlowCompiledMismatchOutsideLocal(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ensureCompiled(t, pool, `select pgflow.ensure_flow_compiled('my_flow', $1::jsonb)`, shapeV1)
	seedRun(t, pool, "my_flow", "second")
	before := flowShape(t, pool, "my_flow")

	for _, sql := range []string{
		`select pgflow.ensure_flow_compiled('my_flow', $1::jsonb)`,
		`select pgflow.ensure_flow_compiled('my_flow', $1::jsonb, false)`,
		`select pgflow.ensure_flow_compiled(flow_slug => 'my_flow', shape => $1::jsonb, allow_data_loss => NULL)`,
	} {
		r := ensureCompiled(t, pool, sql, shapeV2)
		require.Equal(t, compileResult{"mismatch", v1v2Differences}, r, sql)
	}
	require.Equal(t, before, flowShape(t, pool, "my_flow"), "a mismatch changes nothing")
	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.runs`))
	require.Equal(t, 1, count(t, pool, `select 1 from pgmq.q_my_flow`))
}

func TestEnsureFlowCompiledRecompilesWithAllowDataLoss(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ensureCompiled(t, pool, `select pgflow.ensure_flow_compiled('my_flow', $1::jsonb)`, shapeV1)
	seedRun(t, pool, "my_flow", "second")
	mustExec(t, pool, `select pgmq.archive('my_flow', (select max(msg_id) from pgmq.q_my_flow))`)

	r := ensureCompiled(t, pool, `select pgflow.ensure_flow_compiled('my_flow', $1::jsonb, true)`, shapeV2)
	require.Equal(t, compileResult{"recompiled", v1v2Differences}, r)
	require.Equal(t, []string{}, queryVal[[]string](t, pool,
		`select pgflow._compare_flow_shapes($1::jsonb, pgflow._get_flow_shape('my_flow'))`, shapeV2))
	require.Equal(t, 60, queryVal[int](t, pool, `select opt_timeout from pgflow.flows`), "flow options come from the new shape")
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.runs`))
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.step_states`))
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.step_tasks`))
	require.Equal(t, 0, count(t, pool, `select 1 from pgmq.q_my_flow`), "the queue was dropped and created again")
	require.Equal(t, 0, count(t, pool, `select 1 from pgmq.a_my_flow`), "the archive was dropped too")
}

func TestEnsureFlowCompiledRecompilesWhenLocal(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ensureCompiled(t, pool, `select pgflow.ensure_flow_compiled('flow_a', $1::jsonb)`, shapeV1)
	ensureCompiled(t, pool, `select pgflow.ensure_flow_compiled('flow_b', $1::jsonb)`, shapeV1)
	seedRun(t, pool, "flow_a", "first")

	for _, setting := range [][2]string{
		{"pgflow.environment", "local"},
		{"app.settings.jwt_secret", supabaseLocalJWTSecret},
	} {
		flow := map[string]string{"pgflow.environment": "flow_a", "app.settings.jwt_secret": "flow_b"}[setting[0]]
		tx, err := pool.Begin(t.Context())
		require.NoError(t, err)
		_, err = tx.Exec(t.Context(), `select set_config($1, $2, true)`, setting[0], setting[1])
		require.NoError(t, err)
		r := ensureCompiled(t, tx, `select pgflow.ensure_flow_compiled($1, $2::jsonb)`, flow, shapeV2)
		require.NoError(t, tx.Commit(t.Context()))
		require.Equal(t, compileResult{"recompiled", v1v2Differences}, r, setting[0])
		require.Equal(t, []string{}, queryVal[[]string](t, pool,
			`select pgflow._compare_flow_shapes($1::jsonb, pgflow._get_flow_shape($2))`, shapeV2, flow))
	}
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.runs`))
}

// Two workers starting at once must not both compile: the second waits for the first and then verifies.
func TestEnsureFlowCompiledSerialisesConcurrentCalls(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ctx := t.Context()

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(ctx) }()
	r1 := ensureCompiled(t, first, `select pgflow.ensure_flow_compiled('race_flow', $1::jsonb)`, shapeV1)
	require.Equal(t, "compiled", r1.Status)

	secondConn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer secondConn.Release()
	secondPID := secondConn.Conn().PgConn().PID()

	type outcome struct {
		raw []byte
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		var raw []byte
		err := secondConn.QueryRow(ctx, `select pgflow.ensure_flow_compiled('race_flow', $1::jsonb)`, shapeV1).Scan(&raw)
		done <- outcome{raw, err}
	}()

	// Wait until the second call is blocked on the advisory lock the first one holds.
	var o outcome
	waitUntilBlocked(t, pool, secondPID, func() bool {
		select {
		case o = <-done:
			t.Logf("second call returned early: %s %v", o.raw, o.err)
			return true
		default:
			return false
		}
	})
	require.NoError(t, first.Commit(ctx))

	o = <-done
	require.NoError(t, o.err)
	var r2 compileResult
	require.NoError(t, json.Unmarshal(o.raw, &r2))
	require.Equal(t, compileResult{"verified", []string{}}, r2)
	require.Equal(t, 2, count(t, pool, `select 1 from pgflow.steps where flow_slug = 'race_flow'`))
}
