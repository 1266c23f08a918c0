package runtime_test

import (
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	// Analyzed while empty, as autovacuum leaves a young database (the planner then takes the tables' current size
	// at face value); no analyze later: it would invalidate the session's plans and hide what this test looks for.
	freezeStatistics(t, db, "pgflow.runs", "pgflow.step_states", "pgflow.step_tasks", "pgmq.q_aging", "pgmq.a_aging")

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

// planLog collects the plans auto_explain sends to the client (client_min_messages = log) on one connection.
type planLog struct {
	mu    sync.Mutex
	plans []string
}

func (l *planLog) onNotice(_ *pgconn.PgConn, n *pgconn.Notice) {
	if strings.Contains(n.Message, "plan:") {
		l.mu.Lock()
		l.plans = append(l.plans, n.Message)
		l.mu.Unlock()
	}
}

var rowsRemovedByJoinFilter = regexp.MustCompile(`Rows Removed by Join Filter: (\d+)`)

// With nested loops only, a join that matches rows by a filter instead of a lookup compares every row of one side
// with every row of the other: quadratic in the batch, or a batch scanned again for every step defined in the
// database. Every plan the start, claims and completions of a batch run (auto_explain, nested statements, made on
// analyzed empty tables with other flows defined) may discard fewer rows in a join filter than the batch has.
func TestBatchPlansNeverCompareRowsPairwise(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := fx.Ctx(t)
	fx.Exec(t, db.Pool, "select pgflow.create_flow('pairs')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('pairs', 'work')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('pairs', 'next', array['work'])")
	for _, other := range []string{"other_a", "other_b", "other_c"} {
		fx.Exec(t, db.Pool, "select pgflow.create_flow($1)", other)
		fx.Exec(t, db.Pool, "select pgflow.add_step($1, 'a')", other)
		fx.Exec(t, db.Pool, "select pgflow.add_step($1, 'b', array['a'])", other)
		fx.Exec(t, db.Pool, "select pgflow.add_step($1, 'c', array['b'])", other)
	}
	fx.EnsureWorker(t, db.Pool, "pairs", fx.DefaultWorker)
	freezeStatistics(t, db.Pool, "pgflow.runs", "pgflow.step_states", "pgflow.step_tasks")

	cfg, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	var log planLog
	cfg.OnNotice = log.onNotice
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, set := range []string{
		"load 'auto_explain'", // a contrib module of every PostgreSQL server package
		"set auto_explain.log_min_duration = 0", "set auto_explain.log_analyze = on",
		"set auto_explain.log_nested_statements = on", "set client_min_messages = log",
	} {
		_, err := conn.Exec(ctx, set)
		require.NoError(t, err, "%s (auto_explain comes with PostgreSQL's contrib modules: Debian's postgresql package, "+
			"postgresql-contrib elsewhere)", set)
	}

	const batch = 200
	fx.Exec(t, conn, `select count(*) from pgflow.start_flows('pairs', array(select '{}'::jsonb from generate_series(1, $1)))`, batch)
	for _, step := range []string{"work", "next"} {
		require.Equal(t, int64(batch), fx.Val[int64](t, conn, `
			select count(*) from pgflow.read_and_start_tasks('pairs', null, $1::uuid, $2, 60) as r where r.claimed`,
			fx.DefaultWorker, 2*batch), "claiming %s", step)
		require.Equal(t, int64(batch), fx.Val[int64](t, conn, `
			select count(*) filter (where c.outcome = 'recorded')
			  from (select array_agg(t.run_id) as runs, array_agg(t.step_slug) as steps, array_agg(t.task_index) as idx
			          from pgflow.step_tasks as t where t.flow_slug = 'pairs' and t.status = 'started') as b,
			       pgflow.complete_tasks(b.runs, b.steps, b.idx, array_fill('"ok"'::jsonb, array[cardinality(b.runs)])) as c`),
			"completing %s", step)
	}

	log.mu.Lock()
	defer log.mu.Unlock()
	require.Greater(t, len(log.plans), 20, "auto_explain reported the nested statements' plans")
	most := 0
	for _, plan := range log.plans {
		for _, m := range rowsRemovedByJoinFilter.FindAllStringSubmatch(plan, -1) {
			n, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			require.Less(t, n, batch, "a join compared rows pairwise:\n%s", plan)
			most = max(most, n)
		}
	}
	t.Logf("%d plans; at most %d rows removed by a join filter", len(log.plans), most)
}
