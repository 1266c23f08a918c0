package definitions_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// v0.20.0 leaves out the foreign keys from the runtime tables to the definitions (runs_flow_slug_fkey,
// step_states_flow_slug_step_slug_fkey, step_tasks_flow_slug_fkey): each checked every inserted row. What they
// refused is still refused, with their errors: the start refuses an unknown flow, and pgflow._guard_definition_keys
// refuses to delete, rename or truncate away a flow or step that runs use.

// requireKeyError asserts a 23503 error as PostgreSQL's own foreign-key check reports it.
func requireKeyError(t *testing.T, err error, message, detail, table, constraint string) {
	t.Helper()
	pgErr := requirePgError(t, err, "23503", message)
	require.Equal(t, detail, pgErr.Detail)
	require.Equal(t, "pgflow", pgErr.SchemaName)
	require.Equal(t, table, pgErr.TableName)
	require.Equal(t, constraint, pgErr.ConstraintName)
}

func TestDefinitionsInUseCannotBeDeletedOrRenamed(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('dk'); select pgflow.add_step('dk', 'a');
		select pgflow.create_flow('dk_empty'); select pgflow.create_flow('dk_unused'); select pgflow.add_step('dk_unused', 'a')`)
	mustExec(t, pool, `select pgflow.start_flow('dk', '{}'); select pgflow.start_flow('dk_empty', '{}')`)
	snapshot := func() string {
		return queryVal[string](t, pool, `select concat_ws('|',
			(select string_agg(flow_slug, ',' order by flow_slug) from pgflow.flows),
			(select string_agg(flow_slug || '.' || step_slug, ',' order by flow_slug, step_slug) from pgflow.steps),
			(select string_agg(flow_slug || ':' || status, ',' order by flow_slug) from pgflow.runs),
			(select count(*) from pgflow.step_states), (select count(*) from pgflow.step_tasks))`)
	}
	before := snapshot()

	flowInUse := func(slug string) (string, string) {
		return `update or delete on table "flows" violates foreign key constraint "runs_flow_slug_fkey" on table "runs"`,
			`Key (flow_slug)=(` + slug + `) is still referenced from table "runs".`
	}
	msg, detail := flowInUse("dk")
	requireKeyError(t, execErr(pool, `delete from pgflow.flows where flow_slug = 'dk'`), msg, detail, "runs", "runs_flow_slug_fkey")
	// A flow without steps has no other key to stop a rename: only the guard does.
	msg, detail = flowInUse("dk_empty")
	requireKeyError(t, execErr(pool, `update pgflow.flows set flow_slug = 'dk_renamed' where flow_slug = 'dk_empty'`),
		msg, detail, "runs", "runs_flow_slug_fkey")
	requireKeyError(t, execErr(pool, `delete from pgflow.flows where flow_slug = 'dk_empty'`), msg, detail, "runs", "runs_flow_slug_fkey")

	stepInUse := `update or delete on table "steps" violates foreign key constraint "step_states_flow_slug_step_slug_fkey" on table "step_states"`
	stepDetail := `Key (flow_slug, step_slug)=(dk, a) is still referenced from table "step_states".`
	requireKeyError(t, execErr(pool, `delete from pgflow.steps where flow_slug = 'dk'`), stepInUse, stepDetail,
		"step_states", "step_states_flow_slug_step_slug_fkey")
	requireKeyError(t, execErr(pool, `update pgflow.steps set step_slug = 'b' where flow_slug = 'dk'`), stepInUse, stepDetail,
		"step_states", "step_states_flow_slug_step_slug_fkey")
	require.Equal(t, before, snapshot(), "nothing changed")

	// Updates that keep the keys, and definitions no run uses, are not in the guard's way.
	mustExec(t, pool, `update pgflow.flows set opt_max_attempts = 7 where flow_slug = 'dk'`)
	mustExec(t, pool, `update pgflow.steps set opt_max_attempts = 7 where flow_slug = 'dk'`)
	mustExec(t, pool, `update pgflow.steps set step_slug = 'b' where flow_slug = 'dk_unused'`)
	mustExec(t, pool, `delete from pgflow.steps where flow_slug = 'dk_unused'; delete from pgflow.flows where flow_slug = 'dk_unused'`)
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.flows where flow_slug = 'dk_unused'`))

	// pgflow.delete_flow_and_data removes the runs first, so the guard lets the definitions go.
	mustExec(t, pool, `select pgflow.delete_flow_and_data('dk'); select pgflow.delete_flow_and_data('dk_empty')`)
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.flows`))
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.runs`))
}

func TestDefinitionsCannotBeTruncatedAwayFromTheirRuns(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('tr'); select pgflow.add_step('tr', 'a'); select pgflow.start_flow('tr', '{}')`)

	pgErr := requirePgError(t, execErr(pool, `truncate pgflow.flows, pgflow.steps, pgflow.deps, pgflow.schedules`),
		"0A000", "cannot truncate a table referenced in a foreign key constraint")
	require.Equal(t, `Table "runs" references "flows".`, pgErr.Detail)
	pgErr = requirePgError(t, execErr(pool, `truncate pgflow.steps, pgflow.deps`),
		"0A000", "cannot truncate a table referenced in a foreign key constraint")
	require.Equal(t, `Table "step_states" references "steps".`, pgErr.Detail)
	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.steps`), "nothing was truncated")

	mustExec(t, pool, `truncate pgflow.step_tasks, pgflow.step_states, pgflow.runs, pgflow.deps, pgflow.steps,
		pgflow.flows, pgflow.schedules`)
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.flows`))
}

func TestStartOfAnUnknownFlowReportsTheKeysError(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	msg := `insert or update on table "runs" violates foreign key constraint "runs_flow_slug_fkey"`
	detail := `Key (flow_slug)=(nope) is not present in table "flows".`
	for _, sql := range []string{
		`select pgflow.start_flow('nope', '{}')`,
		`select pgflow.start_flows('nope', array['{}'::jsonb, '{}'])`,
		`select pgflow.start_flow_with_states('nope', '{}')`,
	} {
		requireKeyError(t, execErr(pool, sql), msg, detail, "runs", "runs_flow_slug_fkey")
	}
	// A NULL slug is still the not-null violation it was.
	requirePgError(t, execErr(pool, `select pgflow.start_flow(null, '{}')`), "23502",
		`null value in column "flow_slug" of relation "runs" violates not-null constraint`)
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.runs`))
}

// A start in flight and a delete of its flow are serialised by the flow's lock, whichever comes first: the delete
// waits for the start and then sees its run; a start waiting for a delete then finds no flow.
func TestDeletingAFlowAndStartingItAreSerialised(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ctx := t.Context()
	mustExec(t, pool, `select pgflow.create_flow('race')`) // no steps: only the guard stops the delete

	blockedBehind := func(open pgx.Tx, sql string) error {
		t.Helper()
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		pid := conn.Conn().PgConn().PID()
		done := make(chan error, 1)
		go func() {
			_, err := conn.Exec(ctx, sql)
			done <- err
		}()
		waitUntilBlocked(t, pool, pid, func() bool { return len(done) > 0 })
		require.NoError(t, open.Commit(ctx))
		return <-done
	}

	start, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = start.Rollback(ctx) }()
	_, err = start.Exec(ctx, `select pgflow.start_flow('race', '{}')`)
	require.NoError(t, err)
	msg := `update or delete on table "flows" violates foreign key constraint "runs_flow_slug_fkey" on table "runs"`
	requireKeyError(t, blockedBehind(start, `delete from pgflow.flows where flow_slug = 'race'`), msg,
		`Key (flow_slug)=(race) is still referenced from table "runs".`, "runs", "runs_flow_slug_fkey")

	mustExec(t, pool, `select pgflow.create_flow('race2')`)
	del, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = del.Rollback(ctx) }()
	_, err = del.Exec(ctx, `delete from pgflow.flows where flow_slug = 'race2'`)
	require.NoError(t, err)
	requireKeyError(t, blockedBehind(del, `select pgflow.start_flow('race2', '{}')`),
		`insert or update on table "runs" violates foreign key constraint "runs_flow_slug_fkey"`,
		`Key (flow_slug)=(race2) is not present in table "flows".`, "runs", "runs_flow_slug_fkey")
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.runs where flow_slug = 'race2'`))
}

// Under REPEATABLE READ a check cannot see what committed after the snapshot, so deletes and renames of
// definitions are refused there, and a start whose snapshot still shows a flow deleted since fails to serialise.
func TestDefinitionKeysUnderRepeatableRead(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ctx := t.Context()
	mustExec(t, pool, `select pgflow.create_flow('rr'); select pgflow.add_step('rr', 'a')`)

	inRepeatableRead := func(sql string) error {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		_, err = tx.Exec(ctx, sql)
		return err
	}
	for _, sql := range []string{
		`select pgflow.delete_flow_and_data('rr')`,
		`delete from pgflow.steps where flow_slug = 'rr'`,
		`update pgflow.steps set step_slug = 'b' where flow_slug = 'rr'`,
	} {
		err := inRepeatableRead(sql)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, sql)
		require.Equal(t, "25000", pgErr.Code, pgErr.Message)
		require.Contains(t, pgErr.Message, `step "a" of flow "rr" in a REPEATABLE READ transaction`)
	}
	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.steps where flow_slug = 'rr'`), "nothing was deleted")

	start, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = start.Rollback(context.Background()) }()
	_, err = start.Exec(ctx, `select 1`) // the snapshot is taken here, with the flow in it
	require.NoError(t, err)
	mustExec(t, pool, `select pgflow.delete_flow_and_data('rr')`)
	_, err = start.Exec(ctx, `select pgflow.start_flow('rr', '{}')`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "40001", pgErr.Code, pgErr.Message)
}
