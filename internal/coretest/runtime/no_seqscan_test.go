package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// The start, claim and completion paths never scan the run tables sequentially, not even in the foreign-key
// checks of their inserts, when the statistics say the tables are empty (a fresh database, or one analyzed just
// after pruning) and a session keeps its plans while the tables fill. Before v0.20.0 a session's cached check
// plans scanned runs and step_states whole for every new row, so each start cost more than the one before.
func TestHotPathsNeverScanTheRunTablesSequentially(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := fx.Ctx(t)
	fx.Exec(t, db.Pool, "select pgflow.create_flow('scan_probe')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('scan_probe', 'first')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('scan_probe', 'second', array['first'])")
	fx.Exec(t, db.Pool, "select pgflow.register_worker('00000000-0000-4000-8000-0000000000c1', 'scan_probe', 'probe')")
	fx.Exec(t, db.Pool, "analyze pgflow.runs, pgflow.step_states, pgflow.step_tasks, pgflow.flows, pgflow.steps, pgflow.workers")

	// Sequential and index scans of runs, step_states and step_tasks, as the statistics system has them.
	scans := func() (seq, idx int64) {
		require.NoError(t, db.Pool.QueryRow(ctx, `
			select coalesce(sum(seq_scan), 0)::bigint, coalesce(sum(idx_scan), 0)::bigint
			  from pg_catalog.pg_stat_user_tables
			 where relid in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass, 'pgflow.step_tasks'::regclass)`).
			Scan(&seq, &idx))
		return seq, idx
	}
	seqBefore, idxBefore := scans()

	// One session, as a pooled worker connection: plans are made while the tables are empty and kept.
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	for range 5 {
		_, err = conn.Exec(ctx, `select pgflow.start_flows('scan_probe', array(select '{}'::jsonb from generate_series(1, 200)))`)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `select pgflow.start_flow('scan_probe', '{}')`)
		require.NoError(t, err)
	}
	// Claim and complete until every task of both steps is done.
	for round := 0; ; round++ {
		require.Less(t, round, 50, "the runs did not finish")
		n := claimAndComplete(t, conn, "scan_probe", "scan_probe", "00000000-0000-4000-8000-0000000000c1", 300)
		if n == 0 {
			break
		}
	}
	// A backend reports its table counters when it exits: wait until it is gone.
	pid := conn.PgConn().PID()
	require.NoError(t, conn.Close(context.Background()))
	for {
		var alive bool
		require.NoError(t, db.Pool.QueryRow(ctx, `select exists (select 1 from pg_catalog.pg_stat_activity where pid = $1)`, pid).Scan(&alive))
		if !alive {
			break
		}
		require.NoError(t, ctx.Err(), "the probe's backend did not exit")
		time.Sleep(10 * time.Millisecond)
	}
	// Each pooled query runs in a transaction of its own, so the next read sees the flushed counters.
	seqAfter, idxAfter := scans()
	require.Greater(t, idxAfter, idxBefore, "the probe's counters were reported (its index scans)")
	require.Equal(t, seqBefore, seqAfter, "sequential scans of runs, step_states or step_tasks on the hot paths")
	var completed int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.step_tasks where status = 'completed'`).Scan(&completed))
	require.Equal(t, 2*5*201, completed, "the probe started 1,005 runs and completed both steps of each")
}

// A bulk start reads each run it creates a bounded number of times, whatever the statistics say: before v0.20.0,
// with statistics taken while no run was started, finding the started runs of the batch went through
// idx_runs_status and compared every started run with every id of the batch (20,000 runs: about a minute).
func TestBulkStartReadsEachRunABoundedNumberOfTimes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := fx.Ctx(t)
	fx.Exec(t, db.Pool, "select pgflow.create_flow('bulk_probe')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('bulk_probe', 'first')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('bulk_probe', 'second', array['first'])")
	freezeStatistics(t, db.Pool, "pgflow.runs", "pgflow.step_states", "pgflow.step_tasks")
	const runs = 3000
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // read-only use of the transaction's counters
	before := tuplesRead(t, tx)
	_, err = tx.Exec(ctx, `select pgflow.start_flows('bulk_probe', array(select '{}'::jsonb from generate_series(1, $1)))`, runs)
	require.NoError(t, err)
	requireReadAtMost(t, tx, before, 10*runs, "starting 3,000 runs")
}
