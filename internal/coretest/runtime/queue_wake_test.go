package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// queueNotifications listens on pgflow:queue:<queue> and returns a function that collects what arrived, waiting
// until a marker notification sent after the action shows that everything before it was delivered.
func queueNotifications(t *testing.T, url, queue string) func() []string {
	t.Helper()
	ctx := fx.Ctx(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	channel := "pgflow:queue:" + queue
	_, err = conn.Exec(ctx, "listen "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	return func() []string {
		// Notifications are delivered in commit order: the marker comes after everything committed before it.
		marker, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer marker.Close(context.Background())
		_, err = marker.Exec(ctx, `select pg_notify($1, 'marker')`, channel)
		require.NoError(t, err)
		var got []string
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for {
			n, err := conn.WaitForNotification(wctx)
			require.NoError(t, err)
			if n.Payload == "marker" {
				return got
			}
			got = append(got, n.Payload)
		}
	}
}

// Starting steps announces the queue once per transaction, however many messages and runs; delayed steps and
// steps of other queues do not wake the queue's workers.
func TestStartingStepsNotifiesTheQueueOncePerTransaction(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db.Pool, "select pgflow.create_flow('wake')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('wake', 'a')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('wake', 'b')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('wake', 'each', step_type => 'map')")
	fx.Exec(t, db.Pool, "select pgflow.create_flow('later')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('later', 'x', start_delay => 60)")
	collect := queueNotifications(t, db.URL, "wake")
	collectLater := queueNotifications(t, db.URL, "later")

	fx.Exec(t, db.Pool, `select pgflow.start_flow('wake', '[1, 2, 3]')`)
	require.Equal(t, []string{""}, collect(), "one start_flow: one notification for three steps and five messages")

	fx.Exec(t, db.Pool, `select pgflow.start_flows('wake', array['[1]', '[2, 3]', '[]']::jsonb[])`)
	require.Equal(t, []string{""}, collect(), "one start_flows call: one notification")

	fx.Exec(t, db.Pool, `select pgflow.start_flow('later', '{}')`)
	fx.Exec(t, db.Pool, `select pgflow.start_flows('later', array['{}', '{}']::jsonb[])`)
	later := collectLater()
	require.Len(t, later, 2, "delayed messages are not visible yet: no '' wake-up, one visible_at per transaction")
	for _, p := range later {
		require.Contains(t, p, `{"visible_at":"`)
	}
	require.Empty(t, collect(), "other queues are not notified")

	// Completing tasks that start dependents announces them too.
	fx.Exec(t, db.Pool, "select pgflow.create_flow('chain')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('chain', 'one')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('chain', 'two', array['one'])")
	collectChain := queueNotifications(t, db.URL, "chain")
	fx.Exec(t, db.Pool, `select pgflow.start_flows('chain', array['{}', '{}']::jsonb[])`)
	require.Equal(t, []string{""}, collectChain())
	tasks := fx.ReadAndStartFrom(t, db.Pool, "chain", "chain", 60, 10)
	require.Len(t, tasks, 2)
	completeTasks(t, db.Pool, outputsFor(tasks, func(fx.Task) string { return `1` }))
	require.Equal(t, []string{""}, collectChain(), "one complete_tasks call starting two steps: one notification")
}
