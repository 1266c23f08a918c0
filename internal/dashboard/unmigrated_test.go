package dashboard_test

import (
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/dashboard"
	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// Against a database without the pgflow schema every page and JSON endpoint says to run `pgflow migrate up`
// (503), instead of a 500 carrying the raw database error and Go call wrapping.
func TestUnmigratedDatabaseSaysToMigrate(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	dash, err := dashboard.New(dashboard.Config{Pool: db.Pool, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(dash.Handler())
	t.Cleanup(func() {
		dash.Close()
		srv.Close()
	})
	const run = "00000000-0000-4000-8000-000000000001"
	for path, names := range map[string]string{
		"/flows":                            "the flows",
		"/flows/orders":                     `flow "orders"`,
		"/runs":                             "the runs",
		"/runs?flow=orders":                 "the runs",
		"/workers":                          "the workers",
		"/runs/" + run:                      "run " + run,
		"/api/runs/" + run:                  "run " + run,
		"/runs/" + run + "/json?part=input": "the input of run " + run,
	} {
		res, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "GET %s: %s", path, body)
		require.Contains(t, string(body), "pgflow migrate up", path)
		require.Contains(t, html.UnescapeString(string(body)), "cannot read "+names, path)
		require.NotContains(t, string(body), "sqlapi", path)
	}
}
