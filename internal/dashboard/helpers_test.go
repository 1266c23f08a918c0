package dashboard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/dashboard"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

const testWorkerID = "11111111-2222-4333-8444-555555555555"

// env is one test's database and dashboard server.
type env struct {
	t    *testing.T
	db   *pgtest.DB
	dash *dashboard.Server
	srv  *httptest.Server
}

func newEnv(t *testing.T, cfg dashboard.Config) *env {
	t.Helper()
	return newEnvFor(t, func(*pgtest.DB) dashboard.Config { return cfg })
}

// newEnvFor is newEnv with a configuration that depends on the test's database.
func newEnvFor(t *testing.T, config func(db *pgtest.DB) dashboard.Config) *env {
	t.Helper()
	db := pgtest.New(t)
	cfg := config(db)
	cfg.Pool = db.Pool
	dash, err := dashboard.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(dash.Handler())
	t.Cleanup(func() {
		dash.Close()
		srv.Close()
	})
	e := &env{t: t, db: db, dash: dash, srv: srv}
	e.exec(`select pgflow.register_worker($1::uuid, 'unused', 'dashboard-test')`, testWorkerID)
	return e
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	_, err := e.db.Pool.Exec(context.Background(), sql, args...)
	require.NoError(e.t, err, sql)
}

// response is a fetched page.
type response struct {
	Status int
	Header http.Header
	Body   string
}

// get fetches path from the dashboard with the optional request tweak.
func (e *env) get(path string, tweak ...func(*http.Request)) response {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	require.NoError(e.t, err)
	for _, f := range tweak {
		f(req)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	return response{Status: res.StatusCode, Header: res.Header, Body: string(body)}
}

// ok fetches path and requires 200.
func (e *env) ok(path string) string {
	e.t.Helper()
	r := e.get(path)
	require.Equal(e.t, http.StatusOK, r.Status, "GET %s: %s", path, r.Body)
	return r.Body
}

// defineDiamond defines flow slug: a -> (b, c) -> d, with options on b.
func defineDiamond(t *testing.T, pool *pgxpool.Pool, slug string) {
	t.Helper()
	for _, q := range []string{
		`select pgflow.create_flow($1, max_attempts => 4, base_delay => 2, timeout => 20)`,
		`select pgflow.add_step($1, 'a')`,
		`select pgflow.add_step($1, 'b', array['a'], max_attempts => 7, timeout => 9, start_delay => 0)`,
		`select pgflow.add_step($1, 'c', array['a'])`,
		`select pgflow.add_step($1, 'd', array['b', 'c'])`,
	} {
		_, err := pool.Exec(context.Background(), q, slug)
		require.NoError(t, err, q)
	}
}

// defineFan defines flow slug: a root step "prep", a map "each" over prep's output, and "total" after it.
func defineFan(t *testing.T, pool *pgxpool.Pool, slug string) {
	t.Helper()
	for _, q := range []string{
		`select pgflow.create_flow($1)`,
		`select pgflow.add_step($1, 'prep')`,
		`select pgflow.add_step($1, 'each', array['prep'], step_type => 'map')`,
		`select pgflow.add_step($1, 'total', array['each'])`,
	} {
		_, err := pool.Exec(context.Background(), q, slug)
		require.NoError(t, err, q)
	}
}

func startRun(t *testing.T, pool *pgxpool.Pool, flow, input string) string {
	t.Helper()
	return testutil.StartRun(t, pool, flow, json.RawMessage(input))
}

type claimed = testutil.Claimed

func claim(t *testing.T, pool *pgxpool.Pool, flow string) []claimed {
	t.Helper()
	return testutil.ClaimAll(t, pool, flow, testWorkerID)
}

func completeTask(t *testing.T, pool *pgxpool.Pool, c claimed, output string) {
	t.Helper()
	testutil.CompleteTask(t, pool, c, output)
}

func failTask(t *testing.T, pool *pgxpool.Pool, c claimed, msg string) {
	t.Helper()
	testutil.FailTask(t, pool, c, msg)
}

// runToEnd claims and completes tasks of the flow until nothing is left to claim; output gives each task's
// output. It returns how many tasks it completed.
func runToEnd(t *testing.T, pool *pgxpool.Pool, flow string, output func(c claimed) string) int {
	t.Helper()
	n := 0
	for {
		cs := claim(t, pool, flow)
		if len(cs) == 0 {
			return n
		}
		for _, c := range cs {
			completeTask(t, pool, c, output(c))
			n++
		}
	}
}

func runStatus(t *testing.T, pool *pgxpool.Pool, runID string) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(),
		`select status from pgflow.runs where run_id = $1::uuid`, runID).Scan(&s))
	return s
}

// sseEvent is one server-sent event.
type sseEvent struct {
	Event string
	Data  string
}

// sseStream reads events from an open event stream.
type sseStream struct {
	events chan sseEvent
	body   io.Closer
}

func (e *env) openEvents(path string) *sseStream {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+path, nil)
	require.NoError(e.t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	require.Equal(e.t, http.StatusOK, res.StatusCode)
	require.Equal(e.t, "text/event-stream", res.Header.Get("Content-Type"))
	s := &sseStream{events: make(chan sseEvent, 100), body: res.Body}
	e.t.Cleanup(func() {
		cancel()
		res.Body.Close()
	})
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(res.Body)
		var cur sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.Event != "" || cur.Data != "" {
					s.events <- cur
				}
				cur = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				cur.Event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				cur.Data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return s
}

// next waits for the next event with the given name, skipping others, up to a generous deadline.
func (s *sseStream) next(t *testing.T, name string) sseEvent {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			require.True(t, ok, "event stream ended while waiting for %q", name)
			if ev.Event == name {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %q event within 30s", name)
		}
	}
}

// countOccurrences counts non-overlapping occurrences of sub in s.
func countOccurrences(s, sub string) int { return strings.Count(s, sub) }
