package definitions_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const workerID = "11111111-1111-1111-1111-111111111111"

type workerRow struct {
	Queue, Function string
	StartedAt       time.Time
	Heartbeat       time.Time
	Deprecated      *time.Time
	Stopped         *time.Time
}

func TestRegisterWorker(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ctx := t.Context()

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	var w workerRow
	var id string
	var afterClock bool
	require.NoError(t, tx.QueryRow(ctx, `
		select worker_id::text, queue_name, function_name, started_at, last_heartbeat_at, deprecated_at, stopped_at,
		       started_at > now() and last_heartbeat_at > now()
		from pgflow.register_worker($1, 'my_flow', 'my_fn')`, workerID).
		Scan(&id, &w.Queue, &w.Function, &w.StartedAt, &w.Heartbeat, &w.Deprecated, &w.Stopped, &afterClock))
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, workerID, id)
	require.Equal(t, "my_flow", w.Queue)
	require.Equal(t, "my_fn", w.Function)
	require.Nil(t, w.Deprecated)
	require.Nil(t, w.Stopped)
	require.True(t, afterClock, "timestamps come from clock_timestamp(), not the transaction start")

	// A stopped worker id that registers again is live again with its new queue and function.
	mustExec(t, pool, `select pgflow.mark_worker_stopped($1)`, workerID)
	var again workerRow
	require.NoError(t, pool.QueryRow(ctx, `
		select queue_name, function_name, started_at, last_heartbeat_at, deprecated_at, stopped_at
		from pgflow.register_worker($1, 'other_flow', 'other_fn')`, workerID).
		Scan(&again.Queue, &again.Function, &again.StartedAt, &again.Heartbeat, &again.Deprecated, &again.Stopped))
	require.Equal(t, "other_flow", again.Queue)
	require.Equal(t, "other_fn", again.Function)
	require.Nil(t, again.Deprecated)
	require.Nil(t, again.Stopped)
	require.True(t, again.StartedAt.After(w.StartedAt))
	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.workers`))
}

func TestHeartbeatWorker(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.register_worker($1, 'my_flow', 'my_fn')`, workerID)
	mustExec(t, pool, `update pgflow.workers set last_heartbeat_at = now() - interval '1 hour'`)

	deprecated := queryVal[bool](t, pool, `select pgflow.heartbeat_worker($1)`, workerID)
	require.False(t, deprecated)
	require.True(t, queryVal[bool](t, pool,
		`select last_heartbeat_at > now() - interval '1 minute' from pgflow.workers where worker_id = $1`, workerID),
		"the heartbeat was recorded")

	mustExec(t, pool, `update pgflow.workers set deprecated_at = now() where worker_id = $1`, workerID)
	require.True(t, queryVal[bool](t, pool, `select pgflow.heartbeat_worker($1)`, workerID), "a deprecated worker is told to exit")

	err := execErr(pool, `select pgflow.heartbeat_worker('22222222-2222-2222-2222-222222222222')`)
	pgErr := requirePgError(t, err, "P0002", `Worker 22222222-2222-2222-2222-222222222222 is not registered`)
	require.Contains(t, pgErr.Hint, "pgflow.register_worker")
}

// The heartbeat says whether, and in which session, the worker listens on its own channel (v0.20.0): listener_pid
// is what the last heartbeat said; listens_at is set by the first listening heartbeat and kept by the next ones from
// the same session (since when it listens), set again by one from a new session, cleared with listener_pid by a
// heartbeat that does not listen, by pgflow's one-argument form (TypeScript workers never count as listening) and
// by registering again. A pid that cannot be a server's is refused; an unregistered id still raises and writes
// nothing.
func TestHeartbeatWorkerRecordsListening(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ctx := t.Context()
	mustExec(t, pool, `select pgflow.register_worker($1, 'my_flow', 'my_fn')`, workerID)
	listensAt := func() *time.Time {
		var at *time.Time
		require.NoError(t, pool.QueryRow(ctx, `select listens_at from pgflow.workers where worker_id = $1`, workerID).Scan(&at))
		return at
	}
	listenerPID := func() *int32 {
		var pid *int32
		require.NoError(t, pool.QueryRow(ctx, `select listener_pid from pgflow.workers where worker_id = $1`, workerID).Scan(&pid))
		return pid
	}
	require.Nil(t, listensAt(), "a registered worker does not listen until its heartbeat says so")
	require.Nil(t, listenerPID())

	require.False(t, queryVal[bool](t, pool, `select pgflow.heartbeat_worker($1, listener_pid => 4242)`, workerID))
	first := listensAt()
	require.NotNil(t, first)
	require.Equal(t, int32(4242), *listenerPID())
	require.True(t, queryVal[bool](t, pool,
		`select listens_at = last_heartbeat_at from pgflow.workers where worker_id = $1`, workerID),
		"the first listening heartbeat sets listens_at to its own time")
	mustExec(t, pool, `select pgflow.heartbeat_worker($1, 4242)`, workerID)
	require.Equal(t, *first, *listensAt(), "later heartbeats from the same session keep the time since which it listens")
	require.True(t, queryVal[bool](t, pool,
		`select last_heartbeat_at > listens_at from pgflow.workers where worker_id = $1`, workerID),
		"the heartbeat itself was recorded")
	mustExec(t, pool, `select pgflow.heartbeat_worker($1, 4343)`, workerID)
	require.Equal(t, int32(4343), *listenerPID())
	require.True(t, listensAt().After(*first), "a new listening session starts the time again")

	for _, call := range []string{
		`select pgflow.heartbeat_worker($1, null)`,
		`select pgflow.heartbeat_worker($1)`,
		`select pgflow.heartbeat_worker(worker_id => $1)`,
	} {
		mustExec(t, pool, `select pgflow.heartbeat_worker($1, 4242)`, workerID)
		require.NotNil(t, listensAt())
		mustExec(t, pool, call, workerID)
		require.Nil(t, listensAt(), "%s: not listening", call)
		require.Nil(t, listenerPID(), "%s: in no session", call)
	}

	// A pid that cannot be a server process is refused, naming it, and changes nothing.
	mustExec(t, pool, `select pgflow.heartbeat_worker($1, 4242)`, workerID)
	before := queryVal[string](t, pool, `select row(w.*)::text from pgflow.workers as w where worker_id = $1`, workerID)
	for _, bad := range []string{"0", "-7"} {
		err := execErr(pool, `select pgflow.heartbeat_worker($1, `+bad+`)`, workerID)
		requirePgError(t, err, "22023", `listener_pid `+bad+` is not a server process id`)
	}
	require.Equal(t, before, queryVal[string](t, pool, `select row(w.*)::text from pgflow.workers as w where worker_id = $1`, workerID))

	mustExec(t, pool, `select pgflow.register_worker($1, 'my_flow', 'my_fn')`, workerID)
	require.Nil(t, listensAt(), "registering again starts a life that does not listen yet")
	require.Nil(t, listenerPID())

	// The two columns go together: NULL exactly together, whoever writes the row.
	err := execErr(pool, `update pgflow.workers set listens_at = now() where worker_id = $1`, workerID)
	requirePgError(t, err, "23514",
		`new row for relation "workers" violates check constraint "workers_listener_pid_with_listens_at"`)

	err = execErr(pool, `select pgflow.heartbeat_worker('22222222-2222-2222-2222-222222222222', 4242)`)
	requirePgError(t, err, "P0002", `Worker 22222222-2222-2222-2222-222222222222 is not registered`)
	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.workers`))
}

func TestMarkWorkerStopped(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ctx := t.Context()
	mustExec(t, pool, `select pgflow.register_worker($1, 'q', 'fn')`, workerID)
	mustExec(t, pool, `select pgflow.register_worker('33333333-3333-3333-3333-333333333333', 'q', 'fn')`)
	mustExec(t, pool, `update pgflow.workers set last_heartbeat_at = now() - interval '1 hour'`)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `select pgflow.mark_worker_stopped($1)`, workerID)
	require.NoError(t, err)
	var stoppedAfterNow, deprecatedSet, heartbeatFresh bool
	require.NoError(t, tx.QueryRow(ctx, `
		select stopped_at > now(), deprecated_at = stopped_at, last_heartbeat_at = stopped_at
		from pgflow.workers where worker_id = $1`, workerID).Scan(&stoppedAfterNow, &deprecatedSet, &heartbeatFresh))
	require.NoError(t, tx.Commit(ctx))
	require.True(t, stoppedAfterNow, "stopped_at comes from clock_timestamp()")
	require.True(t, deprecatedSet, "a stopped worker is deprecated too")
	require.True(t, heartbeatFresh, "the final heartbeat is recorded")

	require.True(t, queryVal[bool](t, pool,
		`select stopped_at is null and deprecated_at is null from pgflow.workers where worker_id = '33333333-3333-3333-3333-333333333333'`),
		"other workers are untouched")

	// An earlier deprecation by an operator is kept.
	mustExec(t, pool, `update pgflow.workers set deprecated_at = '2020-01-01' where worker_id = '33333333-3333-3333-3333-333333333333'`)
	mustExec(t, pool, `select pgflow.mark_worker_stopped('33333333-3333-3333-3333-333333333333')`)
	require.Equal(t, "2020-01-01", queryVal[string](t, pool,
		`select deprecated_at::date::text from pgflow.workers where worker_id = '33333333-3333-3333-3333-333333333333'`))

	mustExec(t, pool, `select pgflow.mark_worker_stopped('44444444-4444-4444-4444-444444444444')`)
	require.Equal(t, 2, count(t, pool, `select 1 from pgflow.workers`), "unknown ids change nothing")
}

func TestTrackWorkerFunction(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ctx := t.Context()

	mustExec(t, pool, `select pgflow.track_worker_function('my_fn')`)
	var enabled bool
	var debounce string
	var invoked *time.Time
	require.NoError(t, pool.QueryRow(ctx,
		`select enabled, debounce::text, last_invoked_at from pgflow.worker_functions where function_name = 'my_fn'`).
		Scan(&enabled, &debounce, &invoked))
	require.True(t, enabled)
	require.Equal(t, "00:00:06", debounce)
	require.Nil(t, invoked)

	mustExec(t, pool, `update pgflow.worker_functions set enabled = false, debounce = '10 seconds',
		last_invoked_at = '2020-01-01', created_at = '2020-01-01', updated_at = '2020-01-01'`)
	mustExec(t, pool, `select pgflow.track_worker_function('my_fn')`)
	var updatedRecently, createdKept bool
	require.NoError(t, pool.QueryRow(ctx, `
		select enabled, debounce::text, updated_at > now() - interval '1 minute', created_at = '2020-01-01',
		       last_invoked_at
		from pgflow.worker_functions where function_name = 'my_fn'`).
		Scan(&enabled, &debounce, &updatedRecently, &createdKept, &invoked))
	require.False(t, enabled, "a repeated call keeps enabled")
	require.Equal(t, "00:00:10", debounce, "a repeated call keeps debounce")
	require.True(t, updatedRecently, "a repeated call refreshes updated_at")
	require.True(t, createdKept)
	require.NotNil(t, invoked, "last_invoked_at is never touched")
	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.worker_functions`))

	err := execErr(pool, `update pgflow.worker_functions set debounce = '500 milliseconds'`)
	requirePgError(t, err, "23514", `new row for relation "worker_functions" violates check constraint "worker_functions_debounce_check"`)
}
