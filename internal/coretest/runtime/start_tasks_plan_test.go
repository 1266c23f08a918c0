package runtime_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// tuplesRead is how many step_tasks tuples the current transaction has read so far (heap tuples fetched through
// an index plus tuples returned by sequential scans): pg_stat_xact_user_tables counts the transaction's own work.
func tuplesRead(t *testing.T, tx pgx.Tx) map[string]int64 {
	t.Helper()
	rows, err := tx.Query(fx.Ctx(t), `
		select relname, coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0)
		  from pg_stat_xact_user_tables where schemaname = 'pgflow' and relname in ('runs', 'step_states', 'step_tasks')`)
	require.NoError(t, err)
	read := map[string]int64{}
	var name string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error { read[name] = n; return nil })
	require.NoError(t, err)
	return read
}

// requireReadAtMost fails when the transaction read more than limit tuples of any of the three tables since before.
func requireReadAtMost(t *testing.T, tx pgx.Tx, before map[string]int64, limit int64, what string) map[string]int64 {
	t.Helper()
	after := tuplesRead(t, tx)
	for _, table := range []string{"runs", "step_states", "step_tasks"} {
		require.LessOrEqual(t, after[table]-before[table], limit, "%s read %d tuples of %s", what, after[table]-before[table], table)
	}
	t.Logf("%s read: runs %d, step_states %d, step_tasks %d", what, after["runs"]-before["runs"],
		after["step_states"]-before["step_states"], after["step_tasks"]-before["step_tasks"])
	return after
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
	fx.Exec(t, db, "select pgflow.add_step('burst', 'next', array['work'])") // completions start steps too
	fx.EnsureWorker(t, db, "burst", fx.DefaultWorker)
	freezeStatistics(t, db, "pgflow.runs", "pgflow.step_states", "pgflow.step_tasks")
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
	before = requireReadAtMost(t, tx, before, 3*batch, fmt.Sprintf("claiming %d of %d queued tasks", batch, queued))

	runIDs, slugs, indexes, outputs := make([]string, 0, batch), make([]string, 0, batch), make([]int, 0, batch), make([]string, 0, batch)
	for _, tk := range claimed {
		runIDs, slugs, indexes, outputs = append(runIDs, tk.RunID), append(slugs, tk.StepSlug), append(indexes, tk.TaskIndex), append(outputs, `"ok"`)
	}
	completed := fx.Val[int64](t, tx, `
		select count(*) filter (where task_status = 'completed')
		  from pgflow.complete_tasks($1::uuid[], $2::text[], $3::int[], $4::jsonb[])`, runIDs, slugs, indexes, outputs)
	require.Equal(t, int64(batch), completed)
	requireReadAtMost(t, tx, before, 8*batch, fmt.Sprintf("completing %d tasks (and starting their dependents)", batch))
}
