package runtime_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// startBoth starts the same runs with start_flow one by one in one database and with one start_flows call in
// the other, and requires the returned rows (in input order) and the resulting state to be the same.
func startBoth(t *testing.T, tw *twin, inputs []string, ids []string) {
	t.Helper()
	var single []string
	for i, in := range inputs {
		var id *string
		if ids != nil {
			id = &ids[i]
		}
		var in2 *string
		if in != "" {
			in2 = &in
		}
		single = append(single, fx.Val[string](t, tw.single,
			`select concat_ws(' ', r.run_id, r.status, r.remaining_steps, r.input, r.output) from pgflow.start_flow('cmp', $1::jsonb, $2::uuid) as r`, in2, id))
	}
	batch := startFlows(t, tw.batch, inputs, ids)
	require.Equal(t, single, batch, "returned rows, in input order")
	require.Equal(t, snapshot(t, tw.single, "cmp"), snapshot(t, tw.batch, "cmp"))
	requireCausalEvents(t, tw.batch, "cmp")
}

func startFlows(t *testing.T, db *pgxpool.Pool, inputs []string, ids []string) []string {
	t.Helper()
	rows, err := tryStartFlows(db, t, inputs, ids)
	require.NoError(t, err)
	return rows
}

func tryStartFlows(db *pgxpool.Pool, t *testing.T, inputs []string, ids []string) ([]string, error) {
	ins := make([]*string, len(inputs))
	for i := range inputs {
		if inputs[i] != "" {
			ins[i] = &inputs[i]
		}
	}
	var idArg any
	if ids != nil {
		idArg = ids
	}
	rows, err := db.Query(fx.Ctx(t), `select concat_ws(' ', r.run_id, r.status, r.remaining_steps, r.input, r.output)
		from pgflow.start_flows('cmp', $1::jsonb[], $2::uuid[]) as r`, ins, idArg)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func runIDs(n int) []string {
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("00000000-0000-4000-8000-%012d", i+1))
	}
	return ids
}

// Diamonds with a delayed step: every run starts exactly as start_flow starts it.
func TestStartFlowsMatchesStartFlow(t *testing.T) {
	t.Parallel()
	tw := newTwin(t,
		"select pgflow.create_flow('cmp')",
		"select pgflow.add_step('cmp', 'a')",
		"select pgflow.add_step('cmp', 'b', array['a'])",
		"select pgflow.add_step('cmp', 'c')",
		"select pgflow.add_step('cmp', 'late', start_delay => 30)",
		"select pgflow.add_step('cmp', 'd', array['b', 'c'])")
	startBoth(t, tw, []string{`{"n": 1}`, `{"n": 2}`, `null`, `{"n": 4}`}, runIDs(4))
	// Then the runs work the same way too.
	for range 3 {
		tasks := tw.claim(t)
		tw.complete(t, outputsFor(tasks, func(x fx.Task) string { return `"` + x.StepSlug + `"` }))
	}

	// A flow without steps has nothing to start: its runs complete in the call (start_flows takes its general path
	// for it, not the one for flows whose roots start at once).
	empty := newTwin(t, "select pgflow.create_flow('cmp')")
	startBoth(t, empty, []string{`{"n": 1}`, `{"n": 2}`}, runIDs(2))
	require.Equal(t, 2, fx.Val[int](t, empty.batch, `select count(*)::int from pgflow.runs where status = 'completed'`))
}

// Root maps: arrays of several sizes, the empty array (taskless map completed by cascade, then its dependent
// starts), and a flow whose run completes at start.
func TestStartFlowsMatchesStartFlowWithRootMaps(t *testing.T) {
	t.Parallel()
	tw := newTwin(t,
		"select pgflow.create_flow('cmp')",
		"select pgflow.add_step('cmp', 'each', step_type => 'map')",
		"select pgflow.add_step('cmp', 'after', array['each'])")
	startBoth(t, tw, []string{`[1, 2, 3]`, `[]`, `["x"]`}, runIDs(3))
	require.Equal(t, "started", fx.GetStep(t, tw.batch, runIDs(3)[1], "after").Status)

	empty := newTwin(t,
		"select pgflow.create_flow('cmp')",
		"select pgflow.add_step('cmp', 'each', step_type => 'map')")
	startBoth(t, empty, []string{`[]`, `[]`}, runIDs(2))
	require.Equal(t, "completed", fx.GetRun(t, empty.batch, runIDs(2)[0]).Status, "nothing to do: completed at start")
}

// Conditions are resolved per run at start: one run fails its 'fail' condition, one skips a step, one runs all.
func TestStartFlowsMatchesStartFlowWithConditions(t *testing.T) {
	t.Parallel()
	tw := newTwin(t,
		"select pgflow.create_flow('cmp')",
		`select pgflow.add_step('cmp', 'must', required_input_pattern => '{"go": true}', when_unmet => 'fail')`,
		`select pgflow.add_step('cmp', 'maybe', required_input_pattern => '{"extra": true}')`,
		"select pgflow.add_step('cmp', 'after', array['must', 'maybe'])")
	startBoth(t, tw, []string{`{"go": false}`, `{"go": true}`, `{"go": true, "extra": true}`}, runIDs(3))
	require.Equal(t, "failed", fx.GetRun(t, tw.batch, runIDs(3)[0]).Status)
	require.Equal(t, "skipped", fx.GetStep(t, tw.batch, runIDs(3)[1], "maybe").Status)
	require.Equal(t, "started", fx.GetStep(t, tw.batch, runIDs(3)[2], "maybe").Status)
}

func TestStartFlowsRandomIDsAndInputOrder(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('cmp')")
	fx.Exec(t, db, "select pgflow.add_step('cmp', 'only')")
	var inputs []string
	for i := range 50 {
		inputs = append(inputs, fmt.Sprintf(`{"i": %d}`, i))
	}
	rows, err := db.Query(fx.Ctx(t), `select r.run_id::text, r.input::text from pgflow.start_flows('cmp', $1::jsonb[]) as r`, inputs)
	require.NoError(t, err)
	type pair struct{ ID, Input string }
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pair])
	require.NoError(t, err)
	require.Len(t, got, 50)
	seen := map[string]bool{}
	for i, p := range got {
		require.Equal(t, inputs[i], p.Input, "rows come back in input order")
		require.False(t, seen[p.ID], "run ids are distinct")
		seen[p.ID] = true
	}
	require.Equal(t, 50, fx.Val[int](t, db, `select count(*)::int from pgmq.q_cmp`), "one message per run")
	require.Equal(t, 50, fx.Val[int](t, db, `select count(*)::int from pgflow.step_tasks where status = 'queued'`))
	require.Zero(t, fx.Val[int](t, db, `select count(*)::int from pgflow.start_flows('cmp', '{}')`), "no inputs, no runs")
	require.Zero(t, fx.Val[int](t, db, `select count(*)::int from pgflow.start_flows('cmp', null)`))
}

// Bad calls fail before anything is written, naming the bad value; the call is atomic.
func TestStartFlowsErrors(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('cmp')")
	fx.Exec(t, db, "select pgflow.add_step('cmp', 'each', step_type => 'map')")
	count := func() int { return fx.Val[int](t, db, `select count(*)::int from pgflow.runs`) }

	_, err := tryStartFlows(db, t, []string{`[1]`, ``}, nil)
	requirePgError(t, err, "P0001", "Flow cmp has root map steps but input 2 is NULL")
	_, err = tryStartFlows(db, t, []string{`[1]`, `[2]`, `{"a": 1}`}, nil)
	requirePgError(t, err, "P0001", "Flow cmp has root map steps but input 3 is not an array (got object)")
	_, err = tryStartFlows(db, t, []string{`[1]`, `[2]`}, runIDs(1))
	requirePgError(t, err, "P0001", "start_flows: 1 run_ids given for 2 inputs")
	ids := runIDs(2)
	_, err = tryStartFlows(db, t, []string{`[1]`, `[2]`, `[3]`}, []string{ids[0], ids[1], ids[0]})
	require.ErrorContains(t, err, "runs_pkey", "a repeated run id fails the whole call")
	require.Zero(t, count(), "nothing was written")

	_, err = db.Exec(fx.Ctx(t), `select pgflow.start_flows('nope', array['{}'::jsonb])`)
	require.ErrorContains(t, err, "runs_flow_slug_fkey")
	require.Zero(t, count())
}
