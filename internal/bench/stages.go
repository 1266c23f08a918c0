package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// LatencyStages splits the latency scenario's start-to-completion latency into four consecutive parts, with the
// server's timestamps (each the start of the transaction that wrote it: PostgreSQL's now()) between the client's.
// For every run the four parts add up to its latency, so the stage that grows with the load is the one to look at.
// Each is given as its own p50 and p99 over the runs that arrived after the warm-up; percentiles do not add up.
// They are reported only when the server runs on this machine (one clock for both sides).
type LatencyStages struct {
	// Runs is the number of runs the stages describe.
	Runs int `json:"runs"`
	// ToStart: from the run's scheduled arrival to the start of the transaction that started it (the client's
	// coalescing: waiting for a connection, or for the start call of the same flow in flight).
	ToStart StagePercentiles `json:"to_start"`
	// ToClaim: from there to the start of the transaction that claimed its task (the start call and its commit,
	// the wake of a worker, the worker's own read in flight).
	ToClaim StagePercentiles `json:"to_claim"`
	// ToCompletion: from the claim to the start of the transaction that recorded its output (the claim call, the
	// handler, the wait for a flusher).
	ToCompletion StagePercentiles `json:"to_completion"`
	// ToEvent: from there to the run:completed event's arrival at the client (the completion call and its
	// commit, the send of its notifications, their delivery).
	ToEvent StagePercentiles `json:"to_event"`
}

// StagePercentiles are one stage's percentiles in milliseconds.
type StagePercentiles struct {
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

func stagePercentiles(d []time.Duration) StagePercentiles {
	slices.Sort(d)
	return StagePercentiles{P50Ms: ms(percentile(d, 50)), P99Ms: ms(percentile(d, 99))}
}

// serverRunTimes are a latency run's timestamps in the database, each the start of the transaction that wrote it.
type serverRunTimes struct {
	runID                       string
	started, claimed, completed time.Time // run started, its task claimed, its task completed
}

// latencyStages reads the server's timestamps of the latency scenario's runs (their one task's claim and
// completion) and splits the latencies of the runs in ends at them (stagesOf).
func (e *env) latencyStages(ctx context.Context, slug string, ends map[string]clientRunTimes) (*LatencyStages, error) {
	rows, err := e.mon.Query(ctx, `select r.run_id::text, r.started_at, t.started_at, t.completed_at
		from pgflow.runs as r
		join pgflow.step_tasks as t on t.run_id = r.run_id
		where r.flow_slug = $1::text and t.status = 'completed'`, slug)
	if err != nil {
		return nil, fmt.Errorf("read the latency scenario's run times: %w", err)
	}
	server, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (serverRunTimes, error) {
		var x serverRunTimes
		err := r.Scan(&x.runID, &x.started, &x.claimed, &x.completed)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the latency scenario's run times: %w", err)
	}
	return stagesOf(ends, server), nil
}

// stagesOf splits the latency of every run in ends that server has times for; runs on one side only are left
// out (the warm-up's, a run the client did not pair). Nil when no run is on both.
func stagesOf(ends map[string]clientRunTimes, server []serverRunTimes) *LatencyStages {
	var toStart, toClaim, toCompletion, toEvent []time.Duration
	for _, s := range server {
		c, ok := ends[s.runID]
		if !ok {
			continue
		}
		toStart = append(toStart, s.started.Sub(c.arrived))
		toClaim = append(toClaim, s.claimed.Sub(s.started))
		toCompletion = append(toCompletion, s.completed.Sub(s.claimed))
		toEvent = append(toEvent, c.completed.Sub(s.completed))
	}
	if len(toStart) == 0 {
		return nil
	}
	return &LatencyStages{
		Runs:         len(toStart),
		ToStart:      stagePercentiles(toStart),
		ToClaim:      stagePercentiles(toClaim),
		ToCompletion: stagePercentiles(toCompletion),
		ToEvent:      stagePercentiles(toEvent),
	}
}
