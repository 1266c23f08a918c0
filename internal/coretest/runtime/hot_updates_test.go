package runtime_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// A task's claim and its completion are heap-only-tuple (HOT) updates: step_tasks has no index whose columns or
// predicate those updates change, and its fillfactor leaves room on the page for the new versions, so neither
// writes an index entry. An index on status, started_at or last_worker_id (like pgflow's partial indexes on
// started and failed tasks) makes both write an entry into every index of the table (docs/performance.md).
func TestTaskTransitionsWriteNoIndexEntries(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := fx.Ctx(t)
	fx.Exec(t, db.Pool, "select pgflow.create_flow('hot_probe')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('hot_probe', 'only')")
	fx.Exec(t, db.Pool, "select pgflow.register_worker($1, 'hot_probe', 'probe')", fx.DefaultWorker)
	fx.Exec(t, db.Pool, `select pgflow.start_flows('hot_probe', array(select '{}'::jsonb from generate_series(1, 5)))`)

	// updates returns the step_tasks rows fn updated in its transaction, and how many of those updates were HOT.
	// The counters are read before and after fn: a session's counts of earlier transactions stay in the view until
	// the session reports them, at most once a second.
	updates := func(fn func(tx pgx.Tx)) (updated, hot int64) {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		counts := func() (upd, hot int64) {
			require.NoError(t, tx.QueryRow(ctx, `select n_tup_upd, n_tup_hot_upd from pg_catalog.pg_stat_xact_user_tables
				where relid = 'pgflow.step_tasks'::regclass`).Scan(&upd, &hot))
			return upd, hot
		}
		updBefore, hotBefore := counts()
		fn(tx)
		updAfter, hotAfter := counts()
		require.NoError(t, tx.Commit(ctx))
		return updAfter - updBefore, hotAfter - hotBefore
	}

	var claimed []completion
	updated, hot := updates(func(tx pgx.Tx) {
		rows, err := tx.Query(ctx, `select run_id::text, step_slug, task_index
			from pgflow.read_and_start_tasks('hot_probe', null, $1::uuid, 10, 30) where run_id is not null`, fx.DefaultWorker)
		require.NoError(t, err)
		claimed, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (completion, error) {
			c := completion{output: `{"done": true}`}
			return c, r.Scan(&c.runID, &c.step, &c.index)
		})
		require.NoError(t, err)
	})
	require.Len(t, claimed, 5)
	require.Equal(t, int64(5), updated, "the claim updates each task once")
	require.Equal(t, int64(5), hot, "every claim is a heap-only update")

	updated, hot = updates(func(tx pgx.Tx) {
		require.Equal(t, []string{"completed", "completed", "completed", "completed", "completed"},
			completeTasks(t, tx, claimed))
	})
	require.Equal(t, int64(5), updated, "the completion updates each task once")
	require.Equal(t, int64(5), hot, "every completion is a heap-only update")
}
