package definitions_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// planNode is the part of EXPLAIN (FORMAT JSON) the listing test looks at.
type planNode struct {
	NodeType   string     `json:"Node Type"`
	IndexName  string     `json:"Index Name"`
	Direction  string     `json:"Scan Direction"`
	ActualRows float64    `json:"Actual Rows"`
	Loops      float64    `json:"Actual Loops"`
	Removed    float64    `json:"Rows Removed by Filter"`
	Plans      []planNode `json:"Plans"`
}

func walk(n planNode, f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		walk(c, f)
	}
}

// Listing runs newest first (keyset on started_at, run_id) by flow, by status or all of them reads one index
// range backwards and stops after the page: on 200,000 runs the plan has no sort, uses a listing index, and
// reads about as many index entries as the page holds (a rare flow or status through its own index: the page
// and one more entry), on the first page and after a cursor.
func TestRunListingUsesIndexes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, sql, args...)
		require.NoError(t, err, sql)
	}
	for _, f := range []string{"f0", "f1", "f2", "f3", "rare"} {
		exec("select pgflow.create_flow($1)", f)
	}
	// 200,000 runs over a year: 1% of flow "rare", the others spread over four flows; 80% completed, 15% failed,
	// 4% cancelled, 1% started.
	exec(`insert into pgflow.runs (flow_slug, status, input, started_at, completed_at, failed_at, cancelled_at)
		select case when i % 100 = 7 then 'rare' else 'f' || (i % 4) end, st, '{}', at,
		       case when st = 'completed' then at end, case when st = 'failed' then at end,
		       case when st = 'cancelled' then at end
		  from (select i, now() - make_interval(secs => i * 150) as at,
		               case when i % 100 < 80 then 'completed' when i % 100 < 95 then 'failed'
		                    when i % 100 < 99 then 'cancelled' else 'started' end as st
		          from generate_series(1, 200000) as i) as g`)
	exec("analyze pgflow.runs")

	const limit = 50
	// A rare flow or status must be read through its own index; a common one may also be read through
	// idx_runs_started_at with a filter (the planner's choice), which still stops after a few pages' worth.
	listing := []string{"idx_runs_flow_slug", "idx_runs_status", "idx_runs_started_at"}
	cases := []struct {
		name, where string
		indexes     []string
		maxRead     float64
		args        []any
	}{
		{"by rare flow", "flow_slug = $1", []string{"idx_runs_flow_slug"}, limit + 1, []any{"rare"}},
		{"by rare status", "status = $1", []string{"idx_runs_status"}, limit + 1, []any{"started"}},
		{"all runs", "$1::text is null", []string{"idx_runs_started_at"}, limit + 1, []any{nil}},
		{"by common flow", "flow_slug = $1", listing, 5 * limit, []any{"f2"}},
		{"by common status", "status = $1", listing, 5 * limit, []any{"failed"}},
		{"by flow and status", "flow_slug = $1 and status = 'completed'", listing, 5 * limit, []any{"f1"}},
	}
	for _, c := range cases {
		for _, cursor := range []bool{false, true} {
			sql := `select r.run_id, r.flow_slug, r.status, r.started_at from pgflow.runs as r where ` + c.where
			args := c.args
			if cursor {
				// A cursor in the middle of the table: the 100,000th newest run.
				var at, id any
				require.NoError(t, db.Pool.QueryRow(ctx, `select started_at, run_id from pgflow.runs
					order by started_at desc, run_id desc offset 100000 limit 1`).Scan(&at, &id))
				sql += ` and (r.started_at, r.run_id) < ($2, $3)`
				args = append(append([]any{}, args...), at, id)
			}
			sql += ` order by r.started_at desc, r.run_id desc limit 50`
			var raw string
			require.NoError(t, db.Pool.QueryRow(ctx, "explain (analyze, format json) "+sql, args...).Scan(&raw))
			var plans []struct {
				Plan planNode `json:"Plan"`
			}
			require.NoError(t, json.Unmarshal([]byte(raw), &plans))
			root := plans[0].Plan
			var scans []planNode
			walk(root, func(n planNode) {
				require.NotEqual(t, "Sort", n.NodeType, "%s (cursor %v): no sort\n%s", c.name, cursor, raw)
				if n.IndexName != "" {
					scans = append(scans, n)
				}
			})
			require.Len(t, scans, 1, "%s (cursor %v): one index scan\n%s", c.name, cursor, raw)
			s := scans[0]
			require.Contains(t, c.indexes, s.IndexName, "%s (cursor %v)\n%s", c.name, cursor, raw)
			require.Equal(t, "Backward", s.Direction, "%s (cursor %v)", c.name, cursor)
			require.LessOrEqual(t, s.ActualRows*s.Loops+s.Removed, c.maxRead,
				"%s (cursor %v): reads about one page of index entries\n%s", c.name, cursor, raw)
			t.Logf("%s (cursor %v): %s %s, %v rows read", c.name, cursor, s.NodeType, s.IndexName, s.ActualRows+s.Removed)
		}
	}
}
