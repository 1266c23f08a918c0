package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/pgflowprom"
)

func TestDashboardMetricsListenRefusesOpenAddressWithoutToken(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "dashboard", "--database-url", "postgres://127.0.0.1:1/none", "--auth-token", "",
		"--metrics-listen", "0.0.0.0:0")
	require.ErrorContains(t, r.err, "--metrics-listen")
	require.ErrorContains(t, r.err, `refusing to listen on "0.0.0.0:0"`)

	r = runCLI(t, "", "dashboard", "--database-url", "postgres://127.0.0.1:1/none", "--auth-token", "",
		"--metrics-listen", "no-port")
	require.ErrorContains(t, r.err, `listen address "no-port"`)
}

// TestDashboardServesMetrics runs the dashboard with --metrics-listen on a real database and scrapes it.
func TestDashboardServesMetrics(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	startWorker(t, db.Pool, squaresFlow("metric_squares"))
	out := mustCLI(t, "runs", "start", "metric_squares", "--database-url", db.URL, "--input", "[1,2,3]", "--wait")
	require.Contains(t, out, "completed")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runDashboard(ctx, dashboardOptions{
			url: db.URL, listen: "127.0.0.1:0", token: "tok", staleAfter: time.Minute,
			log:           slog.New(slog.NewTextHandler(io.Discard, nil)),
			metricsListen: "127.0.0.1:0",
			metricsReady:  func(addr string) { addrs <- addr },
		})
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("dashboard stopped before serving metrics: %v", err)
	case <-time.After(waitLimit):
		t.Fatal("metrics server did not start")
	}
	url := "http://" + addr + "/metrics"

	res, err := http.Get(url)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode, "the token protects the metrics too")

	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer tok")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	text := string(body)
	require.Contains(t, text, `pgflow_runs{flow="metric_squares",status="completed"} 1`)
	require.Contains(t, text, `pgflow_workers{queue="metric_squares",state="alive"} 1`)
	require.Contains(t, text, `pgflow_queue_messages{queue="metric_squares"} 0`)
	require.Contains(t, text, `pgflow_database_scrape_success 1`)
	require.Contains(t, text, "go_goroutines ", "Go runtime metrics are included")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitLimit):
		t.Fatal("dashboard did not stop after cancel")
	}
	_, err = http.Get(url)
	require.Error(t, err, "the metrics server stops with the dashboard")
}

func TestMetricsServerRegistersExtraCollectors(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	worker := pgflowprom.New(pgflowprom.Options{})
	ms, err := startMetricsServer("127.0.0.1:0", "", nil, db.Pool, time.Minute, slog.New(slog.NewTextHandler(io.Discard, nil)), worker)
	require.NoError(t, err)
	defer func() { require.NoError(t, ms.Close()) }()
	worker.TaskStarted(context.Background(), taskEventFor("f", "s"))
	res, err := http.Get("http://" + ms.Addr() + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.True(t, strings.Contains(string(body), `pgflow_tasks_in_flight{flow="f",queue="f",step="s"} 1`), string(body))

	_, err = startMetricsServer(ms.Addr(), "", nil, db.Pool, time.Minute, slog.Default())
	require.ErrorContains(t, err, "metrics: listen on "+ms.Addr())
}

func taskEventFor(flow, step string) pgflow.TaskEvent {
	return pgflow.TaskEvent{TaskMeta: pgflow.TaskMeta{FlowSlug: flow, StepSlug: step, QueueName: flow}, Time: time.Now()}
}
