package browsertest

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/dashboard"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// The browser tests' own small set of database helpers (the dashboard package's tests keep theirs in
// internal/dashboard/helpers_test.go, which a test of another module cannot use).

const testWorkerID = "11111111-2222-4333-8444-555555555555"

// env is one test's database and dashboard server.
type env struct {
	t   *testing.T
	db  *pgtest.DB
	srv *httptest.Server
}

// newEnv starts a throwaway database and a dashboard on it with cfg (whose Pool it sets).
func newEnv(t *testing.T, cfg dashboard.Config) *env {
	t.Helper()
	return newEnvOn(t, pgtest.New(t), cfg)
}

// newEnvOn is newEnv on a database the test already started (for a config that needs it, e.g. Actions).
func newEnvOn(t *testing.T, db *pgtest.DB, cfg dashboard.Config) *env {
	t.Helper()
	cfg.Pool = db.Pool
	dash, err := dashboard.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(dash.Handler())
	t.Cleanup(func() {
		dash.Close()
		srv.Close()
	})
	e := &env{t: t, db: db, srv: srv}
	e.exec(`select pgflow.register_worker($1::uuid, 'unused', 'dashboard-browser-test')`, testWorkerID)
	return e
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	_, err := e.db.Pool.Exec(context.Background(), sql, args...)
	require.NoError(e.t, err, sql)
}

func execAll(t *testing.T, pool *pgxpool.Pool, slug string, queries ...string) {
	t.Helper()
	for _, q := range queries {
		_, err := pool.Exec(context.Background(), q, slug)
		require.NoError(t, err, q)
	}
}

// defineDiamond defines flow slug: a -> (b, c) -> d.
func defineDiamond(t *testing.T, pool *pgxpool.Pool, slug string) {
	t.Helper()
	execAll(t, pool, slug,
		`select pgflow.create_flow($1)`,
		`select pgflow.add_step($1, 'a')`,
		`select pgflow.add_step($1, 'b', array['a'])`,
		`select pgflow.add_step($1, 'c', array['a'])`,
		`select pgflow.add_step($1, 'd', array['b', 'c'])`)
}

// defineFan defines flow slug: a root step "prep", a map "each" over prep's output, and "total" after it.
func defineFan(t *testing.T, pool *pgxpool.Pool, slug string) {
	t.Helper()
	execAll(t, pool, slug,
		`select pgflow.create_flow($1)`,
		`select pgflow.add_step($1, 'prep')`,
		`select pgflow.add_step($1, 'each', array['prep'], step_type => 'map')`,
		`select pgflow.add_step($1, 'total', array['each'])`)
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

// runToEnd claims and completes tasks of the flow until nothing is left to claim; output gives each task's output.
func runToEnd(t *testing.T, pool *pgxpool.Pool, flow string, output func(c claimed) string) {
	t.Helper()
	for {
		cs := claim(t, pool, flow)
		if len(cs) == 0 {
			return
		}
		for _, c := range cs {
			completeTask(t, pool, c, output(c))
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
