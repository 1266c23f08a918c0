package sqlapi_test

// Benchmarks of the hot SQL calls, one op per task (per run for BenchmarkStartFlows), in batches of benchBatch as
// the worker sends them, against a real throwaway PostgreSQL (internal/pgtest: fsync off, so they measure the
// database's CPU and the round trips, not the disk). Besides ns/op they report the rows and WAL bytes each task
// cost, read from the database's own counters. Run them with, e.g.,
//
//	go test -run '^$' -bench . -benchtime 2000x ./internal/sqlapi/
//
// docs/performance.md ("Where a task's cost goes") explains the figures.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

const (
	benchBatch  = 100
	benchFlow   = "bench_one_step"
	benchWorker = "bbbbbbbb-0000-0000-0000-000000000001"
)

// benchDB returns a database with a one-step flow and a registered worker.
func benchDB(b *testing.B) *pgxpool.Pool { return benchDBRetaining(b, "archive") }

// benchDBRetaining is benchDB with the flow's message retention ("archive" or "delete").
func benchDBRetaining(b *testing.B, retention string) *pgxpool.Pool {
	b.Helper()
	pool := pgtest.New(b).Pool
	ctx := context.Background()
	for _, q := range []string{
		fmt.Sprintf(`select pgflow.create_flow('%s', max_attempts => 3, timeout => 60, message_retention => '%s')`,
			benchFlow, retention),
		fmt.Sprintf(`select pgflow.add_step('%s', 'work')`, benchFlow),
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	if err := sqlapi.RegisterWorker(ctx, pool, benchWorker, benchFlow, "bench"); err != nil {
		b.Fatal(err)
	}
	return pool
}

// startRuns starts n one-step runs in calls of benchBatch.
func startRuns(b *testing.B, pool *pgxpool.Pool, n int) {
	b.Helper()
	inputs := make([]json.RawMessage, benchBatch)
	for i := range inputs {
		inputs[i] = json.RawMessage(`{}`)
	}
	for done := 0; done < n; done += benchBatch {
		if _, err := sqlapi.StartFlows(context.Background(), pool, benchFlow, inputs[:min(benchBatch, n-done)], nil); err != nil {
			b.Fatal(err)
		}
	}
}

// benchClaimAll claims every queued task of the flow in batches and returns them.
func benchClaimAll(b *testing.B, pool *pgxpool.Pool) []sqlapi.ClaimedTask {
	b.Helper()
	var all []sqlapi.ClaimedTask
	for {
		claimed, _, read, err := sqlapi.ReadAndStartTasks(context.Background(), pool, benchFlow, benchFlow, benchWorker, benchBatch, 30)
		if err != nil {
			b.Fatal(err)
		}
		if read == 0 {
			return all
		}
		all = append(all, claimed...)
	}
}

// okResults are the results of claimed tasks whose handlers returned {"ok":true}, each for its claimed attempt.
func okResults(tasks []sqlapi.ClaimedTask) []sqlapi.TaskResult {
	results := make([]sqlapi.TaskResult, len(tasks))
	for i, t := range tasks {
		results[i] = sqlapi.TaskResult{RunID: t.RunID, StepSlug: t.StepSlug, TaskIndex: t.TaskIndex,
			Output: json.RawMessage(`{"ok":true}`), Attempt: t.Attempt}
	}
	return results
}

// counters are the database's rows written (pgflow and pgmq tables) and its WAL position.
type counters struct{ rows, wal int64 }

// readCounters closes the pool's connections and waits until their sessions are gone, so their statistics are
// published (a session publishes them when it exits, or some time after it goes idle), then reads the counters.
// The WAL position is exact either way: the cluster is this benchmark's own.
func readCounters(b *testing.B, pool *pgxpool.Pool) counters {
	b.Helper()
	ctx := context.Background()
	pool.Reset()
	var c counters
	for range 200 {
		var others int
		err := pool.QueryRow(ctx, `select count(*)::int from pg_stat_activity
			where datname = current_database() and pid <> pg_backend_pid()`).Scan(&others)
		if err != nil {
			b.Fatal(err)
		}
		if others == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	err := pool.QueryRow(ctx, `
		select (select coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint
		          from pg_stat_user_tables where schemaname in ('pgflow', 'pgmq')),
		       (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&c.rows, &c.wal)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// report adds rows/op and WAL-B/op, measured since before.
func report(b *testing.B, pool *pgxpool.Pool, before counters, ops int) {
	b.Helper()
	b.StopTimer()
	after := readCounters(b, pool)
	b.ReportMetric(float64(after.rows-before.rows)/float64(ops), "rows/op")
	b.ReportMetric(float64(after.wal-before.wal)/float64(ops), "WAL-B/op")
}

func BenchmarkStartFlows(b *testing.B) {
	pool := benchDB(b)
	before := readCounters(b, pool)
	b.ResetTimer()
	startRuns(b, pool, b.N)
	report(b, pool, before, b.N)
}

// BenchmarkStartFlowWithStatesAlone is a lone Client.StartRun as it was before v0.20.0 coalesced them, and as it
// still is with a run id or a transaction: one start_flow_with_states per run, its notifications sent after the
// commit.
func BenchmarkStartFlowWithStatesAlone(b *testing.B) {
	pool := benchDB(b)
	ctx := context.Background()
	before := readCounters(b, pool)
	b.ResetTimer()
	for range b.N {
		_, notes, err := sqlapi.StartFlowWithStatesDeferred(ctx, pool, benchFlow, json.RawMessage(`{}`), "")
		if err != nil {
			b.Fatal(err)
		}
		if err := notes.Send(ctx, pool); err != nil {
			b.Fatal(err)
		}
	}
	report(b, pool, before, b.N)
}

// BenchmarkStartFlowsWithStatesCoalesced is what 16 concurrent Client.StartRun calls of one flow cost per run when
// they meet: one start_flows_with_states call for the 16, its notifications sent after the commit.
func BenchmarkStartFlowsWithStatesCoalesced(b *testing.B) {
	const together = 16
	pool := benchDB(b)
	ctx := context.Background()
	inputs := make([]json.RawMessage, together)
	for i := range inputs {
		inputs[i] = json.RawMessage(`{}`)
	}
	before := readCounters(b, pool)
	b.ResetTimer()
	for done := 0; done < b.N; done += together {
		runs, notes, err := sqlapi.StartFlowsWithStatesDeferred(ctx, pool, benchFlow, inputs[:min(together, b.N-done)])
		if err != nil {
			b.Fatal(err)
		}
		if len(runs) != min(together, b.N-done) || len(runs[0].Steps) != 1 {
			b.Fatalf("started %d runs, the first with %d steps", len(runs), len(runs[0].Steps))
		}
		if err := notes.Send(ctx, pool); err != nil {
			b.Fatal(err)
		}
	}
	report(b, pool, before, b.N)
}

// BenchmarkReadThenStartTasks is pgflow's path: pgmq.read, then start_tasks of the ids read (two round trips).
func BenchmarkReadThenStartTasks(b *testing.B) {
	pool := benchDB(b)
	startRuns(b, pool, b.N)
	ctx := context.Background()
	before := readCounters(b, pool)
	b.ResetTimer()
	for claimed := 0; claimed < b.N; {
		msgs, err := sqlapi.Read(ctx, pool, sqlapi.ReadParams{Queue: benchFlow, VisibilitySeconds: 30, Qty: benchBatch})
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]int64, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		tasks, err := sqlapi.StartTasks(ctx, pool, benchFlow, benchFlow, ids, benchWorker)
		if err != nil {
			b.Fatal(err)
		}
		if len(tasks) == 0 {
			b.Fatalf("claimed nothing after %d tasks", claimed)
		}
		claimed += len(tasks)
	}
	report(b, pool, before, b.N)
}

// retentions runs bench once per message retention of the flow (sub-benchmarks archive and delete).
func retentions(b *testing.B, bench func(b *testing.B, pool *pgxpool.Pool)) {
	for _, r := range []string{"archive", "delete"} {
		b.Run(r, func(b *testing.B) { bench(b, benchDBRetaining(b, r)) })
	}
}

// BenchmarkReadAndStartTasks is the listening worker's path: read and claim in one call.
func BenchmarkReadAndStartTasks(b *testing.B) {
	retentions(b, func(b *testing.B, pool *pgxpool.Pool) {
		startRuns(b, pool, b.N)
		before := readCounters(b, pool)
		b.ResetTimer()
		if got := len(benchClaimAll(b, pool)); got != b.N {
			b.Fatalf("claimed %d tasks, want %d", got, b.N)
		}
		report(b, pool, before, b.N)
	})
}

// BenchmarkCompleteTasks completes claimed one-step tasks in batches (each completes its step and its run).
func BenchmarkCompleteTasks(b *testing.B) { retentions(b, benchCompleteTasks) }

func benchCompleteTasks(b *testing.B, pool *pgxpool.Pool) {
	startRuns(b, pool, b.N)
	tasks := benchClaimAll(b, pool)
	ctx := context.Background()
	before := readCounters(b, pool)
	b.ResetTimer()
	for i := 0; i < len(tasks); i += benchBatch {
		batch := tasks[i:min(i+benchBatch, len(tasks))]
		out, err := sqlapi.CompleteTasks(ctx, pool, okResults(batch))
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range out {
			if o.Outcome != sqlapi.OutcomeRecorded {
				b.Fatalf("outcome %q, want %q", o.Outcome, sqlapi.OutcomeRecorded)
			}
		}
	}
	report(b, pool, before, b.N)
}

// BenchmarkCompleteTaskAlone completes claimed one-step tasks one complete_tasks call each: what a burst of one
// result costs.
func BenchmarkCompleteTaskAlone(b *testing.B) {
	pool := benchDB(b)
	startRuns(b, pool, b.N)
	tasks := benchClaimAll(b, pool)
	ctx := context.Background()
	before := readCounters(b, pool)
	b.ResetTimer()
	for _, t := range tasks {
		_, err := sqlapi.CompleteTasks(ctx, pool, okResults([]sqlapi.ClaimedTask{t}))
		if err != nil {
			b.Fatal(err)
		}
	}
	report(b, pool, before, b.N)
}

// BenchmarkCallsBySize is one run's path through the engine's three calls, n runs per call (n = 1, 16, 100): the
// coalesced start (its notifications sent after the commit, as below 16 runs), the listening worker's read and
// claim, and the completion. One op is one round of the three; each call's time per call is reported apart. What
// is left when n grows is each call's fixed cost, which a run alone pays in full and which sets how long the
// latency scenario's stages last (docs/performance.md, "What a call costs by its size").
func BenchmarkCallsBySize(b *testing.B) {
	for _, n := range []int{1, 16, 100} {
		b.Run(fmt.Sprintf("runs=%d", n), func(b *testing.B) {
			pool := benchDB(b)
			ctx := context.Background()
			inputs := make([]json.RawMessage, n)
			for i := range inputs {
				inputs[i] = json.RawMessage(`{}`)
			}
			var start, claim, complete time.Duration
			for range b.N {
				t0 := time.Now()
				_, notes, err := sqlapi.StartFlowsWithStatesDeferred(ctx, pool, benchFlow, inputs)
				if err != nil {
					b.Fatal(err)
				}
				if err := notes.Send(ctx, pool); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				claimed, _, _, err := sqlapi.ReadAndStartTasks(ctx, pool, benchFlow, benchFlow, benchWorker, n, 30)
				if err != nil {
					b.Fatal(err)
				}
				if len(claimed) != n {
					b.Fatalf("claimed %d tasks, want %d", len(claimed), n)
				}
				t2 := time.Now()
				if _, err := sqlapi.CompleteTasks(ctx, pool, okResults(claimed)); err != nil {
					b.Fatal(err)
				}
				t3 := time.Now()
				start, claim, complete = start+t1.Sub(t0), claim+t2.Sub(t1), complete+t3.Sub(t2)
			}
			perCall := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			b.ReportMetric(perCall(start), "start-µs/call")
			b.ReportMetric(perCall(claim), "claim-µs/call")
			b.ReportMetric(perCall(complete), "complete-µs/call")
		})
	}
}
