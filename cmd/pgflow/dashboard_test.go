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
