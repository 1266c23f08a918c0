package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

type notification struct{ Channel, Payload string }

// collectNotifications listens on the given channels, runs action, and returns what arrived up to a marker
// notification sent after it.
func collectNotifications(t *testing.T, url string, channels []string, action func()) []notification {
	t.Helper()
	ctx := fx.Ctx(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	for _, ch := range append(channels, "marker") {
		_, err := conn.Exec(ctx, "listen "+pgx.Identifier{ch}.Sanitize())
		require.NoError(t, err)
	}
	action()
	other, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer other.Close(context.Background())
	_, err = other.Exec(ctx, `select pg_notify('marker', '')`)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var got []notification
	for {
		n, err := conn.WaitForNotification(wctx)
		require.NoError(t, err)
		if n.Channel == "marker" {
			return got
		}
		got = append(got, notification{n.Channel, n.Payload})
	}
}

// _emit_events publishes exactly what one _emit_event call per payload publishes, in the same order: the same
// notifications on both channels and the same realtime.send calls.
func TestEmitEventsEqualsOneEmitEventPerPayload(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.InstallRealtime(t, db.Pool)
	fx.Exec(t, db.Pool, "select pgflow.create_flow('ev')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('ev', 's')")
	runA := fx.StartFlow(t, db.Pool, "ev", `{}`).RunID
	runB := fx.StartFlow(t, db.Pool, "ev", `{}`).RunID
	payloads := []string{
		`{"event_type": "step:completed", "run_id": "` + runA + `", "flow_slug": "ev", "step_slug": "s", "status": "completed", "output": {"x": [1, 2]}}`,
		`{"event_type": "run:completed", "run_id": "` + runA + `", "flow_slug": "ev", "status": "completed", "output": null}`,
		`{"event_type": "step:started", "run_id": "` + runB + `", "step_slug": "s", "status": "started", "remaining_tasks": 1}`, // no flow_slug: looked up
		`{"event_type": "run:failed", "run_id": "` + runB + `", "flow_slug": "ev", "status": "failed", "error_message": "boom"}`,
	}
	channels := []string{"pgflow", "pgflow:run:" + runA, "pgflow:run:" + runB}
	fx.Exec(t, db.Pool, `delete from realtime.messages`)

	one := collectNotifications(t, db.URL, channels, func() {
		tx, err := db.Pool.Begin(fx.Ctx(t))
		require.NoError(t, err)
		for _, p := range payloads {
			_, err := tx.Exec(fx.Ctx(t), `select pgflow._emit_event(p, case
				  when p ->> 'step_slug' is null then p ->> 'event_type'
				  else 'step:' || (p ->> 'step_slug') || ':' || split_part(p ->> 'event_type', ':', 2) end,
				(p ->> 'run_id')::uuid) from (select $1::jsonb as p) as x`, p)
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit(fx.Ctx(t)))
	})
	realtimeOne := fx.RealtimeEvents(t, db.Pool, "")
	fx.Exec(t, db.Pool, `delete from realtime.messages`)

	many := collectNotifications(t, db.URL, channels, func() {
		fx.Exec(t, db.Pool, `select pgflow._emit_events($1::jsonb[])`, payloads)
	})
	realtimeMany := fx.RealtimeEvents(t, db.Pool, "")

	require.Len(t, one, 2*len(payloads))
	require.Equal(t, one, many, "same channels, envelopes and order")
	require.Len(t, realtimeMany, len(payloads))
	for i := range realtimeOne {
		require.Equal(t, realtimeOne[i].Topic, realtimeMany[i].Topic)
		require.Equal(t, realtimeOne[i].Event, realtimeMany[i].Event)
		require.Equal(t, realtimeOne[i].Raw, realtimeMany[i].Raw)
		require.False(t, realtimeMany[i].Private)
	}
	require.Contains(t, many[4].Payload, `"flow_slug": "ev"`, "a payload without flow_slug gets the run's")

	fx.Exec(t, db.Pool, `select pgflow._emit_events('{}')`)
	fx.Exec(t, db.Pool, `select pgflow._emit_events(null)`)
}
