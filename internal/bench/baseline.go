package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// BaselineClients is the number of clients of the baseline loop.
const BaselineClients = 2

// baselineWarmup is run before the measured baseline window.
const baselineWarmup = time.Second

// Baseline is the machine's commit-rate limit measured in the same run: BaselineClients clients, each a loop of
// transactions that insert one row and update it (BEGIN, INSERT, UPDATE, COMMIT: four round trips).
type Baseline struct {
	Clients       int     `json:"clients"`
	Seconds       float64 `json:"seconds"`
	Transactions  int64   `json:"transactions"`
	CommitsPerSec float64 `json:"commits_per_sec"`
	LatencyMs     float64 `json:"latency_ms"`          // mean time of one transaction as a client sees it
	CommitsPerTx  float64 `json:"commits_per_tx"`      // from pg_stat_database (1 plus monitoring noise)
	WALBytesPerTx float64 `json:"wal_bytes_per_tx"`    // pg_current_wal_insert_lsn delta per transaction
	RowsPerTx     float64 `json:"rows_written_per_tx"` // pg_stat_user_tables delta per transaction (2)
	BuffersPerTx  float64 `json:"buffers_per_tx"`      // pg_stat_database blks_hit + blks_read delta per transaction
	// ServerCPUMicrosPerTx is the server's CPU time per transaction (0 when the server is not on this machine).
	ServerCPUMicrosPerTx float64 `json:"server_cpu_us_per_tx,omitempty"`
	// The baseline is measured before and after the scenarios; the figures above combine both measurements
	// (transactions and time added up), so a machine whose speed drifts during the run is averaged.
	CommitsPerSecBefore float64 `json:"commits_per_sec_before,omitempty"`
	CommitsPerSecAfter  float64 `json:"commits_per_sec_after,omitempty"`
}

// combine adds a second measurement of the baseline to b.
func (b Baseline) combine(after Baseline) Baseline {
	c := Baseline{Clients: b.Clients, Seconds: b.Seconds + after.Seconds, Transactions: b.Transactions + after.Transactions,
		CommitsPerSecBefore: b.CommitsPerSec, CommitsPerSecAfter: after.CommitsPerSec}
	c.CommitsPerSec = float64(c.Transactions) / c.Seconds
	c.LatencyMs = float64(c.Clients) * 1000 / c.CommitsPerSec
	w1, w2 := float64(b.Transactions), float64(after.Transactions)
	avg := func(x, y float64) float64 { return (x*w1 + y*w2) / (w1 + w2) }
	c.CommitsPerTx = avg(b.CommitsPerTx, after.CommitsPerTx)
	c.WALBytesPerTx = avg(b.WALBytesPerTx, after.WALBytesPerTx)
	c.RowsPerTx = avg(b.RowsPerTx, after.RowsPerTx)
	c.BuffersPerTx = avg(b.BuffersPerTx, after.BuffersPerTx)
	c.ServerCPUMicrosPerTx = avg(b.ServerCPUMicrosPerTx, after.ServerCPUMicrosPerTx)
	return c
}

const baselineTable = "public.pgflow_bench_baseline"

// runBaseline measures the baseline: a warm-up, then the measured window on fresh connections, with the
// database counters read while no benchmark connection is open (so they are exact).
func (e *env) runBaseline(ctx context.Context, d time.Duration, progress func(Progress)) (Baseline, error) {
	b := Baseline{Clients: BaselineClients}
	if _, err := e.mon.Exec(ctx, `drop table if exists `+baselineTable+`;
		create table `+baselineTable+` (id bigint generated always as identity primary key, n integer not null)`); err != nil {
		return b, fmt.Errorf("bench: create the baseline table: %w", err)
	}
	total := d + baselineWarmup
	report := func(done time.Duration) {
		if progress != nil {
			progress(Progress{Phase: "baseline", Done: int64(done / time.Second), Total: int64(total / time.Second), Unit: "s"})
		}
	}
	if _, _, err := e.baselineLoop(ctx, baselineWarmup, func(t time.Duration) { report(t) }); err != nil {
		return b, err
	}
	if err := e.flushStats(ctx); err != nil {
		return b, err
	}
	before, err := e.snapshot(ctx)
	if err != nil {
		return b, err
	}
	n, elapsed, err := e.baselineLoop(ctx, d, func(t time.Duration) { report(baselineWarmup + t) })
	if err != nil {
		return b, err
	}
	if err := e.flushStats(ctx); err != nil {
		return b, err
	}
	after, err := e.snapshot(ctx)
	if err != nil {
		return b, err
	}
	if n == 0 {
		return b, errors.New("bench: the baseline loop committed nothing")
	}
	dl := before.to(after)
	b.Seconds = elapsed.Seconds()
	b.Transactions = n
	b.CommitsPerSec = float64(n) / elapsed.Seconds()
	b.LatencyMs = float64(BaselineClients) * 1000 / b.CommitsPerSec
	b.CommitsPerTx = float64(dl.commits) / float64(n)
	b.WALBytesPerTx = float64(dl.walBytes) / float64(n)
	b.RowsPerTx = float64(dl.rows) / float64(n)
	b.BuffersPerTx = float64(dl.buffers) / float64(n)
	b.ServerCPUMicrosPerTx = float64(dl.cpu.Microseconds()) / float64(n)
	if _, err := e.mon.Exec(ctx, `drop table `+baselineTable); err != nil {
		return b, fmt.Errorf("bench: drop the baseline table: %w", err)
	}
	return b, nil
}

// baselineTx is one baseline transaction, written as an application writes it: BEGIN, INSERT, UPDATE and COMMIT
// as four statements (four round trips). The statements have no parameters, so pgx sends them with the simple
// protocol (parsed and planned at every call), as pgbench does by default. Parameters would make pgx prepare them
// and raise the baseline by about 15 %, which would make every ratio incomparable with those measured before.
func baselineTx(ctx context.Context, conn *pgxpool.Conn) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `insert into `+baselineTable+` (n) values (0)`); err != nil {
		return err
	}
	// (select lastval()) is an InitPlan, so the row is found through the primary key.
	if _, err := tx.Exec(ctx, `update `+baselineTable+` set n = n + 1 where id = (select lastval())`); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// baselineLoop runs the baseline clients for d on a pool of their own and closes it; it returns the number of
// transactions committed and the time they took.
func (e *env) baselineLoop(ctx context.Context, d time.Duration, tick func(time.Duration)) (int64, time.Duration, error) {
	pool, err := newPool(ctx, e.url, workerApp+"-baseline", BaselineClients)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	conns := make([]*pgxpool.Conn, BaselineClients)
	for i := range conns {
		if conns[i], err = pool.Acquire(ctx); err != nil {
			return 0, 0, fmt.Errorf("bench: baseline: connect: %w", err)
		}
	}
	var count atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, BaselineClients)
	start := time.Now()
	for _, conn := range conns {
		wg.Go(func() {
			defer conn.Release()
			for !stop.Load() {
				if err := baselineTx(ctx, conn); err != nil {
					errs <- err
					return
				}
				count.Add(1)
			}
		})
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	end := time.NewTimer(d)
	defer end.Stop()
	var loopErr error
wait:
	for {
		select {
		case loopErr = <-errs:
			break wait
		case <-ctx.Done():
			loopErr = ctx.Err()
			break wait
		case <-end.C:
			break wait
		case <-t.C:
			tick(time.Since(start))
		}
	}
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	if loopErr != nil {
		return 0, 0, fmt.Errorf("bench: baseline loop: %w", loopErr)
	}
	select {
	case err := <-errs:
		return 0, 0, fmt.Errorf("bench: baseline loop: %w", err)
	default:
	}
	return count.Load(), elapsed, nil
}
