package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow/internal/pgcluster"
	"github.com/pgflow-go/pgflow/schema"
)

// benchDatabase is the database a throwaway cluster gets for the benchmark.
const benchDatabase = "pgflow_bench"

// appPrefix starts the application_name of every benchmark connection; workerApp marks the connections whose
// backends must have exited (and flushed their statistics) before the counters are read. starterApp names the
// pools that start runs, workerPoolApp the pool of the i-th in-process worker.
const (
	appPrefix  = "pgflow-bench"
	workerApp  = appPrefix + "-work"
	starterApp = workerApp + "-starter"
	monitorApp = appPrefix + "-monitor"
)

func workerPoolApp(i int) string { return fmt.Sprintf("%s-%d", workerApp, i) }

// env is the database under test.
type env struct {
	url     string
	cluster *pgcluster.Cluster // nil when DatabaseURL was given
	mon     *pgxpool.Pool      // monitoring and setup (progress polls, starts in burn-down mode, result reads)

	monQueries atomic.Int64 // monitoring transactions during a measured phase, subtracted from its commits
	handled    atomic.Int64 // handler invocations of the in-process workers since the last started (waitRuns)
	statWAL    bool         // the server has pg_stat_wal (PostgreSQL 14+): full-page images are counted
	postmaster int          // the server's process id when it runs on this machine (its CPU time is read), else 0
}

// openEnv starts a durable throwaway cluster (or connects to url), creates the benchmark database and installs
// PGMQ and the pgflow schema.
func openEnv(ctx context.Context, url string) (*env, error) {
	e := &env{url: url}
	if url == "" {
		c, err := pgcluster.Start(ctx, pgcluster.Options{Durable: true})
		if err != nil {
			return nil, fmt.Errorf("bench: start a throwaway PostgreSQL server: %w", err)
		}
		e.cluster = c
		admin, err := pgx.Connect(ctx, c.AdminURL())
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("bench: connect to the throwaway server: %w", err)
		}
		_, err = admin.Exec(ctx, "create database "+benchDatabase)
		_ = admin.Close(ctx)
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("bench: create database %s: %w", benchDatabase, err)
		}
		e.url = c.URL(benchDatabase)
	}
	conn, err := connect(ctx, e.url, appPrefix+"-setup")
	if err != nil {
		e.close()
		return nil, err
	}
	_, err = schema.NewMigrator(conn, nil).Up(ctx, "")
	_ = conn.Close(ctx)
	if err != nil {
		e.close()
		return nil, fmt.Errorf("bench: install the pgflow schema: %w", err)
	}
	e.mon, err = newPool(ctx, e.url, monitorApp, 4)
	if err != nil {
		e.close()
		return nil, err
	}
	if err := e.mon.QueryRow(ctx, `select current_setting('server_version_num')::int >= 140000`).Scan(&e.statWAL); err != nil {
		e.close()
		return nil, fmt.Errorf("bench: read the server version: %w", err)
	}
	e.postmaster = e.findPostmaster(ctx)
	return e, nil
}

func (e *env) close() {
	if e.mon != nil {
		e.mon.Close()
	}
	if e.cluster != nil {
		e.cluster.Stop()
	}
}

func connect(ctx context.Context, url, app string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("bench: bad database URL: %w", err)
	}
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: connect to %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database, err)
	}
	return conn, nil
}

func newPool(ctx context.Context, url, app string, size int) (*pgxpool.Pool, error) {
	return newTracedPool(ctx, url, app, size, nil)
}

// newTracedPool is newPool with a tracer on every connection (also on connections made from the pool's
// ConnConfig, such as a worker's listener).
func newTracedPool(ctx context.Context, url, app string, size int, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("bench: bad database URL: %w", err)
	}
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	cfg.MaxConns = int32(size)
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("bench: connect to %s:%d/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	return pool, nil
}

// statementCounter counts the statements its connections send (each statement of a batch counts).
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// counters are the database-wide cost counters at one moment.
type counters struct {
	commits int64         // pg_stat_database.xact_commit of the benchmark database
	wal     uint64        // pg_current_wal_insert_lsn() as a byte position (WAL written or not yet written: all generated)
	rows    int64         // rows inserted, updated and deleted in the database's tables (pg_stat_user_tables)
	updates int64         // rows updated (pg_stat_user_tables.n_tup_upd)
	hot     int64         // of those, updated without a new index entry (n_tup_hot_upd)
	buffers int64         // shared-buffer accesses of the database's sessions: pg_stat_database.blks_hit + blks_read
	fpi     int64         // full-page images written to the WAL, whole server (pg_stat_wal.wal_fpi; 0 before PostgreSQL 14)
	cpu     time.Duration // the server's CPU time so far, every process of it (0 when the server is not local)
	self    time.Duration // this process's CPU time so far, user + system (the in-process workers' included)
	at      time.Time
}

// snapshot reads the counters on a connection of its own. Statistics of a backend reach the shared counters
// when it is idle for a moment or exits; callers close the measured pools (and waitBackendsGone) first.
func (e *env) snapshot(ctx context.Context) (counters, error) {
	var c counters
	var lsn string
	fpi := "0::bigint"
	if e.statWAL {
		fpi = "(select w.wal_fpi from pg_stat_wal as w)"
	}
	err := e.mon.QueryRow(ctx, `
		select d.xact_commit, d.blks_hit + d.blks_read,
		       pg_current_wal_insert_lsn()::text,
		       t.rows, t.updates, t.hot,
		       `+fpi+`
		  from pg_stat_database as d,
		       (select coalesce(sum(t.n_tup_ins + t.n_tup_upd + t.n_tup_del), 0)::bigint as rows,
		               coalesce(sum(t.n_tup_upd), 0)::bigint as updates,
		               coalesce(sum(t.n_tup_hot_upd), 0)::bigint as hot
		          from pg_stat_user_tables as t) as t
		 where d.datname = current_database()`).
		Scan(&c.commits, &c.buffers, &lsn, &c.rows, &c.updates, &c.hot, &c.fpi)
	if err != nil {
		return c, fmt.Errorf("bench: read the database counters: %w", err)
	}
	c.wal, err = parseLSN(lsn)
	c.at = time.Now()
	if err == nil && e.postmaster != 0 {
		c.cpu, err = serverCPU(e.postmaster)
	}
	if err == nil {
		c.self, err = selfCPU()
	}
	return c, err
}

// parseLSN turns "16/B374D848" into a byte position.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: unreadable WAL position %q", s)
	}
	return h<<32 | l, nil
}

// delta is the cost between two snapshots.
type delta struct {
	commits  int64
	walBytes int64
	rows     int64
	updates  int64
	hot      int64
	buffers  int64
	fpi      int64
	cpu      time.Duration // server CPU time
	selfCPU  time.Duration // this process's CPU time (the workers', the monitor's polls, the bench's own work)
}

func (a counters) to(b counters) delta {
	return delta{commits: b.commits - a.commits, walBytes: int64(b.wal - a.wal), rows: b.rows - a.rows,
		updates: b.updates - a.updates, hot: b.hot - a.hot, buffers: b.buffers - a.buffers, fpi: b.fpi - a.fpi,
		cpu: b.cpu - a.cpu, selfCPU: b.self - a.self}
}

// flushStats makes the statistics of the monitoring pool's backends visible: they are flushed when a backend
// exits, so the pool is closed and reopened.
func (e *env) flushStats(ctx context.Context) error {
	e.mon.Close()
	if err := e.waitBackendsGone(ctx, appPrefix+"-%"); err != nil {
		return err
	}
	var err error
	e.mon, err = newPool(ctx, e.url, monitorApp, 4)
	return err
}

// waitBackendsGone waits until no backend whose application_name is like pattern remains, so that their
// statistics have been flushed (a backend flushes them when it exits). The calling backend is not counted.
func (e *env) waitBackendsGone(ctx context.Context, pattern string) error {
	conn, err := connect(ctx, e.url, "pgflow-stats-wait") // not matching appPrefix: it does not wait for itself
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := conn.QueryRow(ctx, `select count(*) from pg_stat_activity as a
			where a.datname = current_database() and a.application_name like $1 and a.pid <> pg_backend_pid()`, pattern).Scan(&n)
		if err != nil {
			return fmt.Errorf("bench: wait for closed connections: %w", err)
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %d backends named %q still open after 30 s", n, pattern)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Machine describes where the benchmark ran.
type Machine struct {
	CPUs          int               `json:"cpus"`
	CPUModel      string            `json:"cpu_model"`
	GoVersion     string            `json:"go_version"`
	GOMAXPROCS    int               `json:"gomaxprocs"`
	ServerVersion string            `json:"server_version"`
	Settings      map[string]string `json:"settings"` // durability and sizing settings of the server
	Throwaway     bool              `json:"throwaway_cluster"`
	PGMQ          string            `json:"pgmq"`
}

var reportedSettings = []string{"fsync", "synchronous_commit", "full_page_writes", "wal_sync_method",
	"shared_buffers", "max_connections", "wal_level", "checkpoint_timeout", "max_wal_size"}

func (e *env) machine(ctx context.Context) (Machine, error) {
	m := Machine{CPUs: runtime.NumCPU(), CPUModel: cpuModel(), GoVersion: runtime.Version(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), Settings: map[string]string{}, Throwaway: e.cluster != nil}
	if err := e.mon.QueryRow(ctx, `select current_setting('server_version')`).Scan(&m.ServerVersion); err != nil {
		return m, fmt.Errorf("bench: read the server version: %w", err)
	}
	rows, err := e.mon.Query(ctx, `select s.name, current_setting(s.name) from pg_settings as s where s.name = any ($1)`, reportedSettings)
	if err != nil {
		return m, fmt.Errorf("bench: read the server settings: %w", err)
	}
	var name, value string
	if _, err := pgx.ForEachRow(rows, []any{&name, &value}, func() error { m.Settings[name] = value; return nil }); err != nil {
		return m, fmt.Errorf("bench: read the server settings: %w", err)
	}
	var ext bool
	if err := e.mon.QueryRow(ctx, `select exists (select from pg_extension where extname = 'pgmq')`).Scan(&ext); err != nil {
		return m, fmt.Errorf("bench: detect PGMQ: %w", err)
	}
	m.PGMQ = "bundled SQL layer"
	if ext {
		m.PGMQ = "extension"
	}
	return m, nil
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// durable reports whether the server commits durably (fsync and synchronous_commit on).
func (m Machine) durable() bool {
	return m.Settings["fsync"] == "on" && m.Settings["synchronous_commit"] != "off"
}

var errNotDurable = errors.New("the server runs with fsync or synchronous_commit off: figures do not describe a production setup")
