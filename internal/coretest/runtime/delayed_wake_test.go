package runtime_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// visibleAt parses a {"visible_at": ...} payload.
func visibleAt(t *testing.T, payload string) time.Time {
	t.Helper()
	var p map[string]string
	require.NoError(t, json.Unmarshal([]byte(payload), &p), payload)
	require.Len(t, p, 1, payload)
	at, err := time.Parse(time.RFC3339Nano, p["visible_at"])
	require.NoError(t, err, payload)
	return at
}

// fail_task with retry_delay: the handler's delay replaces the backoff, retry_at records when the message becomes
// visible (its vt), the attempt is spent, and the queue's workers get one {"visible_at"} notification; a delay of
// 0 wakes them at once with ”; a negative delay is refused before anything changes.
func TestFailTaskRetryDelay(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	db := d.Pool
	fx.Exec(t, db, "select pgflow.create_flow('rd', max_attempts => 3, base_delay => 1000)")
	fx.Exec(t, db, "select pgflow.add_step('rd', 'a')")
	run := fx.StartFlow(t, db, "rd", `{}`)
	msg := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID
	require.Len(t, fx.ReadAndStart(t, db, "rd", 30, 1), 1)

	before := fullState(t, db, run.RunID, "rd")
	_, err := db.Exec(fx.Ctx(t), "select pgflow.fail_task($1::uuid, 'a', 0, 'x', 1, false, -1)", run.RunID)
	requirePgError(t, err, "22023", "fail_task: retry_delay must be >= 0 seconds, got -1 (run "+run.RunID+", step a, task 0)")
	require.Equal(t, before, fullState(t, db, run.RunID, "rd"))

	collect := queueNotifications(t, d.URL, "rd")
	// The worker that claimed says it listens on its own channel: read-now wakes go to it alone.
	fx.Exec(t, db, `select pgflow.heartbeat_worker($1::uuid, listener_pid => pg_catalog.pg_backend_pid())`, fx.DefaultWorker)
	collectWorker := channelNotifications(t, d.URL, workerChannel(fx.DefaultWorker))
	require.Equal(t, "queued", fx.Val[string](t, db,
		"select status from pgflow.fail_task($1::uuid, 'a', 0, 'slow down', attempt => 1, retry_delay => 7)", run.RunID))
	require.InDelta(t, 7, fx.VisibleIn(t, db, "rd", msg), 1.5, "the handler's delay, not 1000 * 2")
	var retryAt, vt time.Time
	require.NoError(t, db.QueryRow(fx.Ctx(t), "select retry_at from pgflow.step_tasks where run_id = $1::uuid", run.RunID).Scan(&retryAt))
	require.NoError(t, db.QueryRow(fx.Ctx(t), "select vt from pgmq.q_rd where msg_id = $1", msg).Scan(&vt))
	require.True(t, retryAt.Equal(vt), "retry_at %v is the message's vt %v", retryAt, vt)
	got := collect()
	require.Len(t, got, 1, "%v", got)
	require.Equal(t, vt.UTC().Truncate(time.Microsecond), visibleAt(t, got[0]).UTC())

	fx.Exec(t, db, "select pgflow.set_vt_batch('rd', array[$1::bigint], array[0])", msg)
	require.Len(t, fx.ReadAndStart(t, db, "rd", 30, 1), 1)
	row := fx.Val[int](t, db, "select attempts_count from pgflow.fail_task($1::uuid, 'a', 0, 'again', attempt => 2, retry_delay => 0)", run.RunID)
	require.Equal(t, 2, row, "the delay spends the attempt")
	require.InDelta(t, 0, fx.VisibleIn(t, db, "rd", msg), 1)
	require.Empty(t, collect(), "visible now: no broadcast while the queue has an alive worker")
	require.Equal(t, []note{{workerChannel(fx.DefaultWorker), ""}}, collectWorker(),
		"visible now: the ordinary wake-up, sent to the queue's alive listening worker (pgflow._wake_queue)")

	require.Len(t, fx.ReadAndStart(t, db, "rd", 30, 1), 1)
	require.Equal(t, "failed", fx.Val[string](t, db,
		"select status from pgflow.fail_task($1::uuid, 'a', 0, 'last', attempt => 3, retry_delay => 5)", run.RunID),
		"an exhausted task fails whatever the delay")
}

// Start delays announce when the messages become visible: one notification per queue and distinct delay of a
// transaction (identical ones folded), whether steps start one by one (start_flow) or in a batch (start_flows), so
// a worker wakes for the later delay too, not only for the earliest.
func TestStartDelaysNotifyVisibleAt(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	db := d.Pool
	fx.Exec(t, db, "select pgflow.create_flow('sd')")
	fx.Exec(t, db, "select pgflow.add_step('sd', 'late', start_delay => 40)")
	fx.Exec(t, db, "select pgflow.add_step('sd', 'soon', start_delay => 20)")
	fx.Exec(t, db, "select pgflow.add_step('sd', 'also_soon', start_delay => 20)")
	fx.Exec(t, db, "select pgflow.add_step('sd', 'now')")
	collect := queueNotifications(t, d.URL, "sd")

	vt := func(step string) time.Time {
		return fx.Val[time.Time](t, db, `select max(q.vt) from pgmq.q_sd q join pgflow.step_tasks t on t.message_id = q.msg_id
			where t.step_slug = $1`, step)
	}
	startedAt := time.Now()
	fx.StartFlow(t, db, "sd", `{}`)
	got := collect()
	require.Len(t, got, 3, "'' once, then one time per distinct delay: %v", got)
	require.Equal(t, "", got[0])
	for i, step := range []string{"soon", "late"} {
		at := visibleAt(t, got[1+i])
		require.False(t, at.Before(vt(step)), "%s: announced %v, visible %v", step, at, vt(step))
		require.Less(t, at.Sub(vt(step)), time.Second, step)
	}
	require.InDelta(t, 20, visibleAt(t, got[1]).Sub(startedAt).Seconds(), 5)
	require.InDelta(t, 40, visibleAt(t, got[2]).Sub(startedAt).Seconds(), 5)

	fx.Exec(t, db, "select pgflow.start_flows('sd', array['{}', '{}']::jsonb[])")
	got = collect()
	require.Len(t, got, 3, "%v", got)
	require.Equal(t, "", got[0])
	require.InDelta(t, 20, time.Until(visibleAt(t, got[1])).Seconds(), 5)
	require.InDelta(t, 40, time.Until(visibleAt(t, got[2])).Seconds(), 5)
}
