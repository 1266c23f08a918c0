package pgflowprom_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/testutil"
	"github.com/pgflow-go/pgflow/pgflowprom"
)

const waitTimeout = testutil.WaitTimeout

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, cond)
}

// newClient returns a client of pool, closed when the test ends.
func newClient(t *testing.T, pool *pgxpool.Pool) *pgflow.Client {
	t.Helper()
	c, err := pgflow.NewClient(pool, &pgflow.ClientConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// runWorker runs a worker of flow with hooks until the returned stop is called (or the test ends).
func runWorker(t *testing.T, pool *pgxpool.Pool, flow pgflow.AnyFlow, hooks pgflow.Hooks) (w *pgflow.Worker, stop func()) {
	t.Helper()
	w, err := pgflow.NewWorker(newClient(t, pool), &pgflow.WorkerConfig{
		Flows:       []pgflow.WorkerFlow{{Flow: flow}},
		MaxPollWait: time.Second, PollInterval: 20 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond,
		MaintenanceInterval: -1, Hooks: hooks,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, w.Start(ctx)) // returns once the worker is registered and running
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			require.NoError(t, w.Stop(ctx))
		})
	}
	t.Cleanup(stop)
	return w, stop
}

func startRun(t *testing.T, pool *pgxpool.Pool, flow, input string) string {
	t.Helper()
	return testutil.StartRun(t, pool, flow, json.RawMessage(input))
}

func waitRun(t *testing.T, pool *pgxpool.Pool, runID string) string {
	t.Helper()
	return testutil.WaitRun(t, pool, runID).Status
}

// nudgeRetries makes queued retries of runID visible at once instead of after the retry delay.
func nudgeRetries(t *testing.T, pool *pgxpool.Pool, flow, runID string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = pool.Exec(ctx, `select pgmq.set_vt($1, t.message_id, 0) from pgflow.step_tasks as t
			                        where t.run_id = $2 and t.status = 'queued' and t.attempts_count > 0`, flow, runID)
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

// scrape fetches url and parses the Prometheus text format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err, string(body))
	return families
}

// value returns the value of the sample of family name whose labels include want, and whether there is one.
// Histograms yield their sample count.
func value(families map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := families[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func requireValue(t *testing.T, families map[string]*dto.MetricFamily, name string, labels map[string]string, want float64) {
	t.Helper()
	got, ok := value(families, name, labels)
	require.True(t, ok, "no sample of %s%v", name, labels)
	require.Equal(t, want, got, "%s%v", name, labels)
}

func TestCollectorCountsAWorkersTasks(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := pgflow.NewFlow[[]int]("prom_flow")
	sq := pgflow.MapInput(f, "square", func(ctx context.Context, tk *pgflow.Task[[]int], n int) (int, error) {
		if n == 3 && tk.Attempt == 1 {
			return 0, errors.New("three fails once")
		}
		return n * n, nil
	}, pgflow.MaxAttempts(2), pgflow.BaseDelay(time.Second))
	pgflow.Step(f, "sum", func(ctx context.Context, tk *pgflow.Task[[]int]) (int, error) {
		xs, err := sq.Output(tk)
		s := 0
		for _, x := range xs {
			s += x
		}
		return s, err
	}, pgflow.DependsOn(sq))
	bad := pgflow.NewFlow[int]("prom_bad")
	pgflow.Step(bad, "boom", func(ctx context.Context, tk *pgflow.Task[int]) (int, error) {
		panic("always")
	}, pgflow.MaxAttempts(1))

	metrics := pgflowprom.New(pgflowprom.Options{ConstLabels: prometheus.Labels{"service": "test"}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	srv := httptest.NewServer(pgflowprom.Handler(reg))
	t.Cleanup(srv.Close)

	_, stopGood := runWorker(t, db.Pool, f, metrics) // one collector serves two workers
	_, stopBad := runWorker(t, db.Pool, bad, metrics)
	runID := startRun(t, db.Pool, "prom_flow", `[1, 2, 3]`)
	nudgeRetries(t, db.Pool, "prom_flow", runID)
	require.Equal(t, "completed", waitRun(t, db.Pool, runID))
	badRun := startRun(t, db.Pool, "prom_bad", `1`)
	require.Equal(t, "failed", waitRun(t, db.Pool, badRun))
	stopGood() // stopping a worker delivers its pending events
	stopBad()

	m := scrape(t, srv.URL+"/metrics")
	sq3 := map[string]string{"flow": "prom_flow", "step": "square", "queue": "prom_flow", "service": "test"}
	with := func(base map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for bk, bv := range base {
			out[bk] = bv
		}
		return out
	}
	requireValue(t, m, "pgflow_tasks_claimed_total", sq3, 4) // 3 elements + 1 retry
	requireValue(t, m, "pgflow_tasks_finished_total", with(sq3, "outcome", "completed"), 3)
	requireValue(t, m, "pgflow_tasks_finished_total", with(sq3, "outcome", "retried"), 1)
	requireValue(t, m, "pgflow_handler_duration_seconds", with(sq3, "outcome", "ok"), 3)
	requireValue(t, m, "pgflow_handler_duration_seconds", with(sq3, "outcome", "error"), 1)
	requireValue(t, m, "pgflow_task_duration_seconds", with(sq3, "outcome", "completed"), 3)
	requireValue(t, m, "pgflow_tasks_in_flight", sq3, 0)

	sum := map[string]string{"flow": "prom_flow", "step": "sum", "queue": "prom_flow"}
	requireValue(t, m, "pgflow_tasks_claimed_total", sum, 1)
	requireValue(t, m, "pgflow_tasks_finished_total", with(sum, "outcome", "completed"), 1)

	boom := map[string]string{"flow": "prom_bad", "step": "boom", "queue": "prom_bad"}
	requireValue(t, m, "pgflow_tasks_finished_total", with(boom, "outcome", "failed"), 1)
	requireValue(t, m, "pgflow_handler_duration_seconds", with(boom, "outcome", "panic"), 1)
	_, ok := value(m, "pgflow_tasks_finished_total", with(boom, "outcome", "completed"))
	require.False(t, ok, "no completed sample for a step that never completed")

	// Polls: every claimed task came from a poll that claimed; the messages read cover them.
	claimedPolls, ok := value(m, "pgflow_polls_total", map[string]string{"flow": "prom_flow", "outcome": "claimed"})
	require.True(t, ok)
	require.GreaterOrEqual(t, claimedPolls, 1.0)
	require.LessOrEqual(t, claimedPolls, 5.0)
	read, ok := value(m, "pgflow_messages_read_total", map[string]string{"flow": "prom_flow", "queue": "prom_flow"})
	require.True(t, ok)
	require.GreaterOrEqual(t, read, 5.0)
	pollHist, ok := value(m, "pgflow_poll_duration_seconds", map[string]string{"flow": "prom_flow", "outcome": "claimed"})
	require.True(t, ok)
	require.Equal(t, claimedPolls, pollHist)
	require.Equal(t, dto.MetricType_HISTOGRAM, m["pgflow_handler_duration_seconds"].GetType())
}

// Stale results (Hooks.StaleResult) are counted by reason, and a fenced task's outcome "stale" is a finished task.
func TestCollectorCountsStaleResults(t *testing.T) {
	t.Parallel()
	c := pgflowprom.New(pgflowprom.Options{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	ctx := context.Background()
	ev := pgflow.TaskEvent{TaskMeta: pgflow.TaskMeta{FlowSlug: "f", StepSlug: "s", QueueName: "q", Attempt: 1}}
	c.StaleResult(ctx, pgflow.StaleResultEvent{TaskEvent: ev, Reason: pgflow.StaleSuperseded, CurrentAttempt: 2})
	c.StaleResult(ctx, pgflow.StaleResultEvent{TaskEvent: ev, Reason: pgflow.StaleSuperseded})
	c.StaleResult(ctx, pgflow.StaleResultEvent{TaskEvent: ev, Reason: pgflow.StaleTimedOut})
	c.TaskFinished(ctx, pgflow.TaskFinishedEvent{TaskEvent: ev, Outcome: pgflow.OutcomeStale})
	srv := httptest.NewServer(pgflowprom.Handler(reg))
	t.Cleanup(srv.Close)
	m := scrape(t, srv.URL)
	labels := map[string]string{"flow": "f", "step": "s", "queue": "q"}
	with := func(base map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for bk, bv := range base {
			out[bk] = bv
		}
		return out
	}
	requireValue(t, m, "pgflow_stale_results_total", with(labels, "reason", "superseded"), 2)
	requireValue(t, m, "pgflow_stale_results_total", with(labels, "reason", "timed_out"), 1)
	requireValue(t, m, "pgflow_tasks_finished_total", with(labels, "outcome", "stale"), 1)
}

func TestCollectorOptions(t *testing.T) {
	t.Parallel()
	c := pgflowprom.New(pgflowprom.Options{Namespace: "jobs", Buckets: []float64{1, 2}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	ctx := context.Background()
	ev := pgflow.TaskEvent{TaskMeta: pgflow.TaskMeta{FlowSlug: "f", StepSlug: "s", QueueName: "q"}}
	require.Equal(t, ctx, c.TaskStarted(ctx, ev))
	c.HandlerDone(ctx, pgflow.HandlerEvent{TaskEvent: ev, Duration: 1500 * time.Millisecond})
	srv := httptest.NewServer(pgflowprom.Handler(reg))
	t.Cleanup(srv.Close)
	m := scrape(t, srv.URL)
	requireValue(t, m, "jobs_tasks_in_flight", map[string]string{"flow": "f", "step": "s", "queue": "q"}, 1)
	h := m["jobs_handler_duration_seconds"].GetMetric()[0].GetHistogram()
	require.Len(t, h.GetBucket(), 3)                                   // 1, 2, +Inf
	require.Equal(t, uint64(0), h.GetBucket()[0].GetCumulativeCount()) // le=1
	require.Equal(t, uint64(1), h.GetBucket()[1].GetCumulativeCount()) // le=2
}

func TestDatabaseCollectorReportsRunsQueuesAndWorkers(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f := pgflow.NewFlow[int]("db_metrics")
	release := make(chan struct{})
	pgflow.Step(f, "wait", func(ctx context.Context, tk *pgflow.Task[int]) (int, error) {
		in, err := tk.FlowInput(ctx)
		if err != nil || in == 1 {
			return in, err
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return 2, nil
	})
	t.Cleanup(func() { closeOnce(release) })
	_, stop := runWorker(t, db.Pool, f, nil)
	done := startRun(t, db.Pool, "db_metrics", `1`)
	require.Equal(t, "completed", waitRun(t, db.Pool, done))
	startRun(t, db.Pool, "db_metrics", `2`) // stays started while its handler waits
	for range 3 {
		_, err := db.Pool.Exec(context.Background(), `select pgmq.send('db_metrics', '{}'::jsonb, 3600)`)
		require.NoError(t, err) // delayed messages: counted in the queue, not visible
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(pgflowprom.NewDatabaseCollector(newClient(t, db.Pool), pgflowprom.DatabaseOptions{}))
	srv := httptest.NewServer(pgflowprom.Handler(reg))
	t.Cleanup(srv.Close)

	var m map[string]*dto.MetricFamily
	waitFor(t, "the second run's task to start", func() bool {
		m = scrape(t, srv.URL+"/metrics")
		v, _ := value(m, "pgflow_queue_visible_messages", map[string]string{"queue": "db_metrics"})
		return v == 0
	})
	requireValue(t, m, "pgflow_runs", map[string]string{"flow": "db_metrics", "status": "completed"}, 1)
	requireValue(t, m, "pgflow_runs", map[string]string{"flow": "db_metrics", "status": "started"}, 1)
	requireValue(t, m, "pgflow_runs", map[string]string{"flow": "db_metrics", "status": "failed"}, 0)
	requireValue(t, m, "pgflow_queue_messages", map[string]string{"queue": "db_metrics"}, 4) // 3 delayed + 1 in flight
	requireValue(t, m, "pgflow_queue_messages_sent_total", map[string]string{"queue": "db_metrics"}, 5)
	requireValue(t, m, "pgflow_workers", map[string]string{"queue": "db_metrics", "state": "alive"}, 1)
	requireValue(t, m, "pgflow_database_scrape_success", nil, 1)

	closeOnce(release)
	stop()
	m = scrape(t, srv.URL+"/metrics")
	_, ok := value(m, "pgflow_workers", map[string]string{"queue": "db_metrics"})
	require.False(t, ok, "a stopped worker is not counted")
	requireValue(t, m, "pgflow_runs", map[string]string{"flow": "db_metrics", "status": "completed"}, 2)
	requireValue(t, m, "pgflow_runs", map[string]string{"flow": "db_metrics", "status": "cancelled"}, 0)

	c := newClient(t, db.Pool)
	cancelled := startRun(t, db.Pool, "db_metrics", `{}`)
	_, err := c.CancelRun(context.Background(), cancelled, &pgflow.CancelRunOpts{Reason: "metrics test"})
	require.NoError(t, err)
	m = scrape(t, srv.URL+"/metrics")
	requireValue(t, m, "pgflow_runs", map[string]string{"flow": "db_metrics", "status": "cancelled"}, 1)
}

func TestDatabaseCollectorReportsFailedScrapes(t *testing.T) {
	t.Parallel()
	db := pgtest.NewWithPGMQ(t) // no pgflow schema: the run and worker queries fail
	logs := &strings.Builder{}
	var mu sync.Mutex
	reg := prometheus.NewRegistry()
	reg.MustRegister(pgflowprom.NewDatabaseCollector(newClient(t, db.Pool), pgflowprom.DatabaseOptions{
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, logs}, nil)),
	}))
	srv := httptest.NewServer(pgflowprom.Handler(reg))
	t.Cleanup(srv.Close)
	m := scrape(t, srv.URL)
	requireValue(t, m, "pgflow_database_scrape_success", nil, 0)
	_, ok := m["pgflow_runs"]
	require.False(t, ok)
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, logs.String(), "reading runs by status failed")
	require.Contains(t, logs.String(), "pgflow migrate up")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}
