package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/dashboard"
)

func defineSchedules(t *testing.T, e *env) {
	t.Helper()
	defineDiamond(t, e.db.Pool, "diamond")
	e.exec(`select pgflow.upsert_schedule('nightly', 'diamond', '30 2 * * *', 'Europe/Berlin', '{}',
		since => '2024-01-01T00:00:00Z', next_tick => '2024-01-01T01:30:00Z')`)
	e.exec(`select pgflow.upsert_schedule('backfill', 'diamond', '@hourly', 'UTC', '{}', missed => 'catch_up',
		max_catch_up => 5, since => '2024-01-01T00:00:00Z')`)
}

func paused(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var p bool
	require.NoError(t, pool.QueryRow(context.Background(), `select paused from pgflow.schedules where schedule_name = $1`, name).Scan(&p))
	return p
}

func TestSchedulesPageReadOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	require.Contains(t, e.ok("/schedules"), "No schedules.")
	defineSchedules(t, e)
	e.exec(`select pgflow.fire_schedule_tick('nightly', '2024-01-02T01:30:00Z', '2024-01-03T01:30:00Z')`)
	e.exec(`select pgflow.pause_schedule('backfill')`)

	body := e.ok("/schedules")
	require.Contains(t, body, `<a href="/schedules" class="current">Schedules</a>`)
	require.Contains(t, body, "2 schedules · 1 paused")
	require.Regexp(t, `(?s)<tr data-schedule="nightly" data-paused="false">.*?<code>30 2 \* \* \*</code>.*?Europe/Berlin.*?skip.*?active.*?2024-01-02 01:30:00.*?2024-01-03 01:30:00.*?<a class="run-id" href="/runs/[0-9a-f-]{36}">`, body)
	require.Regexp(t, `(?s)<tr data-schedule="backfill" data-paused="true">.*?catch up \(at most 5\).*?paused.*?since `, body)
	require.NotContains(t, body, `name="csrf"`, "read-only: no buttons")
	r := e.post("/schedules/backfill/resume", url.Values{"csrf": {"x"}})
	require.Equal(t, http.StatusMethodNotAllowed, r.Status)
	require.True(t, paused(t, e.db.Pool, "backfill"))
}

func TestSchedulesPagePauseResume(t *testing.T) {
	t.Parallel()
	e := newActionEnv(t)
	defineSchedules(t, e)

	body := e.get("/schedules", bearer).Body
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, body)
	csrf := m[1]
	require.Contains(t, body, `action="/schedules/nightly/pause"`)

	// CSRF and Origin protections as for the run actions; nothing changes.
	require.Equal(t, http.StatusForbidden, e.post("/schedules/nightly/pause", url.Values{}, bearer).Status)
	require.Equal(t, http.StatusForbidden, e.post("/schedules/nightly/pause", url.Values{"csrf": {"00" + csrf[2:]}}, bearer).Status)
	r := e.post("/schedules/nightly/pause", url.Values{"csrf": {csrf}}, bearer, func(req *http.Request) {
		req.Header.Set("Origin", "https://evil.example")
	})
	require.Equal(t, http.StatusForbidden, r.Status)
	require.Equal(t, http.StatusUnauthorized, e.post("/schedules/nightly/pause", url.Values{"csrf": {csrf}}).Status)
	require.False(t, paused(t, e.db.Pool, "nightly"))

	r = e.post("/schedules/nightly/pause", url.Values{"csrf": {csrf}}, bearer)
	require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
	require.Equal(t, "/schedules?done=pause&schedule=nightly", r.Header.Get("Location"))
	require.True(t, paused(t, e.db.Pool, "nightly"))
	body = e.get("/schedules?done=pause&schedule=nightly", bearer).Body
	require.Contains(t, body, "Paused schedule nightly.")
	require.Contains(t, body, `action="/schedules/nightly/resume"`)

	r = e.post("/schedules/nightly/resume", url.Values{"csrf": {csrf}}, bearer)
	require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
	require.False(t, paused(t, e.db.Pool, "nightly"))

	r = e.post("/schedules/nope/pause", url.Values{"csrf": {csrf}}, bearer)
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Contains(t, r.Body, "there is no schedule &#34;nope&#34;")
	require.Equal(t, http.StatusMethodNotAllowed, e.post("/schedules/nightly/delete", url.Values{"csrf": {csrf}}, bearer).Status)
}
