package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/dashboard"
	"github.com/pgflow-go/pgflow/internal/pgtest"
)

func TestEventsForOneRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineDiamond(t, e.db.Pool, "diamond")
	id := startRun(t, e.db.Pool, "diamond", `{}`)
	other := startRun(t, e.db.Pool, "diamond", `{}`)

	s := e.openEvents("/events?run=" + id)
	s.next(t, "resync") // listening: from here on every change of the run is streamed

	var a claimed
	for _, c := range claim(t, e.db.Pool, "diamond") {
		if c.RunID == other {
			completeTask(t, e.db.Pool, c, `1`) // another run's events do not reach this stream
		} else {
			a = c
		}
	}
	completeTask(t, e.db.Pool, a, `{"v": 1}`)

	ev := s.next(t, "change")
	var env map[string]any
	require.NoError(t, json.Unmarshal([]byte(ev.Data), &env))
	require.Equal(t, id, env["run_id"])
	require.Equal(t, "step:completed", env["event_type"])
	require.Equal(t, "a", env["step_slug"])
	require.Equal(t, "diamond", env["flow_slug"])
	for k, v := range env {
		require.IsType(t, "", v, "field %s is a string", k)
	}
	// Then b and c start.
	for range 2 {
		ev = s.next(t, "change")
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &env))
		require.Equal(t, id, env["run_id"])
		require.Equal(t, "step:started", env["event_type"])
	}

	// Run to the end: the stream reports run:completed.
	runToEnd(t, e.db.Pool, "diamond", func(claimed) string { return `2` })
	for {
		ev = s.next(t, "change")
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &env))
		require.Equal(t, id, env["run_id"])
		if env["event_type"] == "run:completed" {
			break
		}
	}
}

func TestEventsForAFlow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineDiamond(t, e.db.Pool, "one")
	defineDiamond(t, e.db.Pool, "two")

	all := e.openEvents("/events")
	onlyTwo := e.openEvents("/events?flow=two")
	all.next(t, "resync")
	onlyTwo.next(t, "resync")

	r1 := startRun(t, e.db.Pool, "one", `{}`)
	r2 := startRun(t, e.db.Pool, "two", `{}`)

	var env map[string]any
	ev := all.next(t, "change")
	require.NoError(t, json.Unmarshal([]byte(ev.Data), &env))
	require.Equal(t, r1, env["run_id"])
	require.Equal(t, "run:started", env["event_type"])

	ev = onlyTwo.next(t, "change")
	require.NoError(t, json.Unmarshal([]byte(ev.Data), &env))
	require.Equal(t, r2, env["run_id"], "the first event on the flow-filtered stream is two's")
	require.Equal(t, "two", env["flow_slug"])
}

func TestEventsBadRunID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	r := e.get("/events?run=nope")
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Contains(t, r.Body, `"nope"`)
}

// TestEventsResyncAfterReconnect: when the LISTEN connection breaks, the listener reconnects and the stream
// says "resync", so the page re-reads what it may have missed.
func TestEventsResyncAfterReconnect(t *testing.T) {
	t.Parallel()
	e := newEnvFor(t, func(db *pgtest.DB) dashboard.Config {
		return dashboard.Config{Listen: func(ctx context.Context) (*pgx.Conn, error) {
			cfg, err := pgx.ParseConfig(db.URL)
			if err != nil {
				return nil, err
			}
			cfg.RuntimeParams["application_name"] = "dashboard_listener"
			return pgx.ConnectConfig(ctx, cfg)
		}}
	})
	defineDiamond(t, e.db.Pool, "diamond")
	s := e.openEvents("/events")
	s.next(t, "resync")
	var killed int
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), `
with l as materialized (
  select a.pid from pg_stat_activity as a
  where a.datname = current_database() and a.application_name = 'dashboard_listener')
select count(*) filter (where pg_terminate_backend(l.pid)) from l`).Scan(&killed))
	require.Equal(t, 1, killed)
	s.next(t, "resync")
	id := startRun(t, e.db.Pool, "diamond", `{}`)
	var env map[string]any
	require.NoError(t, json.Unmarshal([]byte(s.next(t, "change").Data), &env))
	require.Equal(t, id, env["run_id"])
}
