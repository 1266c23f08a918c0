package maintenance_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/maintenance"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// switchable is a listening session the test sets (0: not listening), with the change channel
// notify.Subscription.ListenerPID hands out.
type switchable struct {
	mu      sync.Mutex
	pid     uint32
	changed chan struct{}
}

func newSwitchable() *switchable { return &switchable{changed: make(chan struct{})} }

func (s *switchable) ListenerPID() (uint32, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid, s.changed
}

func (s *switchable) set(pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pid != pid {
		s.pid = pid
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// The heartbeat loop writes each change of a row's listening session at once (its interval is an hour here: every
// write the test sees comes from its first pass or from a change), also a new session that follows another without
// a pass seeing it lost, leaves rows without a listening state as not listening, registers a missing row again and
// says at once whether it listens, and reports a deprecation found by such a heartbeat once. (A change and its
// reversal between two passes write nothing: the row already says it.)
func TestHeartbeatWritesListeningChangesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	const a, b = "12000000-0000-4000-8000-00000000000a", "12000000-0000-4000-8000-00000000000b"
	for _, id := range []string{a, b} {
		require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, id, "q", "maintenance-test"))
	}
	// Sessions that exist: a heartbeat of b forgets a listening session of a that does not (pgflow.heartbeat_worker).
	var pids [4]uint32
	for i := range pids {
		pids[i] = db.SessionPID(t)
	}
	state := newSwitchable()
	state.set(pids[0]) // listening before the loop starts: its first pass says so
	var deprecations atomic.Int32
	loop, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		maintenance.Heartbeat(loop, db.Pool, []maintenance.Row{
			{WorkerID: a, Queue: "q", ListenerPID: state.ListenerPID},
			{WorkerID: b, Queue: "q"},
		}, "maintenance-test", time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)), func() { deprecations.Add(1) })
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	// listens reports whether the row exists and the listener pid its heartbeats wrote (0: NULL).
	listens := func(id string) (exists bool, pid uint32) {
		var got *int32
		err := db.Pool.QueryRow(ctx, `select true, listener_pid from pgflow.workers where worker_id = $1`, id).
			Scan(&exists, &got)
		if err != nil || got == nil {
			return exists, 0
		}
		return exists, uint32(*got)
	}
	testutil.WaitFor(t, "the first pass: a listens", func() bool { _, p := listens(a); return p == pids[0] })
	_, p := listens(b)
	require.Zero(t, p, "a row without a listening state never listens")

	state.set(0)
	testutil.WaitFor(t, "a no longer listens", func() bool { _, p := listens(a); return p == 0 })
	state.set(pids[0])
	testutil.WaitFor(t, "a listens again", func() bool { _, p := listens(a); return p == pids[0] })
	// A reconnect seen only as a new session (the loss and the new LISTEN between two passes) is written too.
	state.set(pids[1])
	testutil.WaitFor(t, "a listens in its new session", func() bool { _, p := listens(a); return p == pids[1] })

	// The row goes missing: the next change finds it unregistered, registers it again and says at once what it is.
	_, err := db.Pool.Exec(ctx, `delete from pgflow.workers where worker_id = $1`, a)
	require.NoError(t, err)
	state.set(0)
	testutil.WaitFor(t, "a registered again", func() bool { e, _ := listens(a); return e })
	state.set(pids[2])
	testutil.WaitFor(t, "a listening again", func() bool { e, p := listens(a); return e && p == pids[2] })
	require.Zero(t, deprecations.Load())

	// A deprecation found by a change's heartbeat is reported, once.
	_, err = db.Pool.Exec(ctx, `update pgflow.workers set deprecated_at = now() where worker_id = $1`, a)
	require.NoError(t, err)
	state.set(0)
	testutil.WaitFor(t, "the deprecation is reported", func() bool { return deprecations.Load() == 1 })
	state.set(pids[3])
	testutil.WaitFor(t, "a listens", func() bool { _, p := listens(a); return p == pids[3] })
	require.EqualValues(t, 1, deprecations.Load(), "reported once")
}
