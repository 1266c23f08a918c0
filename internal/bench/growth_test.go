package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

func TestBenchGrowthMeasuresEverySizeAndPrunes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cfg := tinyConfig(db.URL)
	cfg.Mode = ModeGrowth
	cfg.GrowthSizes = []int{0, 300}
	cfg.Backlog = 60
	cfg.Starters = 2
	cfg.Prune = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	require.NoError(t, err)
	require.Empty(t, rep.Results, "the growth mode runs no scenario")
	require.NotNil(t, rep.Growth)
	g := rep.Growth
	require.Len(t, g.Points, 2)

	require.Zero(t, g.Points[0].HistoryRuns, "size 0: no completed run in the tables")
	require.Zero(t, g.Points[0].PreloadRuns)
	// At 300 the history is the pre-loaded runs plus the runs completed while measuring size 0.
	require.EqualValues(t, 300, g.Points[1].HistoryRuns)
	require.Positive(t, g.Points[1].PreloadRuns)
	require.Less(t, g.Points[1].PreloadRuns, int64(300))
	for i, p := range g.Points {
		require.EqualValues(t, 60, p.QueuedRuns, "point %d: the backlog is topped up to Backlog", i)
		require.EqualValues(t, cfg.Runs, p.Start.Count, "point %d", i)
		require.Positive(t, p.Start.PerSec, "point %d", i)
		require.Positive(t, p.Start.RowsWrittenPer, "point %d", i)
		require.Positive(t, p.Start.WALBytesPer, "point %d", i)
		require.GreaterOrEqual(t, p.Work.Count, int64(cfg.Runs), "point %d: the workers stop after Runs tasks", i)
		require.Positive(t, p.Work.CommitsPer, "point %d", i)
		require.GreaterOrEqual(t, p.Work.RowsWrittenPer, 1.0, "point %d", i)
		require.Positive(t, p.Baseline.CommitsPerSec, "point %d: a baseline measured next to it", i)
		require.InDelta(t, p.Work.PerSec/p.Baseline.CommitsPerSec, p.Work.Ratios.TasksPerSec, 1e-9)
		require.Positive(t, p.TableBytes)
		require.True(t, p.Checkpointed, "point %d: the test server lets the superuser checkpoint", i)
		calls := map[string]StatementTime{}
		for _, s := range p.Statements {
			calls[s.Function] = s
		}
		for _, f := range []string{"pgflow.start_flows", "pgflow.read_and_start_tasks", "pgflow.complete_tasks"} {
			require.Positive(t, calls[f].Calls, "point %d: %s was called and timed", i, f)
			require.Positive(t, calls[f].MeanMs, "point %d: %s", i, f)
			require.InDelta(t, calls[f].MeanMs/p.Baseline.LatencyMs, calls[f].RatioToBaseline, 1e-9)
		}
	}

	// Pruning removes exactly the pre-loaded history (2 to 30 days old); the measured runs are recent and stay.
	require.Len(t, g.Prune, 2)
	var pruned int64
	for _, r := range g.Prune {
		pruned += r.RunsPruned
		if r.RunsPruned > 0 {
			// Per pruned one-step run: its run, step state and task rows and its archived message.
			require.InDelta(t, 4.0, r.RowsPerRun, 1e-9, "%s", r.Retention)
			require.Positive(t, r.WALBytesPerRun)
		}
	}
	require.Equal(t, g.Points[1].PreloadRuns, pruned)
	// A point is measured right after pruning: the history is what the measured points completed, the backlog is
	// topped up again, and the same phases ran.
	a := g.AfterPrune
	require.NotNil(t, a)
	require.Equal(t, g.Points[1].HistoryRuns+g.Points[1].Work.Count-pruned, a.HistoryRuns,
		"after pruning: the runs completed while measuring, nothing pre-loaded")
	require.EqualValues(t, 60, a.QueuedRuns)
	require.EqualValues(t, cfg.Runs, a.Start.Count)
	require.GreaterOrEqual(t, a.Work.Count, int64(cfg.Runs))
	require.Positive(t, a.Start.RowsWrittenPer)
	require.Positive(t, a.Work.CommitsPer)
	require.InDelta(t, a.Work.PerSec/a.Baseline.CommitsPerSec, a.Work.Ratios.TasksPerSec, 1e-9)
	// The pruned runs are loaded again: the report shows the tables' size at each step.
	require.NotNil(t, g.Reuse)
	require.Equal(t, pruned, g.Reuse.ReloadedRuns)
	require.Positive(t, g.Reuse.BytesBeforePrune)
	require.Positive(t, g.Reuse.BytesAfterVacuum)
	require.Positive(t, g.Reuse.BytesAfterReload)
	var old int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where started_at < now() - interval '1 day'`).Scan(&old))
	require.EqualValues(t, pruned, old, "only the reloaded history is old")

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Contains(t, table.String(), "cost as work grows")
	require.Contains(t, table.String(), "prune_data_older_than('27 days')")
	require.Contains(t, table.String(), "after loading")
	require.Contains(t, table.String(), fmt.Sprintf("after prune: %d", a.HistoryRuns))
}

// shapeOf describes a row (as JSON) by its columns: null or of which JSON type, and for objects their keys.
func shapeOf(t *testing.T, row []byte, skip string) string {
	t.Helper()
	var cols map[string]any
	require.NoError(t, json.Unmarshal(row, &cols))
	var out []string
	for k, v := range cols {
		if k == skip {
			continue
		}
		d := "null"
		switch x := v.(type) {
		case nil:
		case map[string]any:
			keys := slices.Sorted(maps.Keys(x))
			d = "{" + strings.Join(keys, ",") + "}"
		default:
			d = fmt.Sprintf("%T", x)
		}
		out = append(out, k+"="+d)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// TestPreloadedHistoryLooksLikeRealRuns compares the rows the growth mode pre-loads with the rows of runs the
// engine really started and completed: the same columns set, the same JSON keys, the same value types.
func TestPreloadedHistoryLooksLikeRealRuns(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := openEnv(ctx, db.URL)
	require.NoError(t, err)
	defer e.close()
	cfg, err := tinyConfig(db.URL).resolve()
	require.NoError(t, err)
	bf, err := flowFor(growthScenario, false)
	require.NoError(t, err)
	require.NoError(t, e.prepareFlow(ctx, bf))
	require.NoError(t, startRuns(ctx, e.mon, bf, 3, 3, 1, func(int) {}))
	ws, err := e.startWorkers(ctx, cfg, growthScenario, 1, workerConfig(cfg))
	require.NoError(t, err)
	require.NoError(t, e.waitRuns(ctx, bf, 3, ws, nil))
	require.NoError(t, ws.stop())
	require.NoError(t, e.preloadHistory(ctx, bf.slug, "bench_growth", 5, func(int64) {}))

	for _, tc := range []struct{ table, at, skip string }{
		{"pgflow.runs", "started_at", ""},
		{"pgflow.step_states", "created_at", ""},
		// A real task names the worker that ran it; history's workers are gone (pruned, or the FK set it NULL).
		{"pgflow.step_tasks", "queued_at", "last_worker_id"},
		{"pgmq.a_bench_growth", "enqueued_at", ""},
	} {
		rows, err := db.Pool.Query(ctx, `select to_jsonb(x)::text, x.`+tc.at+` < now() - interval '1 day' from `+tc.table+` as x`)
		require.NoError(t, err)
		real, loaded := map[string]int{}, map[string]int{}
		var row string
		var old bool
		_, err = pgx.ForEachRow(rows, []any{&row, &old}, func() error {
			if old {
				loaded[shapeOf(t, []byte(row), tc.skip)]++
			} else {
				real[shapeOf(t, []byte(row), tc.skip)]++
			}
			return nil
		})
		require.NoError(t, err)
		require.Len(t, real, 1, "%s: the real rows have one shape", tc.table)
		require.Equal(t, slices.Collect(maps.Keys(real)), slices.Collect(maps.Keys(loaded)), "%s", tc.table)
		for _, n := range loaded {
			require.Equal(t, 5, n, "%s", tc.table)
		}
	}
	// The values that matter to the engine's queries.
	var bad int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs as r
		join pgflow.step_states as s using (run_id) join pgflow.step_tasks as t using (run_id)
		where r.status <> 'completed' or s.status <> 'completed' or t.status <> 'completed' or r.remaining_steps <> 0
		   or s.remaining_tasks <> 0 or t.attempts_count <> 1
		   or not exists (select from pgmq.a_bench_growth as a where a.msg_id = t.message_id and a.message->>'run_id' = r.run_id::text)`).Scan(&bad))
	require.Zero(t, bad)
	// Every run id, pre-loaded or real, has the engine's layout (version 7, RFC variant); a pre-loaded id carries
	// its run's started_at in its first 48 bits, so the history sits in the run_id indexes where real starts at those times would have put it.
	var ids, v7, stamped, old int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*),
		count(*) filter (where substr(r.run_id::text, 15, 1) = '7' and substr(r.run_id::text, 20, 1) in ('8', '9', 'a', 'b')),
		count(*) filter (where r.started_at < now() - interval '1 day'
		                   and ('x' || lpad(substr(replace(r.run_id::text, '-', ''), 1, 12), 16, '0'))::bit(64)::int8
		                       = floor(extract(epoch from r.started_at) * 1000)::int8),
		count(*) filter (where r.started_at < now() - interval '1 day')
		from pgflow.runs as r`).Scan(&ids, &v7, &stamped, &old))
	require.Equal(t, 8, ids)
	require.Equal(t, ids, v7, "every run id is version 7")
	require.Equal(t, 5, old)
	require.Equal(t, old, stamped, "every pre-loaded id carries its started_at")
	// Later messages never collide with the history's message ids.
	require.NoError(t, startRuns(ctx, e.mon, bf, 2, 2, 1, func(int) {}))
}
