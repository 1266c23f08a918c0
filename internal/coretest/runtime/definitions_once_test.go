package runtime_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// definitionLookups is how many scans the current transaction has begun on the definition tables (flows, steps,
// deps), whether through an index or sequentially: pg_stat_xact_user_tables counts the transaction's own work.
func definitionLookups(t *testing.T, tx pgx.Tx) int64 {
	t.Helper()
	return fx.Val[int64](t, tx, `
		select coalesce(sum(coalesce(idx_scan, 0) + coalesce(seq_scan, 0)), 0)::bigint
		  from pg_stat_xact_user_tables where schemaname = 'pgflow' and relname in ('flows', 'steps', 'deps')`)
}

// The worker's two calls read a flow's definitions once per call and step, not once per task (v0.20.0: before,
// each task of a batch looked its step up several times, 10-20 buffer accesses per task on the pages every
// worker reads). A batch of 50 tasks of one step, claimed and completed in one call each, starts the next step of
// the chain and then finishes every run: no call may look the definitions up anywhere near once per task.
func TestBatchCallsReadTheDefinitionsOncePerStep(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	ctx := fx.Ctx(t)
	fx.Exec(t, db, "select pgflow.create_flow('defs_once')")
	fx.Exec(t, db, "select pgflow.add_step('defs_once', 'first')")
	fx.Exec(t, db, "select pgflow.add_step('defs_once', 'second', array['first'])")
	fx.EnsureWorker(t, db, "defs_once", fx.DefaultWorker)
	const runs = 50
	fx.Exec(t, db, `select count(*) from pgflow.start_flows('defs_once', array(select '{}'::jsonb from generate_series(1, $1)))`, runs)

	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // committed below; a failed test rolls back

	// Far fewer than one per task: a handful per call for the flow, its steps and their dependencies.
	const limit = 12
	for _, step := range []string{"first", "second"} {
		before := definitionLookups(t, tx)
		var runIDs, slugs []string
		var indexes []int
		require.NoError(t, tx.QueryRow(ctx, `
			select coalesce(array_agg(r.run_id::text), '{}'), coalesce(array_agg(r.step_slug), '{}'),
			       coalesce(array_agg(r.task_index), '{}')
			  from pgflow.read_and_start_tasks('defs_once', null, $1::uuid, $2, 60) as r
			 where r.claimed`, fx.DefaultWorker, 2*runs).Scan(&runIDs, &slugs, &indexes))
		require.Len(t, runIDs, runs, "claiming the tasks of %s", step)
		require.Equal(t, step, slugs[0])
		claim := definitionLookups(t, tx) - before
		t.Logf("claiming %d tasks of %s: %d definition lookups", runs, step, claim)
		require.LessOrEqual(t, claim, int64(limit), "claiming %d tasks of %s looked the definitions up %d times", runs, step, claim)

		before = definitionLookups(t, tx)
		recorded := fx.Val[int64](t, tx, `
			select count(*) filter (where outcome = 'recorded')
			  from pgflow.complete_tasks($1::uuid[], $2::text[], $3::int[], array_fill('"ok"'::jsonb, array[$4::int]))`,
			runIDs, slugs, indexes, runs)
		require.Equal(t, int64(runs), recorded, "completing the tasks of %s", step)
		complete := definitionLookups(t, tx) - before
		t.Logf("completing %d tasks of %s: %d definition lookups", runs, step, complete)
		require.LessOrEqual(t, complete, int64(limit), "completing %d tasks of %s looked the definitions up %d times",
			runs, step, complete)
	}
	finished := fx.Val[int64](t, tx, `select count(*) from pgflow.runs where flow_slug = 'defs_once' and status = 'completed'`)
	require.Equal(t, int64(runs), finished, "both steps of all %d runs completed", runs)
	require.NoError(t, tx.Commit(ctx))
}
