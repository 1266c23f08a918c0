package poller

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/claimer"
	"github.com/pgflow-go/pgflow/internal/completer"
	"github.com/pgflow-go/pgflow/internal/executor"
	"github.com/pgflow-go/pgflow/internal/notify"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/taskrun"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

func TestDueTimesSortedDeduplicatedAndCoalesced(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var d dueTimes
	_, ok := d.next()
	require.False(t, ok, "nothing due")
	d.add(base.Add(3 * time.Second))
	d.add(base.Add(time.Second))
	d.add(base.Add(time.Second)) // twice: remembered once
	d.add(base.Add(time.Second + 4*time.Millisecond))
	d.add(base.Add(2 * time.Second))
	require.Len(t, d, 4)
	at, ok := d.next()
	require.True(t, ok)
	require.Equal(t, base.Add(time.Second+4*time.Millisecond+wakeMargin), at,
		"one read for the times within wakeCoalesce of the earliest, at the latest of them")

	d.popVisible(base.Add(time.Second)) // a read at the first due time sees the first only
	require.Equal(t, base.Add(time.Second+4*time.Millisecond), d[0])
	d.popVisible(base.Add(2500 * time.Millisecond))
	require.Equal(t, dueTimes{base.Add(3 * time.Second)}, d)

	for i := range maxDueTimes + 10 {
		d.add(base.Add(time.Duration(i) * time.Hour))
	}
	require.Len(t, d, maxDueTimes, "bounded: the latest are forgotten")
	require.Equal(t, base, d[0])
}

func TestQueuePayloads(t *testing.T) {
	t.Parallel()
	want := time.Date(2026, 12, 1, 15, 33, 18, 123456000, time.UTC)
	for _, payload := range []string{
		`{"visible_at":"2026-12-01T15:33:18.123456+00:00"}`,
		`{"visible_at":"2026-12-01T16:33:18.123456+01:00"}`,
		`{"visible_at": "2026-12-01 15:33:18.123456+00"}`,
		`{"visible_at":"2026-12-01 15:33:18.123456Z", "other": 1}`,
	} {
		got, ok := parseVisibleAt(payload)
		require.True(t, ok, payload)
		require.True(t, want.Equal(got), "%s: %s", payload, got)
	}
	for _, payload := range []string{"", "x", `{"cancel_run":"0b0e7d9c-0000-4000-8000-000000000000"}`, `{"visible_at":3}`,
		`{"visible_at":"soon"}`, `[1]`, `{`} {
		_, ok := parseVisibleAt(payload)
		require.False(t, ok, payload)
	}

	p := New(Config{})
	require.True(t, p.takeNotes([]notify.Message{{Payload: ""}}), "an empty payload: read now")
	require.True(t, p.takeNotes([]notify.Message{{Resync: true}}), "a resync: read now")
	require.False(t, p.takeNotes([]notify.Message{{Payload: `{"cancel_run":"x"}`}, {Payload: "unknown"}}),
		"other payloads: no read")
	require.False(t, p.takeNotes([]notify.Message{{Payload: `{"visible_at":"2026-12-01T15:33:18.123456Z"}`}}),
		"a delayed message: no read now")
	require.Equal(t, dueTimes{want}, p.due, "its time is remembered")
}

// harness runs one real poller (with the real claimer, executor and completer) on a queue of a fresh database,
// listening for the queue's notifications, with a periodic read so rare (an hour) that only a notification or
// the delayed-message timer can make it read.
type harness struct {
	db      *pgtest.DB
	ran     atomic.Int32 // handler calls
	stopped chan struct{}
}

func startPoller(t *testing.T, flow, queue string) *harness {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	h := &harness{db: db, stopped: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	workerID := "7d3c6a8e-2f0b-4c1e-9a55-1b2c3d4e5f60"
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, workerID, queue, "poller-test"))

	listener := notify.New(notify.Config{Logger: log, Connect: func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.Connect(ctx, db.URL)
	}})
	t.Cleanup(listener.Close)
	sub, err := listener.Subscribe(sqlapi.QueueChannel(queue))
	require.NoError(t, err)
	testutil.WaitClosed(t, "LISTEN on the queue's channel", sub.Active())

	loop, stop := context.WithCancel(ctx)
	comp := completer.New(completer.Config{DB: db.Pool, Logger: log, QueueSize: 1, HardStop: ctx, Calls: ctx, Base: ctx})
	exec := executor.New(executor.Config{DB: db.Pool, Completer: comp, Logger: log, Handlers: ctx, GiveUp: make(chan struct{}),
		Flows: map[string]*taskrun.Flow{flow: {Slug: flow, Steps: map[string]*taskrun.Step{"only": {Slug: "only",
			Run: func(context.Context, *taskrun.Env) (json.RawMessage, error) {
				h.ran.Add(1)
				return json.RawMessage(`"done"`), nil
			}}}}}})
	tasks := &Tasks{}
	p := New(Config{DB: db.Pool, Flow: flow, Queue: queue, WorkerID: workerID, BatchSize: 10, VisibilitySeconds: 5,
		MaxPollSeconds: 1, PollIntervalMs: 100, MaxPollWait: time.Hour, ListenPollInterval: time.Hour,
		Slots: NewSlots(4), Wake: sub, Listener: listener,
		Claimer:  claimer.New(claimer.Config{DB: db.Pool, Read: db.Pool, Flow: flow, Queue: queue, WorkerID: workerID, Logger: log}),
		Executor: exec, Tasks: tasks, Logger: log})
	go func() {
		defer close(h.stopped)
		p.Run(loop, ctx)
	}()
	t.Cleanup(func() {
		stop()
		<-h.stopped
		tasks.Wait()
		comp.Stop()
	})
	return h
}

func TestTimerReadsAnnouncedDelayedMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := startPoller(t, "plain", "plain")
	// A message 1 s in the future, announced only by its visible_at (as the schema does for delays): the poller's
	// periodic read is an hour away, so only the timer can read it.
	_, err := h.db.Pool.Exec(ctx, `select pgmq.create('plain')`)
	require.NoError(t, err)
	var id int64
	var visibleAt time.Time
	require.NoError(t, h.db.Pool.QueryRow(ctx, `select pgmq.send('plain', '{}'::jsonb, 1)`).Scan(&id))
	require.NoError(t, h.db.Pool.QueryRow(ctx, `select vt from pgmq.q_plain where msg_id = $1`, id).Scan(&visibleAt))
	var unread int
	require.NoError(t, h.db.Pool.QueryRow(ctx, `select count(*) from pgmq.q_plain where read_ct = 0`).Scan(&unread))
	require.Equal(t, 1, unread)
	_, err = h.db.Pool.Exec(ctx, `select pg_notify('pgflow:queue:plain', json_build_object('visible_at', $1::timestamptz)::text)`, visibleAt)
	require.NoError(t, err)
	testutil.WaitFor(t, "the poller to read the delayed message", func() bool {
		var readCount int
		require.NoError(t, h.db.Pool.QueryRow(ctx, `select read_ct from pgmq.q_plain where msg_id = $1`, id).Scan(&readCount))
		return readCount > 0
	})
}

func TestTimerStartsDelayedStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := startPoller(t, "delayed", "delayed")
	for _, q := range []string{
		`select pgflow.create_flow('delayed')`,
		`select pgflow.add_step('delayed', 'only', start_delay => 1)`,
	} {
		_, err := h.db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	// The schema announces the start delay with a visible_at notification; nothing else makes the poller read.
	runID := testutil.StartRun(t, h.db.Pool, "delayed", map[string]any{})
	res := testutil.WaitRun(t, h.db.Pool, runID)
	require.Equal(t, "completed", res.Status)
	require.EqualValues(t, 1, h.ran.Load())
}
