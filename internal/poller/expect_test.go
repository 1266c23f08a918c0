package poller

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/notify"
	"github.com/pgflow-go/pgflow/internal/observe"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// A listening poller that found its queue full announces the claim it is about to make (Config.Expect: the
// worker's results then wait a moment for it to ride with them), and only once it holds a slot of its read: a poller waiting for a free slot waits
// for results to be recorded, and its announcement would hold back the very call that records them. Every
// announcement ends once its read has returned.
func TestAPollerAnnouncesItsClaimOnlyWhileItHoldsASlot(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const flow, id = "fe", "c0000000-0000-4000-8000-0000000000e1"
	oneStepFlow(t, db, flow, id)
	listener := notify.New(notify.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, db.URL) }})
	t.Cleanup(listener.Close)
	wake, err := listener.Subscribe(sqlapi.QueueChannel(flow))
	require.NoError(t, err)
	testutil.WaitClosed(t, "LISTEN on the queue's channel", wake.Active())

	slots := NewSlots(2)
	var announced, ended, withoutSlot atomic.Int32
	expect := func() (<-chan struct{}, func()) {
		announced.Add(1)
		if len(slots) == 0 {
			withoutSlot.Add(1)
		}
		return nil, func() { ended.Add(1) }
	}
	// Queued before the poller starts: its first read comes back full, so the next one is announced.
	runs := make([]string, 7)
	for i := range runs {
		runs[i] = testutil.StartRun(t, db.Pool, flow, map[string]any{"i": i})
	}
	polls := &pollSink{}
	obs := observe.New([]observe.Sink{polls}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(obs.Start(context.Background()))
	runPoller(t, db, Config{DB: db.Pool, Flow: flow, Queue: flow, WorkerID: id, BatchSize: 2, VisibilitySeconds: 30,
		MaxPollSeconds: 1, PollIntervalMs: 100, MaxPollWait: time.Hour, ListenPollInterval: time.Hour,
		Slots: slots, Wake: wake, Listener: listener, Expect: expect, Observer: obs}, db.Pool)
	for _, r := range runs {
		require.Equal(t, "completed", testutil.WaitRun(t, db.Pool, r).Status)
	}
	// Every message is claimed; the queue stays empty until the run below. The poller may still owe the read that
	// follows a full one (announced: it finds nothing), or wait for news after a short read; a wake without a
	// message makes it read in the second case, so an empty read comes in both. After an empty read, reads are
	// not announced until one comes back full.
	_, err = db.Pool.Exec(context.Background(), `select pg_catalog.pg_notify($1, '')`, sqlapi.QueueChannel(flow))
	require.NoError(t, err)
	testutil.WaitFor(t, "an empty read once the queue was empty", polls.readNothing)
	// Every slot free again: the next read takes both, and one message does not fill it.
	testutil.WaitFor(t, "the tasks' slots freed", func() bool { return len(slots) == 0 })
	testutil.WaitFor(t, "the poller's reads returned", func() bool { return announced.Load() == ended.Load() })
	require.Positive(t, announced.Load(), "the listening poller announced its claims after a full read")
	require.Zero(t, withoutSlot.Load(), "a claim was announced while the poller held no slot")

	// The last read found the queue empty: the read a new run wakes is not announced.
	before := announced.Load()
	require.Equal(t, "completed", testutil.WaitRun(t, db.Pool, testutil.StartRun(t, db.Pool, flow, map[string]any{})).Status)
	require.Equal(t, before, announced.Load(), "a read after one that was not full was announced")
}

// pollSink tells whether the poller has reported a read that found no message.
type pollSink struct {
	testutil.NopSink
	empty atomic.Bool
}

func (s *pollSink) PollDone(_ context.Context, e observe.Poll) {
	if e.Err == nil && e.Messages == 0 {
		s.empty.Store(true)
	}
}

func (s *pollSink) readNothing() bool { return s.empty.Load() }
