package runtime_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// tuplesRead is how many step_tasks tuples the current transaction has read so far (heap tuples fetched through
// an index plus tuples returned by sequential scans): pg_stat_xact_user_tables counts the transaction's own work.
func tuplesRead(t *testing.T, tx pgx.Tx) int64 {
	t.Helper()
	return fx.Val[int64](t, tx, `
		select coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0)
		  from pg_stat_xact_user_tables where relid = 'pgflow.step_tasks'::regclass`)
}

// A burst of work after a quiet period: the planner's statistics were taken while the tables were empty, then
// thousands of tasks are queued. Claiming and completing a batch must read the batch's rows, not every queued task
// (v0.18.0's claim scanned every queued task twice and compared each with every claimed one: 100 claimed, 480,000
// comparisons with 4,800 queued). Reading rows is what the transaction's statistics can count.
func TestBatchCallsReadOnlyTheirRowsUnderStaleStatistics(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('burst')")
	fx.Exec(t, db, "select pgflow.add_step('burst', 'work')")
	fx.EnsureWorker(t, db, "burst", fx.DefaultWorker)
	for _, table := range []string{"runs", "step_states", "step_tasks"} {
		fx.Exec(t, db, "alter table pgflow."+table+" set (autovacuum_enabled = off)")
		fx.Exec(t, db, "analyze pgflow."+table)
	}
	const queued, batch = 20000, 25 // enough rows that reading them all is the expensive plan
	fx.Exec(t, db, `select count(*) from pgflow.start_flows('burst', array(select '{}'::jsonb from generate_series(1, $1)))`, queued)

	ids := fx.ReadMessages(t, db, "burst", 60, batch)
	require.Len(t, ids, batch)

	ctx := fx.Ctx(t)
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)

	before := tuplesRead(t, tx)
	claimed := fx.StartTasks(t, tx, "burst", ids, fx.DefaultWorker)
	require.Len(t, claimed, batch)
	claimRead := tuplesRead(t, tx) - before
	require.LessOrEqual(t, claimRead, int64(3*batch),
		"claiming %d of %d queued tasks read %d step_tasks tuples", batch, queued, claimRead)

	runIDs, slugs, indexes, outputs := make([]string, 0, batch), make([]string, 0, batch), make([]int, 0, batch), make([]string, 0, batch)
	for _, tk := range claimed {
		runIDs, slugs, indexes, outputs = append(runIDs, tk.RunID), append(slugs, tk.StepSlug), append(indexes, tk.TaskIndex), append(outputs, `"ok"`)
	}
	before = tuplesRead(t, tx)
	completed := fx.Val[int64](t, tx, `
		select count(*) filter (where task_status = 'completed')
		  from pgflow.complete_tasks($1::uuid[], $2::text[], $3::int[], $4::jsonb[])`, runIDs, slugs, indexes, outputs)
	require.Equal(t, int64(batch), completed)
	completeRead := tuplesRead(t, tx) - before
	require.LessOrEqual(t, completeRead, int64(6*batch),
		"completing %d of %d tasks read %d step_tasks tuples", batch, queued, completeRead)
	t.Logf("step_tasks tuples read: claim %d, completion %d (batch %d, queued %d)", claimRead, completeRead, batch, queued)
}
