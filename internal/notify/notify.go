// Package notify is a PostgreSQL LISTEN/NOTIFY listener that shares one dedicated connection between any number of
// subscribers.
//
// A Listener owns one session connection (LISTEN needs a session: a PgBouncer in transaction mode does not carry
// notifications). Subscribers register for a channel; the listener issues LISTEN for every channel somebody wants
// and UNLISTEN when the last subscriber of a channel leaves. When the connection breaks, the listener reconnects
// with capped exponential backoff, listens again on every wanted channel and then hands every subscriber a Resync
// message: notifications sent while it was disconnected are lost, so a subscriber must re-read whatever state it
// follows. A subscriber also gets a Resync when its channel first becomes active, so the rule "on Resync, re-read
// the state" is all a subscriber needs to never miss a change: register, then read, then react to messages.
//
// Messages are queued per subscription without blocking the listener; a subscription that falls more than
// QueueLimit messages behind loses the oldest ones and gets a Resync in their place.
package notify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Message is one item of a subscription's queue: either a notification payload or a Resync marker.
type Message struct {
	// Payload is the notification payload ("" for a Resync).
	Payload string
	// Resync reports that notifications may have been missed (the channel just became active, the connection
	// was re-established, or the queue overflowed): re-read the state you follow.
	Resync bool
}

// Config configures a Listener. Only Connect is required.
type Config struct {
	// Connect opens the dedicated session connection. It is called again after every disconnect.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Logger receives connection problems (warn) and reconnects (info). Default: slog.Default().
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the wait between reconnect attempts (doubling, with jitter).
	// Defaults: 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// PingTimeout bounds one such check; a check that takes longer counts as a dead connection. Default: 10s (never
	// less than PingInterval), so a busy server is not mistaken for a dead one.
	PingTimeout time.Duration
	// PingInterval is how long the connection may stay silent before the listener checks it with a query, so a
	// silently dead connection is noticed. Default: 30s.
	PingInterval time.Duration
	// QueueLimit is how many undelivered messages a subscription may hold. Default: 10000.
	QueueLimit int
}

// Listener fans notifications out to subscribers. Create it with New; it connects on the first Subscribe and
// stops with Close. It is safe for concurrent use.
type Listener struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	subs    map[string]map[*Subscription]uint64 // wanted channels and their subscribers, with their order of subscription
	lastSeq uint64
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the run goroutine has returned
	pid     uint32        // backend pid of the current connection, 0 while disconnected
	// pooled is true while the current connection reaches PostgreSQL through a connection pooler (see
	// checkDirect): its LISTENs run, but notifications may never be delivered.
	pooled bool

	wake chan struct{} // capacity 1: the subscriber set changed
}

// New returns a Listener; nothing is connected until the first Subscribe.
func New(cfg Config) *Listener {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(5*time.Second, cfg.MinBackoff)
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = 10 * time.Second
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 30 * time.Second
	}
	if cfg.QueueLimit <= 0 {
		cfg.QueueLimit = 10000
	}
	return &Listener{
		cfg:  cfg,
		log:  cfg.Logger,
		subs: make(map[string]map[*Subscription]uint64),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
}

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("notify: listener closed")

// Subscribe registers a subscriber for channel and returns at once; the listener starts if it is not running.
// The subscription's first message is a Resync sent when LISTEN is active for it (Active is then closed).
func (l *Listener) Subscribe(channel string) (*Subscription, error) {
	if channel == "" {
		return nil, errors.New("notify: empty channel name")
	}
	s := &Subscription{
		l:       l,
		channel: channel,
		limit:   l.cfg.QueueLimit,
		ready:   make(chan struct{}, 1),
		active:  make(chan struct{}),
		changed: make(chan struct{}),
		done:    make(chan struct{}),
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	set := l.subs[channel]
	if set == nil {
		set = make(map[*Subscription]uint64)
		l.subs[channel] = set
	}
	l.lastSeq++
	set[s] = l.lastSeq
	if !l.started {
		l.started = true
		ctx, cancel := context.WithCancel(context.Background())
		l.cancel = cancel
		go l.run(ctx)
	}
	l.mu.Unlock()
	l.poke()
	return s, nil
}

// Close stops the listener, closes its connection and ends every subscription (their Done channels close).
// It waits for the listener goroutine to return and is safe to call more than once.
func (l *Listener) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		if l.started {
			<-l.done
		}
		return
	}
	l.closed = true
	started := l.started
	if l.cancel != nil {
		l.cancel()
	}
	all := l.subs
	l.subs = make(map[string]map[*Subscription]uint64)
	for _, set := range all {
		for s := range set {
			s.setHeard(false)
		}
	}
	l.mu.Unlock()
	for _, set := range all {
		for s := range set {
			s.end()
		}
	}
	if started {
		<-l.done
	}
}

// BackendPID returns the server process id of the listener's current connection, or 0 while disconnected or not
// started. Useful for monitoring and for tests that break the connection on purpose.
func (l *Listener) BackendPID() uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pid
}

func (l *Listener) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *Listener) remove(s *Subscription) {
	l.mu.Lock()
	if set := l.subs[s.channel]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(l.subs, s.channel)
		}
	}
	s.setHeard(false)
	l.mu.Unlock()
	l.poke()
}

// run connects, serves and reconnects until ctx is cancelled.
func (l *Listener) run(ctx context.Context) {
	defer close(l.done)
	delay := l.cfg.MinBackoff
	for attempt := 1; ; attempt++ {
		conn, err := l.cfg.Connect(ctx)
		if err == nil {
			if attempt > 1 {
				l.log.Info("notify: listener reconnected", "attempt", attempt)
			}
			began := time.Now()
			err = l.serve(ctx, conn)
			l.setPID(0)
			closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(closeCtx)
			cancel()
			l.markInactive()
			if ctx.Err() != nil {
				return
			}
			if time.Since(began) > l.cfg.MaxBackoff {
				delay = l.cfg.MinBackoff // the connection was healthy for a while: start backing off afresh
				attempt = 1
			}
			l.log.Warn("notify: listener connection lost; reconnecting", "error", err, "retry_in", delay)
		} else {
			if ctx.Err() != nil {
				return
			}
			l.log.Warn("notify: listener cannot connect; retrying", "attempt", attempt, "error", err, "retry_in", delay)
		}
		t := time.NewTimer(jitter(delay))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(delay*2, l.cfg.MaxBackoff)
	}
}

// jitter returns a duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

func (l *Listener) setPID(pid uint32) {
	l.mu.Lock()
	l.pid = pid
	l.mu.Unlock()
}

// markInactive records that no channel is listened any more; the next activation sends Resync.
func (l *Listener) markInactive() {
	l.mu.Lock()
	l.pooled = false
	for _, set := range l.subs {
		for s := range set {
			s.listening = false
			s.setHeard(false)
		}
	}
	l.mu.Unlock()
}

// checkDirect finds out whether conn reaches PostgreSQL directly. A pooler such as PgBouncer answers the startup
// itself and announces a backend key of its own, so the pid the connection was given differs from the pid of the
// server process that runs its statements. Behind a pooler in transaction mode a LISTEN runs on whichever server
// connection the statement got and notifications do not come back; the listener keeps listening (what arrives is
// delivered), but no subscription reports that it listens (ListenerPID), so nobody relies on being told.
func (l *Listener) checkDirect(ctx context.Context, conn *pgx.Conn) error {
	var pid uint32
	// The simple protocol, like LISTEN itself: no prepared statement, whatever the pooler keeps.
	if err := conn.QueryRow(ctx, "select pg_catalog.pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		return fmt.Errorf("read the backend pid: %w", err)
	}
	pooled := pid != conn.PgConn().PID()
	if pooled {
		l.log.Warn("notify: the LISTEN connection goes through a connection pooler (the server pid differs from the "+
			"one it announced); notifications may not arrive, so the worker reads every 2 s and is not woken alone. "+
			"Give the listener a direct connection (ClientConfig.ListenConfig)",
			"announced_pid", conn.PgConn().PID(), "server_pid", pid)
	}
	l.mu.Lock()
	l.pooled = pooled
	l.mu.Unlock()
	return nil
}

// serve runs on one connection until it fails or ctx is cancelled.
func (l *Listener) serve(ctx context.Context, conn *pgx.Conn) error {
	l.setPID(conn.PgConn().PID())
	if err := l.checkDirect(ctx, conn); err != nil {
		return err
	}
	listened := make(map[string]bool)
	for {
		if err := l.sync(ctx, conn, listened); err != nil {
			return err
		}

		waitCtx, cancel := context.WithTimeout(ctx, l.cfg.PingInterval)
		woken := make(chan struct{})
		go func() {
			select {
			case <-l.wake:
				close(woken)
				cancel()
			case <-waitCtx.Done():
			}
		}()
		n, err := conn.WaitForNotification(waitCtx)
		timedOut := waitCtx.Err() == context.DeadlineExceeded
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			select {
			case <-woken:
				continue // the subscriber set changed: sync and wait again
			default:
			}
			if timedOut && !conn.IsClosed() {
				pingCtx, pingCancel := context.WithTimeout(ctx, max(l.cfg.PingTimeout, l.cfg.PingInterval))
				perr := conn.Ping(pingCtx)
				pingCancel()
				if perr != nil {
					return fmt.Errorf("ping: %w", perr)
				}
				continue
			}
			return err
		}
		l.dispatch(n.Channel, n.Payload)
	}
}

// sync makes the connection listen on exactly the wanted channels and activates waiting subscriptions.
func (l *Listener) sync(ctx context.Context, conn *pgx.Conn, listened map[string]bool) error {
	l.mu.Lock()
	var add, drop []string
	for ch := range l.subs {
		if !listened[ch] {
			add = append(add, ch)
		}
	}
	for ch := range listened {
		if _, ok := l.subs[ch]; !ok {
			drop = append(drop, ch)
		}
	}
	l.mu.Unlock()

	for _, ch := range add {
		if _, err := conn.Exec(ctx, "listen "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return fmt.Errorf("listen %q: %w", ch, err)
		}
		listened[ch] = true
	}
	for _, ch := range drop {
		if _, err := conn.Exec(ctx, "unlisten "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return fmt.Errorf("unlisten %q: %w", ch, err)
		}
		delete(listened, ch)
	}

	l.mu.Lock()
	for ch, set := range l.subs {
		if !listened[ch] {
			continue // added after we looked; the wake token makes us come back
		}
		for s := range set {
			if !s.listening {
				s.listening = true
				s.setHeard(!l.pooled)
				s.push(Message{Resync: true})
				s.activeOnce.Do(func() { close(s.active) })
			}
		}
	}
	l.mu.Unlock()
	return nil
}

// dispatch queues a notification for every subscriber of its channel, in the order they subscribed (so one that
// sees a message knows that every earlier subscriber has it queued too).
func (l *Listener) dispatch(channel, payload string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.subs[channel]
	subs := make([]*Subscription, 0, len(set))
	for s := range set {
		if s.listening {
			subs = append(subs, s)
		}
	}
	slices.SortFunc(subs, func(a, b *Subscription) int { return cmp.Compare(set[a], set[b]) })
	for _, s := range subs {
		s.push(Message{Payload: payload})
	}
}

// Subscription is one subscriber's view of a channel. Wait on Ready, then take the queued messages with Drain.
type Subscription struct {
	l       *Listener
	channel string
	limit   int

	// listening is guarded by l.mu: true while the current connection listens on the channel for this
	// subscription (it has received its Resync). heard, guarded by l.mu too, is whether ListenerPID reports a
	// session: listening on a direct connection, and not closed. changed (l.mu) is closed and replaced whenever
	// heard changes.
	listening  bool
	heard      bool
	changed    chan struct{}
	activeOnce sync.Once
	active     chan struct{}

	qmu   sync.Mutex
	queue []Message

	ready chan struct{} // capacity 1: the queue is not empty
	done  chan struct{}
	once  sync.Once
}

// Channel returns the channel name.
func (s *Subscription) Channel() string { return s.channel }

// Ready receives a value when messages are waiting; call Drain to take them.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Active is closed once LISTEN has been executed for this subscription (the first Resync is then queued).
// After that, every notification committed on the channel reaches the subscription while the connection
// stays up; after a reconnect a Resync is queued again.
func (s *Subscription) Active() <-chan struct{} { return s.active }

// ListenerPID reports whether notifications on the channel reach this subscription now, and through which server
// session: the process id (pg_backend_pid()) of the connection whose LISTEN for it is in effect, 0 when none is.
// It is non-zero from the moment its LISTEN succeeded on a direct connection (when its Resync is queued) until the
// connection is lost, the subscription is closed or the listener is closed, and again (with the new session's
// pid) after the listener reconnected and listened again. Always 0 while the connection goes through a connection
// pooler, which may not deliver notifications. changed is closed at the next change between listening and not, so
// a caller that reads the state, acts on it and then waits on changed misses none; a reconnect changes it twice
// (lost, then listening again), so such a caller also sees every new pid. A lost connection is noticed when a
// read on it fails or a ping finds it dead (Config.PingInterval).
func (s *Subscription) ListenerPID() (pid uint32, changed <-chan struct{}) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if !s.heard {
		return 0, s.changed
	}
	return s.l.pid, s.changed
}

// setHeard records whether ListenerPID reports a session and wakes the callers waiting for a change; l.mu is held.
func (s *Subscription) setHeard(v bool) {
	if s.heard == v {
		return
	}
	s.heard = v
	close(s.changed)
	s.changed = make(chan struct{})
}

// Done is closed when the subscription ends: Close was called on it or on the listener.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Drain returns the queued messages in arrival order and empties the queue.
func (s *Subscription) Drain() []Message {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	out := s.queue
	s.queue = nil
	return out
}

// Close ends the subscription; the listener stops listening on the channel when nobody else wants it.
func (s *Subscription) Close() {
	s.l.remove(s)
	s.end()
}

func (s *Subscription) end() {
	s.once.Do(func() { close(s.done) })
}

func (s *Subscription) push(m Message) {
	s.qmu.Lock()
	if len(s.queue) >= s.limit {
		// Too far behind: forget the oldest half and tell the subscriber to re-read.
		keep := s.queue[len(s.queue)/2:]
		s.queue = append([]Message{{Resync: true}}, keep...)
	}
	s.queue = append(s.queue, m)
	s.qmu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}
