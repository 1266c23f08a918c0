package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// A run started while its flow is being compiled (create_flow and add_step in one transaction, as
// ensure_flow_compiled does) waits for the compilation and starts with all of the flow's steps. Before v0.19.0 a
// start could count the steps before the compilation committed (none) and pass the foreign-key check after it
// (which reads the newest rows): the run completed at once, with output NULL, while its steps were being started.
// The test makes that window wide: an uncommitted run with the same run id holds the start's insert until the
// compilation has committed.
func TestStartDuringCompilationSeesTheWholeFlow(t *testing.T) {
	t.Parallel()
	const runID = "5f0c2a8e-6d3b-4b7a-9a51-0c7e2f1d3b44"
	for _, call := range []string{
		"select r.status || ' ' || r.remaining_steps from pgflow.start_flow('raced', '{}'::jsonb, '" + runID + "') as r",
		"select r.status || ' ' || r.remaining_steps from pgflow.start_flows('raced', array['{}'::jsonb], array['" + runID + "'::uuid]) as r",
	} {
		db := newDB(t).Pool
		ctx := fx.Ctx(t)
		fx.Exec(t, db, "select pgflow.create_flow('other')")
		holder, err := db.Begin(ctx)
		require.NoError(t, err)
		defer holder.Rollback(ctx)
		fx.Exec(t, holder, "insert into pgflow.runs (run_id, flow_slug, input, remaining_steps) values ($1, 'other', '{}', 0)", runID)

		compile, err := db.Begin(ctx)
		require.NoError(t, err)
		defer compile.Rollback(ctx)
		fx.Exec(t, compile, "select pgflow.create_flow('raced')")
		fx.Exec(t, compile, "select pgflow.add_step('raced', 'a')")
		fx.Exec(t, compile, "select pgflow.add_step('raced', 'b')")

		starter, err := db.Acquire(ctx)
		require.NoError(t, err)
		defer starter.Release()
		pid := fx.Val[int32](t, starter, "select pg_backend_pid()")
		type result struct {
			status string
			err    error
		}
		done := make(chan result, 1)
		go func() {
			var s string
			err := starter.QueryRow(context.WithoutCancel(ctx), call).Scan(&s)
			done <- result{s, err}
		}()
		require.Eventually(t, func() bool {
			return fx.Val[bool](t, db, `select exists (select 1 from pg_stat_activity
				where pid = $1 and wait_event_type = 'Lock')`, pid)
		}, time.Minute, 5*time.Millisecond, "the start waits for the compilation")
		require.NoError(t, compile.Commit(ctx))
		require.NoError(t, holder.Rollback(ctx))

		res := <-done
		require.NoError(t, res.err, call)
		require.Equal(t, "started 2", res.status, call)
		require.Equal(t, 2, fx.Val[int](t, db, "select count(*)::int from pgflow.step_tasks where flow_slug = 'raced' and status = 'queued'"), call)
	}
}
