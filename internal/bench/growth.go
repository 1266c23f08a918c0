package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/backoff"
	"github.com/pgflow-go/pgflow/schema"
)

// growthScenario names the one-step flow of the growth mode (bench_growth).
const growthScenario = "growth"

// preloadChunk is the number of history runs inserted per transaction: big enough for set-based inserts to pay
// off, small enough that a failure loses little and no transaction holds millions of row locks.
const preloadChunk = 50000

// GrowthPoint is what starting, claiming and completing cost at one size of the tables.
type GrowthPoint struct {
	// HistoryRuns is the number of completed runs of the flow in the tables while measured (pre-loaded ones plus
	// the runs measured at smaller sizes); QueuedRuns the queued backlog (started runs with a queue message each)
	// when the measurement began.
	HistoryRuns int64 `json:"history_runs"`
	QueuedRuns  int64 `json:"queued_runs"`
	// PreloadRuns were inserted as history before this point, in PreloadSeconds; BacklogSeconds is the time the
	// backlog's top-up took (real starts), VacuumSeconds the VACUUM ANALYZE that followed.
	PreloadRuns    int64   `json:"preload_runs"`
	PreloadSeconds float64 `json:"preload_seconds"`
	BacklogSeconds float64 `json:"backlog_seconds"`
	VacuumSeconds  float64 `json:"vacuum_seconds"`
	// Checkpointed says a CHECKPOINT ran right before the measured phases (it needs the pg_checkpoint role or a
	// superuser): every size is then measured at the same point of the checkpoint cycle, its start, where the
	// first change of each page writes a full-page image; without it, whether a checkpoint happened before a
	// size depends on how much WAL the pre-load wrote.
	Checkpointed bool `json:"checkpointed"`
	// TableBytes is the total size (indexes and TOAST included) of pgflow's run tables and the flow's queue and
	// archive tables.
	TableBytes int64 `json:"table_bytes"`
	// Baseline is the baseline measured right before the point's phases (BaselineDuration): on a shared machine
	// the commit rate drifts during a run this long, so rates and call times are divided by the adjacent
	// measurement; costs per run and task by the run's combined baseline.
	Baseline Baseline `json:"baseline"`
	// Start is the bulk start of runs (cost per run); Work the workers claiming and completing tasks from the
	// backlog (cost per task).
	Start GrowthPhase `json:"start"`
	Work  GrowthPhase `json:"work"`
	// Statements are the client-side mean times of the engine calls of both phases (start_flows; the workers'
	// read_and_start_tasks, complete_tasks...).
	Statements []StatementTime `json:"statements"`
}

// GrowthPhase is one measured phase of a growth point.
type GrowthPhase struct {
	Count          int64   `json:"count"` // runs started or tasks completed
	Seconds        float64 `json:"seconds"`
	PerSec         float64 `json:"per_sec"`
	CommitsPer     float64 `json:"commits_per"`
	WALBytesPer    float64 `json:"wal_bytes_per"`
	RowsWrittenPer float64 `json:"rows_written_per"`
	// FullPagesPer is the full-page images per run or task (pg_stat_wal, whole server; 0 before PostgreSQL 14):
	// the first change of a page after a checkpoint writes the whole page to the WAL, so changes spread over
	// many pages (random keys in big indexes) cost more WAL than the same changes on a few pages.
	FullPagesPer float64 `json:"full_page_images_per"`
	Ratios       Ratios  `json:"ratios"` // RunsPerSec (start) or TasksPerSec (work), Commits, WALBytes, RowsWritten
}

func (p *GrowthPhase) setCost(d delta) {
	if p.Count == 0 {
		return
	}
	p.CommitsPer = float64(d.commits) / float64(p.Count)
	p.WALBytesPer = float64(d.walBytes) / float64(p.Count)
	p.RowsWrittenPer = float64(d.rows) / float64(p.Count)
	p.FullPagesPer = float64(d.fpi) / float64(p.Count)
	if p.Seconds > 0 {
		p.PerSec = float64(p.Count) / p.Seconds
	}
}

// ratios divides the rate by the adjacent baseline's commit rate and the costs by the run's baseline.
func (p *GrowthPhase) ratios(adjacent, b Baseline, start bool) {
	p.Ratios = Ratios{Commits: ratio(p.CommitsPer, b.CommitsPerTx), WALBytes: ratio(p.WALBytesPer, b.WALBytesPerTx),
		RowsWritten: ratio(p.RowsWrittenPer, b.RowsPerTx)}
	if start {
		p.Ratios.RunsPerSec = ratio(p.PerSec, adjacent.CommitsPerSec)
	} else {
		p.Ratios.TasksPerSec = ratio(p.PerSec, adjacent.CommitsPerSec)
	}
}

// Growth is the outcome of the growth mode.
type Growth struct {
	Points []GrowthPoint `json:"points"`
	// Prune is pgflow.prune_data_older_than on the loaded history (empty when not measured).
	Prune     []PruneResult `json:"prune,omitempty"`
	PruneNote string        `json:"prune_note,omitempty"`
	// AfterPrune is a point measured right after pruning, on the pruned and vacuumed tables (nil when pruning is
	// not measured): what starting and working cost once the history is gone and the indexes keep its pages.
	AfterPrune *GrowthPoint `json:"after_prune,omitempty"`
	// Reuse is measured after pruning (nil when pruning is not measured).
	Reuse *Reuse `json:"reuse,omitempty"`
}

// PruneResult is one call of pgflow.prune_data_older_than.
type PruneResult struct {
	Retention      string  `json:"retention"`
	RunsBefore     int64   `json:"runs_before"`
	RunsPruned     int64   `json:"runs_pruned"`
	Seconds        float64 `json:"seconds"`
	MsPer1000Runs  float64 `json:"ms_per_1000_runs"`
	WALBytesPerRun float64 `json:"wal_bytes_per_run"`
	RowsPerRun     float64 `json:"rows_written_per_run"` // rows deleted in runs, step_states, step_tasks and the archive
	FullPagesPer   float64 `json:"full_page_images_per_run"`
}

// finishedTasks counts the tasks the workers finished (completed or otherwise), so the growth mode can stop its
// workers after a number of tasks without counting rows in tables that hold a million of them.
type finishedTasks struct {
	pgflow.NoopHooks
	n atomic.Int64
}

func (f *finishedTasks) TaskFinished(context.Context, pgflow.TaskFinishedEvent) { f.n.Add(1) }

// runGrowth measures start, claim and complete at each size of cfg.GrowthSizes: completed history is
// pre-loaded set-based up to the size, the backlog is topped up to cfg.Backlog queued runs with real starts, the
// tables are vacuumed and analyzed, then cfg.Runs runs are started (measured per run) and cfg.Runs tasks are
// worked off the backlog by the workers (measured per task). When pruning is measured, the same is measured once
// more on the pruned tables (Growth.AfterPrune).
func (e *env) runGrowth(ctx context.Context, cfg Config, progress func(Progress)) (*Growth, error) {
	bf, err := flowFor(growthScenario, cfg.DeleteMessages)
	if err != nil {
		return nil, err
	}
	if err := e.prepareFlow(ctx, bf); err != nil {
		return nil, err
	}
	var queue string
	if err := e.mon.QueryRow(ctx, `select s.queue_name from pgflow.steps as s where s.flow_slug = $1::text`, bf.slug).Scan(&queue); err != nil {
		return nil, fmt.Errorf("read the queue of %q: %w", bf.slug, err)
	}
	g := &Growth{}
	for _, size := range cfg.GrowthSizes {
		pt := GrowthPoint{}
		history, err := e.countRuns(ctx, bf.slug, "completed")
		if err != nil {
			return nil, err
		}
		if need := int64(size) - history; need > 0 {
			t0 := time.Now()
			if err := e.preloadHistory(ctx, bf.slug, queue, need, func(done int64) {
				progress(Progress{Phase: fmt.Sprintf("history %d", size), Done: history + done, Total: int64(size), Unit: "runs"})
			}); err != nil {
				return nil, err
			}
			pt.PreloadRuns, pt.PreloadSeconds = need, time.Since(t0).Seconds()
		}
		if err := e.measurePoint(ctx, cfg, bf, queue, &pt, progress); err != nil {
			return nil, err
		}
		g.Points = append(g.Points, pt)
	}
	if e.cluster == nil && !cfg.Prune {
		g.PruneNote = "not measured: pgflow.prune_data_older_than deletes every flow's old runs in the database; pass Prune (--prune) to measure it on a given database"
		return g, nil
	}
	before, err := e.tableBytes(ctx, queue)
	if err != nil {
		return nil, err
	}
	g.Prune, err = e.measurePrune(ctx, progress)
	if err != nil {
		return nil, err
	}
	if g.Reuse, err = e.vacuumAfterPrune(ctx, queue, before, g.Prune); err != nil {
		return nil, err
	}
	g.AfterPrune = &GrowthPoint{}
	if err := e.measurePoint(ctx, cfg, bf, queue, g.AfterPrune, progress); err != nil {
		return nil, err
	}
	return g, e.reload(ctx, bf.slug, queue, g.Reuse, progress)
}

// measurePoint measures one point on the tables as they are: it tops the backlog up to cfg.Backlog queued runs
// with real starts, vacuums and analyzes the tables, measures the adjacent baseline, checkpoints, then starts
// cfg.Runs runs (measured per run) and lets the workers work cfg.Runs tasks off the backlog (measured per task).
func (e *env) measurePoint(ctx context.Context, cfg Config, bf *benchFlow, queue string, pt *GrowthPoint, progress func(Progress)) error {
	queued, err := e.countRuns(ctx, bf.slug, "started")
	if err != nil {
		return err
	}
	if need := int64(cfg.Backlog) - queued; need > 0 {
		t0 := time.Now()
		if err := startRuns(ctx, e.mon, bf, int(need), cfg.StartBatch, 2, func(done int) {
			progress(Progress{Phase: "backlog", Done: queued + int64(done), Total: int64(cfg.Backlog), Unit: "runs"})
		}); err != nil {
			return err
		}
		pt.BacklogSeconds = time.Since(t0).Seconds()
	}
	t0 := time.Now()
	if _, err := e.mon.Exec(ctx, `vacuum (analyze) pgflow.runs, pgflow.step_states, pgflow.step_tasks, pgflow.workers, `+
		queueTables(queue)); err != nil {
		return fmt.Errorf("vacuum the pgflow and queue tables: %w", err)
	}
	pt.VacuumSeconds = time.Since(t0).Seconds()
	if pt.HistoryRuns, err = e.countRuns(ctx, bf.slug, "completed"); err != nil {
		return err
	}
	if pt.QueuedRuns, err = e.countRuns(ctx, bf.slug, "started"); err != nil {
		return err
	}
	if pt.TableBytes, err = e.tableBytes(ctx, queue); err != nil {
		return err
	}
	if pt.Baseline, err = e.runBaseline(ctx, cfg.BaselineDuration, nil); err != nil {
		return err
	}
	_, err = e.mon.Exec(ctx, `checkpoint`)
	pt.Checkpointed = err == nil
	timer := newStatementTimer()
	if err := e.growthStart(ctx, cfg, bf, pt, timer, progress); err != nil {
		return err
	}
	if err := e.growthWork(ctx, cfg, bf, pt, timer, progress); err != nil {
		return err
	}
	pt.Statements = timer.times()
	return nil
}

// Reuse shows whether pruned space is used again: the tables' size before pruning, after pruning and a plain
// VACUUM, and after pre-loading as many history runs as were pruned (the runs of the point measured after pruning,
// Growth.AfterPrune, are in the tables by then too).
type Reuse struct {
	BytesBeforePrune int64   `json:"bytes_before_prune"`
	BytesAfterVacuum int64   `json:"bytes_after_prune_and_vacuum"`
	ReloadedRuns     int64   `json:"reloaded_runs"`
	BytesAfterReload int64   `json:"bytes_after_reload"`
	VacuumSeconds    float64 `json:"vacuum_seconds"`
}

// vacuumAfterPrune vacuums the tables after pruning and measures their size; the pruned runs are loaded again
// by reload.
func (e *env) vacuumAfterPrune(ctx context.Context, queue string, before int64, pruned []PruneResult) (*Reuse, error) {
	r := &Reuse{BytesBeforePrune: before}
	for _, p := range pruned {
		r.ReloadedRuns += p.RunsPruned
	}
	t0 := time.Now()
	if _, err := e.mon.Exec(ctx, `vacuum pgflow.runs, pgflow.step_states, pgflow.step_tasks, `+queueTables(queue)); err != nil {
		return nil, fmt.Errorf("vacuum after pruning: %w", err)
	}
	r.VacuumSeconds = time.Since(t0).Seconds()
	var err error
	if r.BytesAfterVacuum, err = e.tableBytes(ctx, queue); err != nil {
		return nil, err
	}
	return r, nil
}

// reload pre-loads as many history runs as were pruned and measures the tables' size again.
func (e *env) reload(ctx context.Context, slug, queue string, r *Reuse, progress func(Progress)) error {
	if err := e.preloadHistory(ctx, slug, queue, r.ReloadedRuns, func(done int64) {
		progress(Progress{Phase: "reload", Done: done, Total: r.ReloadedRuns, Unit: "runs"})
	}); err != nil {
		return err
	}
	var err error
	r.BytesAfterReload, err = e.tableBytes(ctx, queue)
	return err
}

// tableBytes is the total size (indexes and TOAST included) of pgflow's run tables and the queue's tables.
func (e *env) tableBytes(ctx context.Context, queue string) (int64, error) {
	var n int64
	if err := e.mon.QueryRow(ctx, `select sum(pg_total_relation_size(c))::bigint from unnest($1::regclass[]) as c`,
		[]string{"pgflow.runs", "pgflow.step_states", "pgflow.step_tasks", queueTable(queue, "q"), queueTable(queue, "a")}).Scan(&n); err != nil {
		return 0, fmt.Errorf("read table sizes: %w", err)
	}
	return n, nil
}

// queueTable is the qualified name of the queue's table ("q") or archive ("a"), as PGMQ names them.
func queueTable(queue, kind string) string {
	return pgx.Identifier{"pgmq", kind + "_" + queue}.Sanitize()
}

func queueTables(queue string) string {
	return queueTable(queue, "q") + ", " + queueTable(queue, "a")
}

func (e *env) countRuns(ctx context.Context, slug, status string) (int64, error) {
	var n int64
	if err := e.mon.QueryRow(ctx, `select count(*) from pgflow.runs as r where r.flow_slug = $1::text and r.status = $2::text`, slug, status).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s runs of %q: %w", status, slug, err)
	}
	return n, nil
}

// preloadHistory inserts n completed one-step runs of the flow the way the engine leaves them: the run, its step
// state and its task completed, the task's message in the queue's archive (message ids drawn from the queue's
// own sequence, so later messages never collide with them). Times are spread over the 29 days before yesterday.
// Run ids are made as the engine makes them (pgflow._new_run_id, version 7) but carry the run's own started_at
// in their time bits, so the history sits in runs_pkey, step_states_pkey and step_tasks_pkey where real starts
// at those times would have put it, and new starts go after it.
// Columns not listed keep their defaults, so the pre-load survives added columns.
func (e *env) preloadHistory(ctx context.Context, slug, queue string, n int64, tick func(done int64)) error {
	conn, err := e.mon.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("bench: preload: %w", err)
	}
	defer conn.Release()
	var step string
	if err := conn.QueryRow(ctx, `select s.step_slug from pgflow.steps as s where s.flow_slug = $1::text`, slug).Scan(&step); err != nil {
		return fmt.Errorf("bench: preload: read the step of %q: %w", slug, err)
	}
	archive := queueTable(queue, "a")
	stmts := []string{
		`create temporary table if not exists pgflow_bench_history (run_id uuid, msg_id bigint, t timestamptz) on commit delete rows`,
		`insert into pgflow_bench_history (run_id, msg_id, t)
		 select encode(overlay(uuid_send(pgflow._new_run_id())
		                       placing substring(int8send(floor(extract(epoch from g.t) * 1000)::int8) from 3 for 6)
		                       from 1 for 6), 'hex')::uuid,
		        g.msg_id, g.t
		   from (select nextval(pg_get_serial_sequence($1::text, 'msg_id')) as msg_id,
		                now() - interval '1 day' - random() * interval '29 days' as t
		           from generate_series(1, $2::int)) as g`,
		`insert into pgflow.runs (run_id, flow_slug, status, input, output, remaining_steps, started_at, completed_at)
		 select h.run_id, $1::text, 'completed', '{}'::jsonb, jsonb_build_object($2::text, '{}'::jsonb), 0, h.t,
		        h.t + interval '12 milliseconds'
		   from pgflow_bench_history as h`,
		`insert into pgflow.step_states (flow_slug, run_id, step_slug, status, remaining_tasks, remaining_deps, initial_tasks,
		                                 output, created_at, started_at, completed_at)
		 select $1::text, h.run_id, $2::text, 'completed', 0, 0, 1, '{}'::jsonb, h.t, h.t, h.t + interval '12 milliseconds'
		   from pgflow_bench_history as h`,
		`insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name, status,
		                                attempts_count, output, queued_at, started_at, completed_at)
		 select $1::text, h.run_id, $2::text, 0, h.msg_id, $3::text, 'completed', 1, '{}'::jsonb, h.t,
		        h.t + interval '5 milliseconds', h.t + interval '12 milliseconds'
		   from pgflow_bench_history as h`,
		`insert into ` + archive + ` (msg_id, read_ct, enqueued_at, archived_at, vt, message)
		 select h.msg_id, 1, h.t, h.t + interval '12 milliseconds', h.t + interval '65 seconds',
		        jsonb_build_object('flow_slug', $1::text, 'run_id', h.run_id, 'step_slug', $2::text, 'task_index', 0)
		   from pgflow_bench_history as h`,
	}
	args := [][]any{nil, {queueTable(queue, "q"), 0}, {slug, step}, {slug, step}, {slug, step, queue}, {slug, step}}
	for done := int64(0); done < n; {
		k := min(int64(preloadChunk), n-done)
		args[1][1] = k
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for i, s := range stmts {
				if _, err := tx.Exec(ctx, s, args[i]...); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("bench: preload %d history runs of %q: %w", k, slug, err)
		}
		done += k
		tick(done)
	}
	return nil
}

// growthStart measures starting cfg.Runs runs on top of the backlog (cost per run).
func (e *env) growthStart(ctx context.Context, cfg Config, bf *benchFlow, pt *GrowthPoint, timer *statementTimer, progress func(Progress)) error {
	var elapsed time.Duration
	cost, err := e.measureCost(ctx, func() error {
		pool, err := newTracedPool(ctx, e.url, starterApp, cfg.Starters, timer)
		if err != nil {
			return err
		}
		defer pool.Close()
		start := time.Now()
		err = startRuns(ctx, pool, bf, cfg.Runs, cfg.StartBatch, cfg.Starters, func(done int) {
			progress(Progress{Phase: "start", Done: int64(done), Total: int64(cfg.Runs), Unit: "runs"})
		})
		elapsed = time.Since(start)
		return err
	})
	if err != nil {
		return err
	}
	pt.Start = GrowthPhase{Count: int64(cfg.Runs), Seconds: elapsed.Seconds()}
	pt.Start.setCost(cost)
	return nil
}

// growthWork lets the workers claim and complete at least cfg.Runs tasks from the backlog, then stops them
// (gracefully: claimed tasks are completed) and measures the cost per completed task.
func (e *env) growthWork(ctx context.Context, cfg Config, bf *benchFlow, pt *GrowthPoint, timer *statementTimer, progress func(Progress)) error {
	before, err := e.countRuns(ctx, bf.slug, "completed")
	if err != nil {
		return err
	}
	var elapsed time.Duration
	finished := &finishedTasks{}
	cost, err := e.measureCost(ctx, func() error {
		wcfg := workerConfig(cfg)
		wcfg.Hooks = finished
		ws, err := e.startTracedWorkers(ctx, cfg, growthScenario, cfg.Workers, wcfg, timer)
		if err != nil {
			return err
		}
		start := time.Now()
		var loopErr error
		for finished.n.Load() < int64(cfg.Runs) && loopErr == nil {
			progress(Progress{Phase: "work", Done: finished.n.Load(), Total: int64(cfg.Runs), Unit: "tasks"})
			select {
			case err := <-ws.done:
				ws.n--
				loopErr = fmt.Errorf("a worker stopped: %v", err)
			default:
				loopErr = backoff.Sleep(ctx, 20*time.Millisecond)
			}
		}
		elapsed = time.Since(start)
		return errors.Join(loopErr, ws.stop())
	})
	if err != nil {
		return err
	}
	after, err := e.countRuns(ctx, bf.slug, "completed")
	if err != nil {
		return err
	}
	pt.Work = GrowthPhase{Count: after - before, Seconds: elapsed.Seconds()}
	pt.Work.setCost(cost)
	return nil
}

// measurePrune installs pgflow.prune_data_older_than and prunes the pre-loaded history (spread over 2 to 30
// days ago) in two calls: the oldest tenth (retention 27 days), then the rest (retention 1 day; the runs of the
// measured phases are younger and stay).
func (e *env) measurePrune(ctx context.Context, progress func(Progress)) ([]PruneResult, error) {
	text, err := schema.OptionalSQL("prune_data_older_than")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if _, err := e.mon.Exec(ctx, text); err != nil {
		return nil, fmt.Errorf("bench: install pgflow.prune_data_older_than: %w", err)
	}
	var out []PruneResult
	for _, retention := range []string{"27 days", "1 day"} {
		progress(Progress{Phase: "prune " + retention})
		r := PruneResult{Retention: retention}
		if err := e.mon.QueryRow(ctx, `select count(*) from pgflow.runs`).Scan(&r.RunsBefore); err != nil {
			return nil, fmt.Errorf("bench: count runs: %w", err)
		}
		var elapsed time.Duration
		cost, err := e.measureCost(ctx, func() error {
			conn, err := connect(ctx, e.url, workerApp+"-prune")
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			t0 := time.Now()
			if _, err := conn.Exec(ctx, `select pgflow.prune_data_older_than($1::interval)`, retention); err != nil {
				return fmt.Errorf("bench: pgflow.prune_data_older_than(%s): %w", retention, err)
			}
			elapsed = time.Since(t0)
			return nil
		})
		if err != nil {
			return nil, err
		}
		var left int64
		if err := e.mon.QueryRow(ctx, `select count(*) from pgflow.runs`).Scan(&left); err != nil {
			return nil, fmt.Errorf("bench: count runs: %w", err)
		}
		r.RunsPruned, r.Seconds = r.RunsBefore-left, elapsed.Seconds()
		if r.RunsPruned > 0 {
			r.MsPer1000Runs = ms(elapsed) * 1000 / float64(r.RunsPruned)
			r.WALBytesPerRun = float64(cost.walBytes) / float64(r.RunsPruned)
			r.RowsPerRun = float64(cost.rows) / float64(r.RunsPruned)
			r.FullPagesPer = float64(cost.fpi) / float64(r.RunsPruned)
		}
		out = append(out, r)
	}
	return out, nil
}

// allPoints lists the measured points: one per size, then the one after pruning when there is one.
func (g *Growth) allPoints() []*GrowthPoint {
	points := make([]*GrowthPoint, 0, len(g.Points)+1)
	for i := range g.Points {
		points = append(points, &g.Points[i])
	}
	if g.AfterPrune != nil {
		points = append(points, g.AfterPrune)
	}
	return points
}

func (g *Growth) ratios(b Baseline) {
	if g == nil {
		return
	}
	for _, p := range g.allPoints() {
		p.Start.ratios(p.Baseline, b, true)
		p.Work.ratios(p.Baseline, b, false)
		for j := range p.Statements {
			p.Statements[j].RatioToBaseline = ratio(p.Statements[j].MeanMs, p.Baseline.LatencyMs)
		}
	}
}
