package runtime_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// oneRunThroughAChain starts one run of flow (two steps in a chain) on tx and claims and completes both of its
// tasks, as the Go client and worker call the functions, requiring each call to read at most limit tuples of runs,
// step_states and step_tasks.
func oneRunThroughAChain(t *testing.T, tx pgx.Tx, flow string, limit int64) {
	t.Helper()
	before := tuplesRead(t, tx)
	runID := fx.Val[string](t, tx, `
		select (s -> 'run' ->> 'run_id') from pgflow.start_flows_with_states($1, array['{}'::jsonb]) as s`, flow)
	before = requireReadAtMost(t, tx, before, limit, "a start of one run")
	for _, step := range []string{"work", "next"} {
		claimed := fx.Val[[]string](t, tx, `
			select coalesce(array_agg(r.run_id::text), '{}')
			  from pgflow.read_and_start_tasks($1, null, $2::uuid, 10, 60) as r where r.claimed`, flow, fx.DefaultWorker)
		require.Equal(t, []string{runID}, claimed, "claiming %s", step)
		before = requireReadAtMost(t, tx, before, limit, "a claim of one task of "+step)
		recorded := fx.Val[int64](t, tx, `
			select count(*) filter (where outcome = 'recorded')
			  from pgflow.complete_tasks(array[$1::uuid], array[$2::text], array[0], array['"ok"'::jsonb])`, runID, step)
		require.Equal(t, int64(1), recorded, "completing %s", step)
		before = requireReadAtMost(t, tx, before, limit, "a completion of one task of "+step)
	}
}

// A session that began while the tables were small keeps its plans (PL/pgSQL caches them for the session, and
// nothing invalidates them until the tables are analyzed again). Those plans must still find every row by key
// when the tables have grown: a hash or merge join would read a whole table through its primary key on every call
// (v0.20.0 before this test: 139,000 buffers per lone completion with 20,000 runs in the tables).
func TestSessionPlansMadeOnSmallTablesStayFlatAsTheTablesGrow(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	ctx := fx.Ctx(t)
	fx.Exec(t, db, "select pgflow.create_flow('aging')")
	fx.Exec(t, db, "select pgflow.add_step('aging', 'work')")
	fx.Exec(t, db, "select pgflow.add_step('aging', 'next', array['work'])")
	fx.EnsureWorker(t, db, "aging", fx.DefaultWorker)
	for _, table := range []string{"pgflow.runs", "pgflow.step_states", "pgflow.step_tasks", "pgmq.q_aging", "pgmq.a_aging"} {
		// Analyzed while empty, as autovacuum leaves a young database (the planner then takes the tables' current
		// size at face value); no analyze later: it would invalidate the session's plans and hide what this test
		// looks for.
		fx.Exec(t, db, "alter table "+table+" set (autovacuum_enabled = off)")
		fx.Exec(t, db, "analyze "+table)
	}

	session, err := db.Acquire(ctx) // the long-lived session: its plans are made now, on empty tables
	require.NoError(t, err)
	defer session.Release()
	const limit = 20 // a run of this flow has one run row, two step states and two tasks
	inTx := func(f func(tx pgx.Tx)) {
		tx, err := session.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		f(tx)
		require.NoError(t, tx.Commit(ctx))
	}
	inTx(func(tx pgx.Tx) { oneRunThroughAChain(t, tx, "aging", limit) })

	// The tables grow on another connection: 3,000 finished runs.
	const grown = 3000
	fx.Exec(t, db, `
		do $$
		declare
		  v_round integer;
		begin
		  perform pgflow.start_flows('aging', array(select '{}'::jsonb from generate_series(1, 3000)));
		  for v_round in 1..2 loop
		    perform pgflow.complete_tasks(array_agg(r.run_id), array_agg(r.step_slug), array_agg(r.task_index),
		                                  array_agg('"ok"'::jsonb))
		      from pgflow.read_and_start_tasks('aging', null, '`+fx.DefaultWorker+`'::uuid, 5000, 60) as r
		     where r.claimed;
		  end loop;
		end
		$$`)
	require.Equal(t, int64(grown+1), fx.Val[int64](t, db, `select count(*) from pgflow.runs where status = 'completed'`))

	inTx(func(tx pgx.Tx) { oneRunThroughAChain(t, tx, "aging", limit) })
}
