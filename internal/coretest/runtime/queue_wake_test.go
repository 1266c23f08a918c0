package runtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// queueNotifications listens on pgflow:queue:<queue> and returns a function that collects the payloads that
// arrived, waiting until a marker notification sent after the action shows that everything before it was
// delivered.
func queueNotifications(t *testing.T, url, queue string) func() []string {
	t.Helper()
	collect := channelNotifications(t, url, "pgflow:queue:"+queue)
	return func() []string {
		var got []string
		for _, n := range collect() {
			got = append(got, n.Payload)
		}
		return got
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
	// Claiming registered the queue's (alive) default worker; once its heartbeat says it listens on its own channel,
	// wakes go to it alone.
	fx.Exec(t, db.Pool, `select pgflow.heartbeat_worker($1::uuid, listener_pid => pg_catalog.pg_backend_pid())`, fx.DefaultWorker)
	collectWorker := channelNotifications(t, db.URL, workerChannel(fx.DefaultWorker))
	completeTasks(t, db.Pool, outputsFor(tasks, func(fx.Task) string { return `1` }))
	require.Equal(t, []note{{workerChannel(fx.DefaultWorker), ""}}, collectWorker(),
		"one complete_tasks call starting two steps: one notification")
	require.Empty(t, collectChain(), "an alive worker was told: no broadcast")
}

func workerChannel(id string) string { return "pgflow:w:" + id }

// note is one notification: its channel and payload.
type note struct{ Channel, Payload string }

// channelNotifications listens on the channels and returns a function that collects what arrived on any of them,
// waiting until a marker notification sent after the action shows that everything before it was delivered
// (testutil.Notifications, split into channel and payload).
func channelNotifications(t *testing.T, url string, channels ...string) func() []note {
	t.Helper()
	collect := testutil.Notifications(t, url, channels...)
	return func() []note {
		var got []note
		for _, n := range collect() {
			channel, payload, _ := strings.Cut(n, " ") // channel names here have no space
			got = append(got, note{channel, payload})
		}
		return got
	}
}

// A read-now wake goes to exactly one alive worker of the queue, on its own channel, and not to the queue channel;
// stopped, deprecated and stale workers are never chosen; with no alive worker the queue channel gets it.
func TestWakeTargetsOneAliveWorker(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db.Pool, "select pgflow.create_flow('target')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('target', 'only')")
	fx.Exec(t, db.Pool, "select pgflow.create_flow('later')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('later', 'x', start_delay => 60)")
	alive := []string{"a0000000-0000-4000-8000-000000000001", "a0000000-0000-4000-8000-000000000002",
		"a0000000-0000-4000-8000-000000000003"}
	const (
		stopped    = "d0000000-0000-4000-8000-000000000001"
		deprecated = "d0000000-0000-4000-8000-000000000002"
		stale      = "d0000000-0000-4000-8000-000000000003"
		otherQueue = "d0000000-0000-4000-8000-000000000004"
	)
	for _, id := range append(append([]string{}, alive...), stopped, deprecated, stale) {
		fx.Exec(t, db.Pool, `select pgflow.register_worker($1::uuid, 'target', 'pgflow-go')`, id)
		fx.Exec(t, db.Pool, `select pgflow.heartbeat_worker($1::uuid, listener_pid => pg_catalog.pg_backend_pid())`, id)
	}
	fx.Exec(t, db.Pool, `select pgflow.register_worker($1::uuid, 'other', 'pgflow-go')`, otherQueue)
	fx.Exec(t, db.Pool, `select pgflow.heartbeat_worker($1::uuid, listener_pid => pg_catalog.pg_backend_pid())`, otherQueue)
	fx.Exec(t, db.Pool, `select pgflow.mark_worker_stopped($1::uuid)`, stopped)
	fx.Exec(t, db.Pool, `update pgflow.workers set deprecated_at = now() where worker_id = $1::uuid`, deprecated)
	fx.Exec(t, db.Pool, `update pgflow.workers set last_heartbeat_at = now() - interval '31 seconds'
		where worker_id = $1::uuid`, stale)
	var channels []string
	for _, id := range append(append([]string{}, alive...), stopped, deprecated, stale, otherQueue) {
		channels = append(channels, workerChannel(id))
	}
	channels = append(channels, "pgflow:queue:target", "pgflow:queue:later")
	collect := channelNotifications(t, db.URL, channels...)

	chosen := map[string]int{}
	for range 30 {
		fx.Exec(t, db.Pool, `select pgflow.start_flow('target', '{}')`)
		got := collect()
		require.Len(t, got, 1, "one start: one notification")
		require.Empty(t, got[0].Payload, "payload '': read now")
		var ok bool
		for _, id := range alive {
			if got[0].Channel == workerChannel(id) {
				ok = true
			}
		}
		require.True(t, ok, "%s is the channel of an alive worker of the queue", got[0].Channel)
		chosen[got[0].Channel]++
	}
	// Chance that 30 random choices among 3 all pick the same worker: 3 * 3^-30.
	require.Greater(t, len(chosen), 1, "the choice spreads over the alive workers: %v", chosen)

	// Delayed messages are still announced on the queue channel (every worker remembers their time).
	fx.Exec(t, db.Pool, `select pgflow.register_worker($1::uuid, 'later', 'pgflow-go')`, alive[0])
	fx.Exec(t, db.Pool, `select pgflow.heartbeat_worker($1::uuid, listener_pid => pg_catalog.pg_backend_pid())`, alive[0])
	fx.Exec(t, db.Pool, `select pgflow.start_flow('later', '{}')`)
	got := collect()
	require.Len(t, got, 1)
	require.Equal(t, "pgflow:queue:later", got[0].Channel)
	require.Contains(t, got[0].Payload, `{"visible_at":"`)

	// No alive worker left (the first one now serves 'later', the others stopped or stale): broadcast.
	fx.Exec(t, db.Pool, `select pgflow.mark_worker_stopped($1::uuid)`, alive[1])
	fx.Exec(t, db.Pool, `update pgflow.workers set last_heartbeat_at = now() - interval '1 hour'
		where worker_id = $1::uuid`, alive[2])
	fx.Exec(t, db.Pool, `select pgflow.start_flow('target', '{}')`)
	require.Equal(t, []note{{"pgflow:queue:target", ""}}, collect(), "no alive worker: the queue channel")

	// A heartbeat makes a worker alive again.
	fx.Exec(t, db.Pool, `select pgflow.heartbeat_worker($1::uuid, listener_pid => pg_catalog.pg_backend_pid())`, stale)
	fx.Exec(t, db.Pool, `select pgflow.start_flow('target', '{}')`)
	require.Equal(t, []note{{workerChannel(stale), ""}}, collect(), "the only alive worker")
}

// A read-now wake never goes to the own channel of a worker that does not listen there (listens_at NULL): one that
// registered and heartbeats through pgflow's signatures (a TypeScript worker), one whose last heartbeat said it does
// not listen (a Go worker whose LISTEN connection is down), one that registered again. With only such alive workers
// the queue channel gets the wake; with one listening worker among them, exactly that one is told, every time.
func TestWakeNeverTargetsAWorkerThatDoesNotListen(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db.Pool, "select pgflow.create_flow('mixed')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('mixed', 'only')")
	const (
		typescript = "e0000000-0000-4000-8000-000000000001" // pgflow's signatures only
		lost       = "e0000000-0000-4000-8000-000000000002" // listened, then its heartbeat said it no longer does
		restarted  = "e0000000-0000-4000-8000-000000000003" // listened, then registered again
		listener   = "e0000000-0000-4000-8000-000000000004"
	)
	for _, id := range []string{typescript, lost, restarted, listener} {
		fx.Exec(t, db.Pool, `select pgflow.register_worker($1::uuid, 'mixed', 'test')`, id)
	}
	fx.Exec(t, db.Pool, `select pgflow.heartbeat_worker($1::uuid)`, typescript)
	fx.Exec(t, db.Pool, `select pgflow.heartbeat_worker($1::uuid, listener_pid => pg_catalog.pg_backend_pid())`, lost)
	fx.Exec(t, db.Pool, `select pgflow.heartbeat_worker($1::uuid, listener_pid => null)`, lost)
	fx.Exec(t, db.Pool, `select pgflow.heartbeat_worker($1::uuid, listener_pid => pg_catalog.pg_backend_pid())`, restarted)
	fx.Exec(t, db.Pool, `select pgflow.register_worker($1::uuid, 'mixed', 'test')`, restarted)
	collect := channelNotifications(t, db.URL, workerChannel(typescript), workerChannel(lost), workerChannel(restarted),
		workerChannel(listener), "pgflow:queue:mixed")
	require.Equal(t, int64(4), fx.Val[int64](t, db.Pool, `select count(*) from pgflow.workers
		where queue_name = 'mixed' and stopped_at is null and deprecated_at is null
		  and last_heartbeat_at >= now() - interval '30 seconds'`), "all four workers are alive")

	// No alive worker listens on its own channel: the queue channel, every time.
	for i := range 10 {
		fx.Exec(t, db.Pool, `select pgflow.start_flow('mixed', '{}')`)
		require.Equal(t, []note{{"pgflow:queue:mixed", ""}}, collect(), "start %d: no listening worker: broadcast", i)
	}

	// One listens: it alone is told, every time (the three others are never chosen).
	fx.Exec(t, db.Pool, `select pgflow.heartbeat_worker($1::uuid, listener_pid => pg_catalog.pg_backend_pid())`, listener)
	for i := range 20 {
		fx.Exec(t, db.Pool, `select pgflow.start_flow('mixed', '{}')`)
		require.Equal(t, []note{{workerChannel(listener), ""}}, collect(), "start %d: the only listening worker", i)
	}

	// Its next heartbeat says it stopped listening: broadcast again.
	fx.Exec(t, db.Pool, `select pgflow.heartbeat_worker($1::uuid, listener_pid => null)`, listener)
	fx.Exec(t, db.Pool, `select pgflow.start_flow('mixed', '{}')`)
	require.Equal(t, []note{{"pgflow:queue:mixed", ""}}, collect(), "it stopped listening")

	// The lookup's conditions imply idx_workers_listening's predicate: the index serves it (forced here, since
	// the planner prefers reading a table this small whole).
	ctx := fx.Ctx(t)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `set local enable_seqscan = off`)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, `
		explain (costs off)
		select w.worker_id from pgflow.workers as w
		 where w.queue_name = 'mixed' and w.stopped_at is null and w.deprecated_at is null and w.listens_at is not null
		   and w.last_heartbeat_at >= clock_timestamp() - interval '30 seconds'
		 order by pg_catalog.random() limit 1`)
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, strings.Join(plan, "\n"), "idx_workers_listening")
}

// A worker killed without stopping keeps a recent heartbeat for up to 30 s, but the session it listened in ended
// with it. The next heartbeat of another worker of its queue forgets that session (and no live one): from then on
// a read-now wake never goes to the dead worker. It goes to another listening worker of the queue, or to the queue
// channel when none is left.
func TestHeartbeatsForgetListeningSessionsThatEnded(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db.Pool, "select pgflow.create_flow('gone')")
	fx.Exec(t, db.Pool, "select pgflow.add_step('gone', 'only')")
	const (
		dead      = "f0000000-0000-4000-8000-000000000001"
		live      = "f0000000-0000-4000-8000-000000000002"
		newcomer  = "f0000000-0000-4000-8000-000000000003" // a worker that does not listen on its own channel
		elsewhere = "f0000000-0000-4000-8000-000000000004" // a worker of another queue
	)
	// kill ends a session as a crash would, and waits until the server no longer lists it.
	kill := func(pid uint32) {
		require.True(t, fx.Val[bool](t, db.Pool, `select pg_catalog.pg_terminate_backend($1::integer)`, pid))
		require.Eventually(t, func() bool {
			return !fx.Val[bool](t, db.Pool, `select exists (select from pg_catalog.pg_stat_activity where pid = $1::integer)`, pid)
		}, time.Minute, 10*time.Millisecond, "session %d ends", pid)
	}
	heartbeat := func(id string, pid uint32) {
		fx.Exec(t, db.Pool, `select pgflow.heartbeat_worker($1::uuid, listener_pid => nullif($2::integer, 0))`, id, pid)
	}
	listenerOf := func(id string) *int32 {
		return fx.Val[*int32](t, db.Pool, `select listener_pid from pgflow.workers where worker_id = $1::uuid`, id)
	}
	deadSession, liveSession, elsewhereSession := db.SessionPID(t), db.SessionPID(t), db.SessionPID(t)
	for _, id := range []string{dead, live, newcomer} {
		fx.Exec(t, db.Pool, `select pgflow.register_worker($1::uuid, 'gone', 'pgflow-go')`, id)
	}
	fx.Exec(t, db.Pool, `select pgflow.register_worker($1::uuid, 'other', 'pgflow-go')`, elsewhere)
	heartbeat(dead, deadSession)
	heartbeat(live, liveSession)
	heartbeat(elsewhere, elsewhereSession)
	collect := channelNotifications(t, db.URL, workerChannel(dead), workerChannel(live), "pgflow:queue:gone")

	kill(deadSession)
	kill(elsewhereSession)
	// Nobody heartbeated since: by its row the dead worker still listens, and may be chosen.
	require.NotNil(t, listenerOf(dead))
	heartbeat(live, liveSession)
	require.Nil(t, listenerOf(dead), "the live worker's heartbeat forgot the dead worker's session")
	require.Nil(t, fx.Val[*time.Time](t, db.Pool, `select listens_at from pgflow.workers where worker_id = $1::uuid`, dead))
	require.Equal(t, int32(liveSession), *listenerOf(live), "a session that exists is kept")
	require.Equal(t, int32(elsewhereSession), *listenerOf(elsewhere), "another queue's workers are left to their own")
	require.True(t, fx.Val[bool](t, db.Pool, `select last_heartbeat_at >= now() - interval '30 seconds'
		from pgflow.workers where worker_id = $1::uuid`, dead), "the dead worker's heartbeat still counts")
	for i := range 20 {
		fx.Exec(t, db.Pool, `select pgflow.start_flow('gone', '{}')`)
		require.Equal(t, []note{{workerChannel(live), ""}}, collect(), "start %d: the worker whose session exists", i)
	}

	// A worker that does not listen itself forgets ended sessions too (pgflow's one-argument heartbeat included).
	kill(liveSession)
	fx.Exec(t, db.Pool, `select pgflow.heartbeat_worker($1::uuid)`, newcomer)
	require.Nil(t, listenerOf(live))
	fx.Exec(t, db.Pool, `select pgflow.start_flow('gone', '{}')`)
	require.Equal(t, []note{{"pgflow:queue:gone", ""}}, collect(), "no listening session left: the queue channel")
}
