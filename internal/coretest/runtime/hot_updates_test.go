package runtime_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// A task's claim and completion, and a step state's start and completion, are heap-only-tuple (HOT) updates:
// step_tasks and step_states have no index whose columns or predicate those updates change, and their fillfactor
// leaves room on the page for the new versions, so none of them writes an index entry. An index on a task's
// status, started_at or last_worker_id, or on a step state's status or remaining_deps (like pgflow's partial
// indexes on started, failed, skipped and ready rows), makes each of them write an entry into every index of its
// table (docs/performance.md).
func TestTaskTransitionsWriteNoIndexEntries(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := fx.Ctx(t)
	fx.Exec(t, db.Pool, "select pgflow.create_flow('hot_probe')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('hot_probe', 'first')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('hot_probe', 'second', array['first'])")
	fx.Exec(t, db.Pool, "select pgflow.register_worker($1, 'hot_probe', 'probe')", fx.DefaultWorker)
	fx.Exec(t, db.Pool, `select pgflow.start_flows('hot_probe', array(select '{}'::jsonb from generate_series(1, 5)))`)

	type counts struct{ tasks, taskHOT, states, stateHOT int64 }
	// updates returns the step_tasks and step_states rows fn updated in its transaction, and how many of those
	// updates were HOT. The counters are read before and after fn: a session's counts of earlier transactions stay
	// in the view until the session reports them, at most once a second.
	updates := func(fn func(tx pgx.Tx)) counts {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		read := func() (c counts) {
			require.NoError(t, tx.QueryRow(ctx, `
				select coalesce(sum(n_tup_upd) filter (where relname = 'step_tasks'), 0)::bigint,
				       coalesce(sum(n_tup_hot_upd) filter (where relname = 'step_tasks'), 0)::bigint,
				       coalesce(sum(n_tup_upd) filter (where relname = 'step_states'), 0)::bigint,
				       coalesce(sum(n_tup_hot_upd) filter (where relname = 'step_states'), 0)::bigint
				  from pg_catalog.pg_stat_xact_user_tables where schemaname = 'pgflow'`).
				Scan(&c.tasks, &c.taskHOT, &c.states, &c.stateHOT))
			return c
		}
		before := read()
		fn(tx)
		after := read()
		require.NoError(t, tx.Commit(ctx))
		return counts{after.tasks - before.tasks, after.taskHOT - before.taskHOT,
			after.states - before.states, after.stateHOT - before.stateHOT}
	}
	claim := func(tx pgx.Tx) []completion {
		rows, err := tx.Query(ctx, `select run_id::text, step_slug, task_index
			from pgflow.read_and_start_tasks('hot_probe', null, $1::uuid, 10, 30) where run_id is not null`, fx.DefaultWorker)
		require.NoError(t, err)
		claimed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (completion, error) {
			c := completion{output: `{"done": true}`}
			return c, r.Scan(&c.runID, &c.step, &c.index)
		})
		require.NoError(t, err)
		require.Len(t, claimed, 5)
		return claimed
	}
	complete := func(tx pgx.Tx, claimed []completion) {
		require.Equal(t, []string{"completed", "completed", "completed", "completed", "completed"},
			completeTasks(t, tx, claimed))
	}

	for _, step := range []string{"first", "second"} {
		var claimed []completion
		c := updates(func(tx pgx.Tx) { claimed = claim(tx) })
		require.Equal(t, counts{tasks: 5, taskHOT: 5}, c, "claims of %s: each task updated once, HOT", step)
		c = updates(func(tx pgx.Tx) { complete(tx, claimed) })
		if step == "first" {
			// Each task and its step state complete, and the dependent step state starts.
			require.Equal(t, counts{tasks: 5, taskHOT: 5, states: 10, stateHOT: 10}, c, "completions of first")
		} else {
			require.Equal(t, counts{tasks: 5, taskHOT: 5, states: 5, stateHOT: 5}, c, "completions of second")
		}
	}
	require.Equal(t, 5, fx.Val[int](t, db.Pool, `select count(*)::int from pgflow.runs where status = 'completed'`))
}
