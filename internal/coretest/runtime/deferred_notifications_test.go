package runtime_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// A transaction that sets pgflow.defer_notifications notifies nothing: every notification it would have sent is
// in pgflow.deferred_notifications instead, in order; without the setting the same calls notify as before.
func TestDeferredNotificationsAreCollectedNotSent(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := fx.Ctx(t)
	fx.Exec(t, db.Pool, "select pgflow.create_flow('quiet')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('quiet', 'only')")
	collect := queueNotifications(t, db.URL, "quiet")

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it does nothing
	_, err = tx.Exec(ctx, `select pg_catalog.set_config('pgflow.defer_notifications', 'on', true)`)
	require.NoError(t, err)
	var runID string
	require.NoError(t, tx.QueryRow(ctx, `select run_id::text from pgflow.start_flow('quiet', '{}')`).Scan(&runID))
	var single, pending string
	require.NoError(t, tx.QueryRow(ctx, `select pg_catalog.current_setting('pgflow.deferred_notifications')`).Scan(&single))
	_, err = tx.Exec(ctx, `select pgflow.start_flows('quiet', array['{}', '{}']::jsonb[])`)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, `select pg_catalog.current_setting('pgflow.deferred_notifications')`).Scan(&pending))
	require.NoError(t, tx.Commit(ctx))
	require.Empty(t, collect(), "a deferring transaction notifies nothing, not even the queue")

	var pairs [][2]string
	require.NoError(t, json.Unmarshal([]byte(single), &pairs))
	var channels []string
	for _, p := range pairs {
		channels = append(channels, p[0])
	}
	// start_flow: run:started on both channels, then step:started on both, then the queue's wake-up.
	require.Equal(t, []string{"pgflow", "pgflow:run:" + runID, "pgflow", "pgflow:run:" + runID, "pgflow:queue:quiet"}, channels)
	var ev struct {
		EventType string `json:"event_type"`
		RunID     string `json:"run_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(pairs[0][1]), &ev))
	require.Equal(t, "run:started", ev.EventType)
	require.Equal(t, runID, ev.RunID)
	require.NoError(t, json.Unmarshal([]byte(pairs[2][1]), &ev))
	require.Equal(t, "step:started", ev.EventType)
	require.Equal(t, "", pairs[4][1], "the wake-up payload")

	var all [][2]string
	require.NoError(t, json.Unmarshal([]byte(pending), &all))
	require.Len(t, all, len(pairs)+2*4+1, "the second call appends: 2 runs × 2 events × 2 channels + 1 wake-up")
	require.Equal(t, pairs, all[:len(pairs)], "appended after what the first call deferred")

	// Without the setting the same start notifies inside its transaction, as before.
	fx.Exec(t, db.Pool, `select pgflow.start_flow('quiet', '{}')`)
	require.Equal(t, []string{""}, collect())
}
