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

// switchable is a listening state the test sets, with the change channel notify.Subscription.Listening hands out.
type switchable struct {
	mu      sync.Mutex
	on      bool
	changed chan struct{}
}

func newSwitchable() *switchable { return &switchable{changed: make(chan struct{})} }

func (s *switchable) Listening() (bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.on, s.changed
}

func (s *switchable) set(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on != on {
		s.on = on
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// The heartbeat loop writes each change of a row's listening state at once (its interval is an hour here: every
// write the test sees comes from its first pass or from a change), leaves rows without a listening state as not
// listening, registers a missing row again and says at once whether it listens, and reports a deprecation found by
// such a heartbeat once. (A change and its reversal between two passes write nothing: the row already says it.)
func TestHeartbeatWritesListeningChangesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	const a, b = "12000000-0000-4000-8000-00000000000a", "12000000-0000-4000-8000-00000000000b"
	for _, id := range []string{a, b} {
		require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, id, "q", "maintenance-test"))
	}
	state := newSwitchable()
	state.set(true) // listening before the loop starts: its first pass says so
	var deprecations atomic.Int32
	loop, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		maintenance.Heartbeat(loop, db.Pool, []maintenance.Row{
			{WorkerID: a, Queue: "q", Listening: state.Listening},
			{WorkerID: b, Queue: "q"},
		}, "maintenance-test", time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)), func() { deprecations.Add(1) })
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	listens := func(id string) (exists, listening bool) {
		err := db.Pool.QueryRow(ctx, `select true, listens_at is not null from pgflow.workers where worker_id = $1`, id).
			Scan(&exists, &listening)
		if err != nil {
			return false, false
		}
		return exists, listening
	}
	testutil.WaitFor(t, "the first pass: a listens", func() bool { _, l := listens(a); return l })
	_, l := listens(b)
	require.False(t, l, "a row without a listening state never listens")

	state.set(false)
	testutil.WaitFor(t, "a no longer listens", func() bool { _, l := listens(a); return !l })
	state.set(true)
	testutil.WaitFor(t, "a listens again", func() bool { _, l := listens(a); return l })

	// The row goes missing: the next change finds it unregistered, registers it again and says at once what it is.
	_, err := db.Pool.Exec(ctx, `delete from pgflow.workers where worker_id = $1`, a)
	require.NoError(t, err)
	state.set(false)
	testutil.WaitFor(t, "a registered again", func() bool { e, _ := listens(a); return e })
	state.set(true)
	testutil.WaitFor(t, "a listening again", func() bool { e, l := listens(a); return e && l })
	require.Zero(t, deprecations.Load())

	// A deprecation found by a change's heartbeat is reported, once.
	_, err = db.Pool.Exec(ctx, `update pgflow.workers set deprecated_at = now() where worker_id = $1`, a)
	require.NoError(t, err)
	state.set(false)
	testutil.WaitFor(t, "the deprecation is reported", func() bool { return deprecations.Load() == 1 })
	state.set(true)
	testutil.WaitFor(t, "a listens", func() bool { _, l := listens(a); return l })
	require.EqualValues(t, 1, deprecations.Load(), "reported once")
}
