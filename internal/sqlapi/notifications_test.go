package sqlapi_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// listenAll listens on channels and returns a function that reports, in order, the (channel, event type or raw
// payload) of what arrived up to a marker notification sent when it is called.
func listenAll(t *testing.T, url string, channels ...string) func() []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, ch := range channels {
		_, err = conn.Exec(ctx, "listen "+pgx.Identifier{ch}.Sanitize())
		require.NoError(t, err)
	}
	return func() []string {
		marker, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer marker.Close(context.Background())
		_, err = marker.Exec(ctx, `select pg_notify($1, 'marker')`, channels[0])
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var got []string
		for {
			n, err := conn.WaitForNotification(wctx)
			require.NoError(t, err)
			if n.Payload == "marker" {
				return got
			}
			var ev struct {
				EventType string `json:"event_type"`
			}
			what := n.Payload
			if json.Unmarshal([]byte(n.Payload), &ev) == nil && ev.EventType != "" {
				what = ev.EventType
			}
			got = append(got, n.Channel+" "+what)
		}
	}
}

// The deferred calls commit without notifying and hand back what they owe; Send delivers it, in order. This is
// how the client starts runs and the worker records results outside a caller's transaction.
func TestDeferredCallsNotifyOnlyWhenSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	clientFlows(t, db.Pool)
	const worker = "11111111-1111-4111-8111-111111111111"
	collect := listenAll(t, db.URL, "pgflow", "pgflow:queue:chain", sqlapi.WorkerChannel(worker))
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, worker, "chain", "pgflow-go"))
	_, err := sqlapi.HeartbeatWorker(ctx, db.Pool, worker, db.SessionPID(t))
	require.NoError(t, err)
	// The queue has an alive listening worker: read-now wakes go to it alone (targeted wake), fail_task's to the
	// queue.
	wake := sqlapi.WorkerChannel(worker) + " "

	started, notes, err := sqlapi.StartFlowWithStatesDeferred(ctx, db.Pool, "chain", json.RawMessage(`{}`), "")
	require.NoError(t, err)
	require.Equal(t, "started", started.Run.Status, "the start committed")
	require.Empty(t, collect(), "nothing is delivered before Send")
	require.NoError(t, notes.Send(ctx, db.Pool))
	require.Equal(t, []string{"pgflow run:started", "pgflow step:started", wake}, collect())

	runs, notes, err := sqlapi.StartFlowsDeferred(ctx, db.Pool, "chain", []json.RawMessage{json.RawMessage(`{}`)}, nil)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Empty(t, collect())
	require.NoError(t, notes.Send(ctx, db.Pool))
	require.Equal(t, []string{"pgflow run:started", "pgflow step:started", wake}, collect())

	// Complete the first run's first task: step:completed, then step:started of the dependent and its wake-up.
	claimed, _, _, err := sqlapi.ReadAndStartTasks(ctx, db.Pool, "chain", "chain", worker, 1, 30)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	c := claimed[0]
	done, notes, err := sqlapi.CompleteTasksDeferred(ctx, db.Pool, []sqlapi.TaskResult{{RunID: c.RunID, StepSlug: c.StepSlug,
		TaskIndex: c.TaskIndex, Output: json.RawMessage(`1`), Attempt: c.Attempt}})
	require.NoError(t, err)
	require.Equal(t, sqlapi.OutcomeRecorded, done[0].Outcome)
	require.Empty(t, collect())
	require.NoError(t, notes.Send(ctx, db.Pool))
	require.Equal(t, []string{"pgflow step:completed", "pgflow step:started", wake}, collect())

	// A failure that will be retried at once wakes a worker of the queue, after Send only.
	claimed, _, _, err = sqlapi.ReadAndStartTasks(ctx, db.Pool, "chain", "chain", worker, 1, 30)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	c = claimed[0]
	zero := time.Duration(0)
	failed, notes, err := sqlapi.FailTaskAt(ctx, db.Pool, sqlapi.TaskRef{RunID: c.RunID, StepSlug: c.StepSlug,
		TaskIndex: c.TaskIndex, Attempt: c.Attempt}, "boom", false, &zero)
	require.NoError(t, err)
	require.Equal(t, sqlapi.OutcomeRecorded, failed.Outcome)
	require.Empty(t, collect())
	require.NoError(t, notes.Send(ctx, db.Pool))
	require.Equal(t, []string{sqlapi.WorkerChannel(worker) + " "}, collect(), "the registered worker is woken")

	require.NoError(t, sqlapi.Notifications("").Send(ctx, db.Pool), "nothing to send is no call")
}

// A value of pgflow.deferred_notifications left on a pooled connection at session level is not sent along with
// a deferred call's own notifications.
func TestDeferredCallIgnoresAStaleSessionValue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	clientFlows(t, db.Pool)
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `set pgflow.deferred_notifications = '[["pgflow", "stale"]]'`)
	require.NoError(t, err)
	_, notes, err := sqlapi.StartFlowsDeferred(ctx, conn.Conn(), "chain", []json.RawMessage{json.RawMessage(`{}`)}, nil)
	require.NoError(t, err)
	var pairs [][2]string
	require.NoError(t, json.Unmarshal([]byte(notes), &pairs))
	require.Len(t, pairs, 5, "run:started and step:started on two channels each, and the queue's wake-up")
	for _, p := range pairs {
		require.NotEqual(t, "stale", p[1])
	}
}

// A call of DeferNotificationsBelow runs or more commits rarely: it notifies inside its transaction and hands
// nothing back.
func TestLargeDeferredCallNotifiesInItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	clientFlows(t, db.Pool)
	collect := listenAll(t, db.URL, "pgflow:queue:chain")
	inputs := make([]json.RawMessage, sqlapi.DeferNotificationsBelow)
	for i := range inputs {
		inputs[i] = json.RawMessage(`{}`)
	}
	runs, notes, err := sqlapi.StartFlowsDeferred(ctx, db.Pool, "chain", inputs, nil)
	require.NoError(t, err)
	require.Len(t, runs, sqlapi.DeferNotificationsBelow)
	require.Equal(t, sqlapi.Notifications(""), notes)
	require.Equal(t, []string{"pgflow:queue:chain "}, collect(), "the wake-up went out with the commit")
}
