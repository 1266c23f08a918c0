package notify_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/notify"
	"github.com/pgflow-go/pgflow/internal/pgcluster"
	"github.com/pgflow-go/pgflow/internal/pgtest"
)

const waitLimit = 30 * time.Second

func newListener(t *testing.T, db *pgtest.DB, mod func(*notify.Config)) *notify.Listener {
	t.Helper()
	cfg := notify.Config{
		Connect:    func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, db.URL) },
		MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond,
		Logger:     slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
	if mod != nil {
		mod(&cfg)
	}
	l := notify.New(cfg)
	t.Cleanup(l.Close)
	return l
}

// next waits for the subscription's next batch of messages.
func next(t *testing.T, s *notify.Subscription) []notify.Message {
	t.Helper()
	select {
	case <-s.Ready():
		return s.Drain()
	case <-time.After(waitLimit):
		t.Fatalf("no message on %q within %s", s.Channel(), waitLimit)
		return nil
	}
}

// collect gathers messages until want payloads (in order, Resyncs skipped) have arrived.
func collectPayloads(t *testing.T, s *notify.Subscription, n int) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		for _, m := range next(t, s) {
			if !m.Resync {
				got = append(got, m.Payload)
			}
		}
	}
	return got
}

func waitActive(t *testing.T, s *notify.Subscription) {
	t.Helper()
	select {
	case <-s.Active():
	case <-time.After(waitLimit):
		t.Fatalf("subscription to %q never became active", s.Channel())
	}
	msgs := s.Drain()
	require.NotEmpty(t, msgs)
	require.True(t, msgs[0].Resync, "the first message after activation is a Resync")
}

func notifyDB(t *testing.T, db *pgtest.DB, channel, payload string) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), "select pg_notify($1, $2)", channel, payload)
	require.NoError(t, err)
}

func TestSubscribeReceivesNotificationsInOrder(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	l := newListener(t, db, nil)

	ch := "pgflow:run:0b6f7c2e-0000-4000-8000-000000000001" // needs quoting as an identifier
	s, err := l.Subscribe(ch)
	require.NoError(t, err)
	waitActive(t, s)

	for i := range 5 {
		notifyDB(t, db, ch, fmt.Sprintf("p%d", i))
	}
	require.Equal(t, []string{"p0", "p1", "p2", "p3", "p4"}, collectPayloads(t, s, 5))
}

func TestSubscribersOfSameAndOtherChannels(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	l := newListener(t, db, nil)

	a1, err := l.Subscribe("alpha")
	require.NoError(t, err)
	a2, err := l.Subscribe("alpha")
	require.NoError(t, err)
	b, err := l.Subscribe("Beta Channel")
	require.NoError(t, err)
	waitActive(t, a1)
	waitActive(t, a2)
	waitActive(t, b)

	notifyDB(t, db, "alpha", "to-alpha")
	notifyDB(t, db, "Beta Channel", "to-beta")

	require.Equal(t, []string{"to-alpha"}, collectPayloads(t, a1, 1))
	require.Equal(t, []string{"to-alpha"}, collectPayloads(t, a2, 1))
	require.Equal(t, []string{"to-beta"}, collectPayloads(t, b, 1))

	// After one alpha subscriber leaves, the other still receives; the one that left receives nothing more.
	a1.Close()
	<-a1.Done()
	notifyDB(t, db, "alpha", "second")
	require.Equal(t, []string{"second"}, collectPayloads(t, a2, 1))
	require.Empty(t, a1.Drain())
}

func TestResubscribeAfterLastSubscriberLeft(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	l := newListener(t, db, nil)

	s1, err := l.Subscribe("gamma")
	require.NoError(t, err)
	waitActive(t, s1)
	s1.Close()

	// A new subscriber for the same channel (which the listener may have UNLISTENed meanwhile) works again.
	s2, err := l.Subscribe("gamma")
	require.NoError(t, err)
	waitActive(t, s2)
	notifyDB(t, db, "gamma", "again")
	require.Equal(t, []string{"again"}, collectPayloads(t, s2, 1))
}

func TestReconnectSendsResyncAndKeepsDelivering(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	l := newListener(t, db, nil)
	ctx := context.Background()

	s, err := l.Subscribe("delta")
	require.NoError(t, err)
	waitActive(t, s)
	pid := l.BackendPID()
	require.NotZero(t, pid)

	var terminated bool
	require.NoError(t, db.Pool.QueryRow(ctx, "select pg_terminate_backend($1)", int32(pid)).Scan(&terminated))
	require.True(t, terminated)

	// The listener reconnects on a new backend and tells the subscriber to re-read.
	var sawResync bool
	deadline := time.Now().Add(waitLimit)
	for !sawResync {
		require.True(t, time.Now().Before(deadline), "no Resync after the connection was terminated")
		for _, m := range next(t, s) {
			sawResync = sawResync || m.Resync
		}
	}
	newPID := l.BackendPID()
	require.NotZero(t, newPID)
	require.NotEqual(t, pid, newPID)

	notifyDB(t, db, "delta", "after-reconnect")
	require.Equal(t, []string{"after-reconnect"}, collectPayloads(t, s, 1))
}

func TestConnectFailuresAreRetried(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var calls atomic.Int32
	l := newListener(t, db, func(c *notify.Config) {
		inner := c.Connect
		c.Connect = func(ctx context.Context) (*pgx.Conn, error) {
			if calls.Add(1) <= 3 {
				return nil, errors.New("simulated connect failure")
			}
			return inner(ctx)
		}
	})
	s, err := l.Subscribe("epsilon")
	require.NoError(t, err)
	waitActive(t, s)
	require.GreaterOrEqual(t, calls.Load(), int32(4))

	notifyDB(t, db, "epsilon", "x")
	require.Equal(t, []string{"x"}, collectPayloads(t, s, 1))
}

func TestQueueOverflowTurnsIntoResync(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	l := newListener(t, db, func(c *notify.Config) { c.QueueLimit = 4 })

	slow, err := l.Subscribe("zeta")
	require.NoError(t, err)
	waitActive(t, slow)
	// A second subscriber on the same channel tells us when all ten notifications have been dispatched (the
	// listener queues each one for its subscribers in the order they subscribed, slow first); slow reads nothing
	// until then.
	probe, err := l.Subscribe("zeta")
	require.NoError(t, err)
	waitActive(t, probe)

	_, err = db.Pool.Exec(context.Background(),
		"select pg_notify('zeta', 'n' || i) from generate_series(1, 10) as i")
	require.NoError(t, err)
	// probe has the same small queue limit but drains as fast as it can; it may lose messages too, so it just
	// waits for the last one.
	for seen := false; !seen; {
		for _, m := range next(t, probe) {
			seen = seen || m.Payload == "n10"
		}
	}

	msgs := slow.Drain()
	require.LessOrEqual(t, len(msgs), 4, "the queue is bounded: %v", msgs)
	require.True(t, msgs[0].Resync, "dropped messages are replaced by a Resync: %v", msgs)
	require.Equal(t, "n10", msgs[len(msgs)-1].Payload, "the newest messages are kept")
}

func TestCloseEndsSubscriptions(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	l := newListener(t, db, nil)

	s, err := l.Subscribe("eta")
	require.NoError(t, err)
	waitActive(t, s)
	pid := l.BackendPID()
	require.NotZero(t, pid)

	l.Close()
	select {
	case <-s.Done():
	case <-time.After(waitLimit):
		t.Fatal("subscription not ended by Close")
	}
	_, err = l.Subscribe("eta")
	require.ErrorIs(t, err, notify.ErrClosed)
	l.Close() // idempotent

	// The dedicated connection is gone.
	deadline := time.Now().Add(waitLimit)
	for {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			"select count(*) from pg_stat_activity where pid = $1", int32(pid)).Scan(&n))
		if n == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "listener backend %d still connected after Close", pid)
		time.Sleep(20 * time.Millisecond)
	}
}

// Waits that time out (PingInterval) are followed by a ping; the connection stays usable and nothing is lost.
func TestIdleConnectionIsPingedAndKept(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	l := newListener(t, db, func(c *notify.Config) { c.PingInterval = 10 * time.Millisecond })

	s, err := l.Subscribe("theta")
	require.NoError(t, err)
	waitActive(t, s)
	pid := l.BackendPID()

	// Let several waits time out, checking that no Resync (a reconnect) happens meanwhile.
	for range 10 {
		time.Sleep(20 * time.Millisecond)
		require.Empty(t, s.Drain())
	}
	require.Equal(t, pid, l.BackendPID(), "the idle connection was kept")
	var last string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"select query from pg_stat_activity where pid = $1", int32(pid)).Scan(&last))
	require.Equal(t, "-- ping", last, "the listener's last statement is pgx's ping")
	notifyDB(t, db, "theta", "still here")
	require.Equal(t, []string{"still here"}, collectPayloads(t, s, 1))
	require.Equal(t, pid, l.BackendPID())
}

// isListening is whether the subscription's ListenerPID names a session, and its change channel.
func isListening(s *notify.Subscription) (bool, <-chan struct{}) {
	pid, changed := s.ListenerPID()
	return pid != 0, changed
}

// waitListening waits until the subscription's listening state is want, following its change channel.
func waitListening(t *testing.T, s *notify.Subscription, want bool) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		got, changed := isListening(s)
		if got == want {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("subscription to %q: listening stayed %v", s.Channel(), got)
		}
	}
}

// Listening is true exactly while the connection listens for the subscription: not before its LISTEN, not while
// the connection is lost and cannot be re-established, again after the listener reconnected, and never after the
// subscription or the listener was closed. Each change closes the channel handed out with the previous state.
func TestListeningFollowsTheConnection(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var refuse atomic.Bool
	refuse.Store(true)
	l := newListener(t, db, func(c *notify.Config) {
		inner := c.Connect
		c.Connect = func(ctx context.Context) (*pgx.Conn, error) {
			if refuse.Load() {
				return nil, errors.New("simulated: the listen connection is unavailable")
			}
			return inner(ctx)
		}
	})
	s, err := l.Subscribe("zeta")
	require.NoError(t, err)
	listening, changed := isListening(s)
	require.False(t, listening, "no connection yet: not listening")

	refuse.Store(false)
	waitActive(t, s)
	select {
	case <-changed:
	default:
		t.Fatal("the change to listening closed the earlier change channel")
	}
	listening, changed = isListening(s)
	require.True(t, listening, "listening once the LISTEN succeeded (Active is closed)")

	// The connection is lost and cannot come back for now: not listening.
	refuse.Store(true)
	var terminated bool
	require.NoError(t, db.Pool.QueryRow(ctx, "select pg_terminate_backend($1)", int32(l.BackendPID())).Scan(&terminated))
	require.True(t, terminated)
	<-changed
	waitListening(t, s, false)
	listening, _ = isListening(s)
	require.False(t, listening)

	// It comes back: listening again, announced by a Resync, and notifications arrive.
	refuse.Store(false)
	waitListening(t, s, true)
	var sawResync bool
	for !sawResync {
		for _, m := range next(t, s) {
			sawResync = sawResync || m.Resync
		}
	}
	notifyDB(t, db, "zeta", "back")
	require.Equal(t, []string{"back"}, collectPayloads(t, s, 1))

	// A closed subscription does not listen; neither does one of a closed listener.
	_, changed = isListening(s)
	s.Close()
	<-changed
	listening, _ = isListening(s)
	require.False(t, listening)
	other, err := l.Subscribe("eta")
	require.NoError(t, err)
	waitActive(t, other)
	waitListening(t, other, true)
	l.Close()
	listening, _ = isListening(other)
	require.False(t, listening)
}

// Behind PgBouncer in transaction mode a LISTEN succeeds but notifications do not come back: the listener sees that
// its connection goes through a pooler (the server's pid is not the one announced) and no subscription reports
// that it listens, while the listener itself keeps running. On a direct connection the same subscription does.
func TestListeningIsFalseBehindAPooler(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	b, err := pgcluster.StartPgBouncer(context.Background(), pgcluster.PgBouncerOptions{
		ServerURL: pgtest.AdminURL(t), PoolMode: "transaction", DefaultPoolSize: 4,
	})
	if errors.Is(err, pgcluster.ErrPgBouncerMissing) {
		t.Fatalf("this test needs a real PgBouncer: %v (make test installs it: .ci/setup)", err)
	}
	require.NoError(t, err)
	t.Cleanup(b.Stop)
	logs := &strings.Builder{}
	var mu sync.Mutex
	pooled := newListener(t, db, func(c *notify.Config) {
		c.Connect = func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, b.URL(db.Name)) }
		c.Logger = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logs.Write(p)
		}), nil))
	})
	s, err := pooled.Subscribe("theta")
	require.NoError(t, err)
	waitActive(t, s)
	listening, _ := isListening(s)
	require.False(t, listening, "the LISTEN ran, but through a pooler")
	mu.Lock()
	require.Contains(t, logs.String(), "goes through a connection pooler")
	mu.Unlock()

	direct := newListener(t, db, nil)
	d, err := direct.Subscribe("theta")
	require.NoError(t, err)
	waitActive(t, d)
	listening, _ = isListening(d)
	require.True(t, listening, "a direct connection")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
