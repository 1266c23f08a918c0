package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

func TestDashboardRefusesOpenAddressWithoutToken(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "dashboard", "--database-url", "postgres://127.0.0.1:1/none", "--auth-token", "",
		"--listen", "0.0.0.0:0")
	require.Error(t, r.err)
	require.ErrorContains(t, r.err, `refusing to listen on "0.0.0.0:0"`)
	require.ErrorContains(t, r.err, "PGFLOW_DASHBOARD_TOKEN")

	r = runCLI(t, "", "dashboard", "--auth-token", "", "--database-url", "")
	require.ErrorContains(t, r.err, "no database")
}

// TestDashboardServes runs the command's server on a free port: pages are served with the token, the event
// stream listens (on read-only sessions), and cancelling the context ends it even with a stream open.
func TestDashboardServes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), `select pgflow.create_flow('served')`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(context.Background(), `select pgflow.add_step('served', 'only')`)
	require.NoError(t, err)
	var runID string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`select run_id::text from pgflow.start_flow('served', '{}')`).Scan(&runID))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runDashboard(ctx, dashboardOptions{
			url: db.URL, listen: "127.0.0.1:0", token: "tok", staleAfter: time.Minute,
			log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			ready: func(addr string) { addrs <- addr },
		})
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("dashboard stopped before serving: %v", err)
	case <-time.After(waitLimit):
		t.Fatal("dashboard did not start")
	}
	base := "http://" + addr

	get := func(path string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer tok")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return res
	}
	res := get("/flows")
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), `href="/flows/served"`)
	// Every page works on the command's read-only sessions.
	for _, path := range []string{"/flows/served", "/runs", "/runs/" + runID, "/api/runs/" + runID, "/workers",
		"/runs/" + runID + "/json?part=input"} {
		res := get(path)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", path, body)
	}

	res, err = http.Get(base + "/flows")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)

	stream := get("/events")
	defer stream.Body.Close()
	sc := bufio.NewScanner(stream.Body)
	resync := false
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "event: resync" {
			resync = true
			break
		}
	}
	require.True(t, resync, "the event stream reports that it listens")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitLimit):
		t.Fatal("dashboard did not stop after cancel")
	}
}

// Without a token the command serves only requests for loopback names and the --allowed-host names; the
// metrics server follows the same rule.
func TestDashboardAllowedHostFlag(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	r := runCLI(t, "", "dashboard", "--database-url", db.URL, "--auth-token", "", "--allowed-host", "http://dash.internal/")
	require.ErrorContains(t, r.err, `--allowed-host: dashboard: allowed host "http://dash.internal/" is not a host name`)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := newRootCmd()
	out := &syncBuffer{}
	root.SetOut(out)
	root.SetErr(out)
	root.SetArgs([]string{"dashboard", "--database-url", db.URL, "--auth-token", "", "--listen", "127.0.0.1:0",
		"--metrics-listen", "127.0.0.1:0", "--allowed-host", "dash.internal", "--allowed-host", "Other.Example:8080"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	addr := func(prefix, suffix string) string {
		deadline := time.Now().Add(waitLimit)
		for time.Now().Before(deadline) {
			for _, line := range strings.Split(out.String(), "\n") {
				if a, ok := strings.CutPrefix(line, prefix); ok {
					return strings.TrimSuffix(a, suffix)
				}
			}
			select {
			case err := <-done:
				t.Fatalf("dashboard stopped: %v\n%s", err, out.String())
			case <-time.After(20 * time.Millisecond):
			}
		}
		t.Fatalf("no %q line in:\n%s", prefix, out.String())
		return ""
	}
	dash := addr("pgflow dashboard on http://", "/")
	metrics := addr("metrics on http://", "/metrics")

	get := func(url, host string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}
	for _, host := range []string{dash, "localhost", "dash.internal", "dash.internal:8080", "other.example"} {
		status, body := get("http://"+dash+"/flows", host)
		require.Equal(t, http.StatusOK, status, "Host %q: %s", host, body)
	}
	status, body := get("http://"+dash+"/flows", "evil.example")
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, body, `refused host "evil.example"`)
	require.Contains(t, body, "--allowed-host evil.example")

	status, _ = get("http://"+metrics+"/metrics", "dash.internal")
	require.Equal(t, http.StatusOK, status)
	status, body = get("http://"+metrics+"/metrics", "evil.example:9464")
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, body, `refused host "evil.example:9464"`)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitLimit):
		t.Fatal("dashboard did not stop after cancel")
	}
}
