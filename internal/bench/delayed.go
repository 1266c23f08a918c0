package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-go/pgflow/internal/backoff"
)

// The delayed scenario's flow and pace.
const (
	DelayedStartStep = "start_delay"          // StartDelay(DelayedWorkDelay)
	DelayedRetryStep = "retry_after"          // the first attempt returns RetryAfter(DelayedWorkDelay, …)
	DelayedWorkDelay = time.Second            // both delays
	delayedMaxRuns   = 20                     // runs of the delayed scenario (fewer when Runs is smaller)
	delayedSpacing   = 100 * time.Millisecond // between run starts: light load, due times spread out
)

// runDelayed measures how late delayed work starts at light load: runs of a flow with a start-delayed step and a
// step whose first attempt asks for its retry after a delay are started one by one, with the workers in their
// default listening configuration (periodic read every 2 s); the latency of a delayed task is the time from when
// it became due to its claim (step_tasks.started_at), both on the database's clock.
func (e *env) runDelayed(ctx context.Context, cfg Config, progress func(Progress)) (*Result, error) {
	bf, err := flowFor(ScenarioDelayed, cfg.DeleteMessages)
	if err != nil {
		return nil, err
	}
	if err := e.prepareFlow(ctx, bf); err != nil {
		return nil, err
	}
	n := max(1, min(cfg.Runs, delayedMaxRuns))
	res := &Result{Scenario: ScenarioDelayed, Mode: fmt.Sprintf("%s delays, runs every %s", DelayedWorkDelay, delayedSpacing),
		Runs: n, Tasks: n * bf.tasksPerRun, Workers: cfg.Workers, MaxConcurrent: cfg.MaxConcurrent, BatchSize: cfg.BatchSize}
	wcfg := workerConfig(cfg)
	wcfg.MaxPollWait = 0 // the default: a listening worker's periodic read every 2 s, as in production
	var elapsed time.Duration
	cost, err := e.measureCost(ctx, func() error {
		ws, err := e.startWorkers(ctx, cfg, ScenarioDelayed, cfg.Workers, wcfg)
		if err != nil {
			return err
		}
		starter, err := newPool(ctx, e.url, starterApp, 1)
		if err != nil {
			return errors.Join(err, ws.stop())
		}
		defer starter.Close()
		start := time.Now()
		var loopErr error
		for i := range n {
			if loopErr = startBatch(ctx, starter, bf, 1); loopErr != nil {
				break
			}
			progress(Progress{Phase: "arrivals", Done: int64(i + 1), Total: int64(n), Unit: "runs"})
			if loopErr = backoff.Sleep(ctx, delayedSpacing); loopErr != nil {
				break
			}
		}
		if loopErr == nil {
			loopErr = e.waitRuns(ctx, bf, int64(n), ws, nil)
		}
		elapsed = time.Since(start)
		return errors.Join(loopErr, ws.stop())
	})
	if err != nil {
		return nil, err
	}
	if err := e.collect(ctx, bf, res, time.Time{}, time.Time{}); err != nil {
		return nil, err
	}
	starts, err := e.delayedLatencies(ctx, bf.slug, `select extract(epoch from t.started_at - (t.queued_at + $3::interval))::float8
		from pgflow.step_tasks as t where t.flow_slug = $1::text and t.step_slug = $2::text and t.status = 'completed'`,
		DelayedStartStep)
	if err != nil {
		return nil, err
	}
	retries, err := e.delayedLatencies(ctx, bf.slug, `select extract(epoch from t.started_at - t.retry_at)::float8
		from pgflow.step_tasks as t where t.flow_slug = $1::text and t.step_slug = $2::text and t.status = 'completed'
		  and t.retry_at is not null and $3::interval is not null`, DelayedRetryStep)
	if err != nil {
		return nil, err
	}
	var sr Result
	sr.setLatency(starts, "")
	res.DelayedStartP50Ms, res.DelayedStartP99Ms = sr.LatencyP50Ms, sr.LatencyP99Ms
	sr = Result{}
	sr.setLatency(retries, "")
	res.DelayedRetryP50Ms, res.DelayedRetryP99Ms = sr.LatencyP50Ms, sr.LatencyP99Ms
	res.setLatency(append(starts, retries...), "database (due time → claim)")
	res.Seconds = elapsed.Seconds()
	res.setCost(cost)
	return res, nil
}

// delayedLatencies reads one latency per task of a step of the delayed scenario's flow.
func (e *env) delayedLatencies(ctx context.Context, slug, query, step string) ([]time.Duration, error) {
	rows, err := e.mon.Query(ctx, query, slug, step, DelayedWorkDelay.String())
	if err != nil {
		return nil, fmt.Errorf("read delayed-work latencies of step %q: %w", step, err)
	}
	secs, err := pgx.CollectRows(rows, pgx.RowTo[float64])
	if err != nil {
		return nil, fmt.Errorf("read delayed-work latencies of step %q: %w", step, err)
	}
	lat := make([]time.Duration, len(secs))
	for i, s := range secs {
		lat[i] = time.Duration(s * float64(time.Second))
	}
	return lat, nil
}
