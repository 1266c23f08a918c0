// Package poller is the top of a task's path through the engine: for one flow's queue it waits for free handler
// slots, reads messages and claims their tasks (through the claimer: in one call, pgflow.read_and_start_tasks, when
// it listens for queue notifications; else pgmq.read_with_poll, then the claim) and starts the executor for every
// claimed task. It knows the claimer and the executor below it.
package poller

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgflow-go/pgflow/internal/backoff"
	"github.com/pgflow-go/pgflow/internal/claimer"
	"github.com/pgflow-go/pgflow/internal/executor"
	"github.com/pgflow-go/pgflow/internal/notify"
	"github.com/pgflow-go/pgflow/internal/observe"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

const (
	// defaultListenPollInterval bounds how long a listening poller waits for a notification (or an announced
	// delayed message's time, see wake.go) before it reads its queue anyway: messages that become visible without
	// either (messages of crashed workers after their visibility timeout, delays announced while the listener was
	// disconnected) are found within this time.
	defaultListenPollInterval = 2 * time.Second
	// defaultFirstListenWait is Config.FirstListenWait's default: a healthy listener connects in milliseconds.
	defaultFirstListenWait = time.Second
	// claimLinger is how long a busy poller waits for more free slots before it reads, so that it claims many
	// tasks per round trip instead of one each time a single slot frees up.
	claimLinger = 5 * time.Millisecond
)

// Tasks counts the tasks running in a worker, across its pollers.
type Tasks struct {
	wg sync.WaitGroup
	n  atomic.Int64
}

// InFlight returns how many tasks are running now.
func (t *Tasks) InFlight() int64 { return t.n.Load() }

// Wait blocks until no task runs.
func (t *Tasks) Wait() { t.wg.Wait() }

func (t *Tasks) start() { t.wg.Add(1); t.n.Add(1) }
func (t *Tasks) done()  { t.n.Add(-1); t.wg.Done() }

// Slots is a pool of handler slots shared by the pollers of one worker.
type Slots chan struct{}

// NewSlots returns a pool of n slots.
func NewSlots(n int) Slots { return make(Slots, n) }

// Config configures the Poller of one flow's queue.
type Config struct {
	DB       sqlapi.DBTX
	Flow     string
	Queue    string
	WorkerID string
	// BatchSize is the largest number of messages read at once.
	BatchSize int
	// VisibilitySeconds hides read messages until they are claimed.
	VisibilitySeconds int
	// MaxPollSeconds and PollIntervalMs drive pgmq.read_with_poll; MaxPollWait bounds a listening poller's wait.
	MaxPollSeconds, PollIntervalMs int
	MaxPollWait                    time.Duration
	// ListenPollInterval is how long a listening poller waits without a notification before it reads anyway
	// (bounded by MaxPollWait). 0: 2 s.
	ListenPollInterval time.Duration
	// FirstListenWait bounds how long a poller with a Wake subscription waits for its LISTEN to be in effect
	// before its first read (see awaitListener). 0: 1 s.
	FirstListenWait time.Duration
	// Slots is the worker's shared pool; FlowSlots, when not nil, limits this flow's share of it.
	Slots, FlowSlots Slots
	// Wake, when not nil, announces new messages of Queue; Listener tells whether it is connected.
	Wake *notify.Subscription
	// Own, when not nil, is the subscription to the worker row's own channel (sqlapi.WorkerChannel(WorkerID)), on
	// which the schema (v0.20.0+) wakes this worker alone instead of every listener of Queue (see passon.go).
	Own      *notify.Subscription
	Listener *notify.Listener
	Claimer  *claimer.Claimer
	// Expect, when not nil, announces that a claim is about to ride with the worker's results (a read by the
	// listening path after a full one; completer.Completer.Expect): called once the first slot of a read is taken,
	// its done once the read has returned; a value on wanted ends the gathering of slots for that read.
	Expect   func() (wanted <-chan struct{}, done func())
	Executor *executor.Executor
	Tasks    *Tasks
	Observer *observe.Observer
	Logger   *slog.Logger
	Retry    backoff.Policy
}

// Poller reads and claims one queue's messages.
type Poller struct {
	cfg Config
	due dueTimes // announced delayed messages' visible times (wake.go); only Run's goroutine uses it
	// notes holds the queue's notifications but cancels, passed on by relay (cancel.go) to the wake logic.
	notes *notes
	// woken: the notifications taken since the last read include a wake on the worker's own channel (only Run's
	// goroutine uses it); see passon.go.
	woken bool
	// starved is true while Run waits for a free slot with none free (passon.go).
	starved atomic.Bool
	// passing tracks pass-on notifications in flight; Run waits for them before it returns.
	passing sync.WaitGroup
	// expectDone ends the announcement of the read being gathered (Config.Expect), and wanted tells that the
	// worker's results wait for it; only Run's goroutine uses them.
	expectDone func()
	wanted     <-chan struct{}
}

// unexpect ends the announcement of a ride, if one was made.
func (p *Poller) unexpect() {
	if p.expectDone != nil {
		p.expectDone()
		p.expectDone, p.wanted = nil, nil
	}
}

// New returns a Poller.
func New(cfg Config) *Poller { return &Poller{cfg: cfg, notes: newNotes()} }

// Run reads, claims and starts tasks while free slots exist, until stop ends. calls is the context of claims and
// of the tasks' reports (see claimer.Claim).
func (p *Poller) Run(stop, calls context.Context) {
	// Run returns only after stop ended: the relays return then too; a wake for this worker alone that it will not
	// act on any more then goes to the others, and Run waits for the pass-ons in flight.
	var relays sync.WaitGroup
	defer p.passing.Wait()
	defer p.passOnIfOwed(calls)
	defer relays.Wait()
	if p.cfg.Wake != nil {
		relays.Go(func() { p.relay(stop, calls, p.cfg.Wake, false) })
	}
	if p.cfg.Own != nil {
		relays.Go(func() { p.relay(stop, calls, p.cfg.Own, true) })
	}
	if p.cfg.Wake != nil && !p.awaitListener(stop) {
		return
	}
	failures := 0
	backlog := false // the last read returned as many messages as it asked for
	for stop.Err() == nil {
		n, ok := p.gatherSlots(stop, calls, backlog)
		if !ok {
			p.unexpect()
			return
		}
		start := time.Now()
		r, err := p.poll(stop, calls, n, backlog)
		p.unexpect()
		if err != nil {
			p.release(r.held)
			if stop.Err() != nil {
				return
			}
			p.cfg.Observer.Polled(p.cfg.Flow, p.cfg.Queue, p.cfg.WorkerID, start, 0, 0, err)
			failures++
			delay := p.cfg.Retry.Delay(failures)
			p.cfg.Logger.Warn("polling the queue failed, retrying", "retry", failures, "delay", delay, "error", err)
			if backoff.Sleep(stop, delay) != nil {
				return
			}
			continue
		}
		failures = 0
		backlog = r.read == n
		p.cfg.Observer.Polled(p.cfg.Flow, p.cfg.Queue, p.cfg.WorkerID, start, r.read, len(r.tasks), nil)
		p.release(r.held - len(r.tasks))
		p.startTasks(r.tasks)
		// A read that found fewer messages than it could take left nothing visible: what arrives later announces
		// itself (and a notification that came during the read ends the wait at once), so wait for news instead
		// of reading again at once only to find nothing (one empty read per run at low load). The slots are
		// free while it waits: the worker's other queues share them.
		if r.listened && r.read < n {
			p.waitForWake(stop)
		}
	}
}

// awaitListener waits, holding no slot and making no call, until the LISTEN of the poller's queue channel is in
// effect, for at most FirstListenWait. The worker's listener connects as the worker starts; without this wait
// the first read of every queue would find it not connected yet and wait inside pgmq.read_with_poll, holding a
// pool connection for up to MaxPollWait (with more queues than connections, a worker's first runs waited that
// long for one). A listener that does not connect in time changes nothing: the poller reads with
// read_with_poll until it does. It returns false when stop ended.
func (p *Poller) awaitListener(stop context.Context) bool {
	t := time.NewTimer(cmp.Or(p.cfg.FirstListenWait, defaultFirstListenWait))
	defer t.Stop()
	select {
	case <-p.cfg.Wake.Active():
	case <-t.C:
	case <-stop.Done():
		return false
	}
	return true
}

// startTasks starts the executor for each claimed task, each holding one of the slots taken for it.
func (p *Poller) startTasks(tasks []executor.Task) {
	settled := p.settled // one method value per batch, not one per task
	for i := range tasks {
		t := &tasks[i] // not copied again: the task's goroutine reads it from the claimed batch
		p.cfg.Observer.TaskClaimed(t.Meta())
		p.cfg.Tasks.start()
		// The task's own goroutine runs its handler; settled frees its slot once its outcome is known.
		go p.cfg.Executor.Start(t, settled)
	}
}

// acquire takes one slot of the flow's share (when limited) and of the worker's pool; with wait false it does not
// block. ok is false when stop ended (nothing held then) or, without wait, when no slot is free.
func (p *Poller) acquire(stop context.Context, wait bool) bool {
	if p.cfg.FlowSlots != nil {
		if !take(stop, p.cfg.FlowSlots, wait) {
			return false
		}
	}
	if !take(stop, p.cfg.Slots, wait) {
		if p.cfg.FlowSlots != nil {
			<-p.cfg.FlowSlots
		}
		return false
	}
	return true
}

func take(stop context.Context, s Slots, wait bool) bool {
	if !wait {
		select {
		case s <- struct{}{}:
			return true
		default:
			return false
		}
	}
	select {
	case s <- struct{}{}:
		return true
	case <-stop.Done():
		return false
	}
}

// settled ends a task started by Run: its outcome is known, its slot is free again.
func (p *Poller) settled() {
	p.cfg.Tasks.done()
	p.release(1)
}

func (p *Poller) release(n int) {
	for range n {
		<-p.cfg.Slots
		if p.cfg.FlowSlots != nil {
			<-p.cfg.FlowSlots
		}
	}
}

// gatherSlots takes one free slot (waiting for it), then every slot free right now, up to BatchSize. When the
// last read found a full batch (more work is likely waiting) and tasks are still running, it waits up to
// claimLinger for more slots to free up. ok is false when stop ended (no slot is held then).
func (p *Poller) gatherSlots(stop, calls context.Context, backlog bool) (n int, ok bool) {
	if !p.acquire(stop, false) {
		// Every slot is busy: a wake for this worker alone would wait for a task to finish; pass it on.
		p.starved.Store(true)
		p.passOnIfOwed(calls)
		ok := p.acquire(stop, true)
		p.starved.Store(false)
		if !ok {
			return 0, false
		}
	}
	n = 1
	if backlog && p.cfg.Expect != nil && p.listening() {
		// Announced once a slot is held: a starved poller waits for results to be recorded, so it must not hold
		// the call that records them.
		p.wanted, p.expectDone = p.cfg.Expect()
	}
	var linger <-chan time.Time
	for n < p.cfg.BatchSize {
		if p.acquire(stop, false) {
			n++
			continue
		}
		if !backlog || p.cfg.Tasks.InFlight() == 0 {
			return n, true
		}
		if linger == nil {
			t := time.NewTimer(claimLinger)
			defer t.Stop()
			linger = t.C
		}
		// Without a flow limit, wait on the pool itself; with one, look again shortly (a slot needs both).
		var free Slots
		var again <-chan time.Time
		if p.cfg.FlowSlots == nil {
			free = p.cfg.Slots
		} else {
			again = time.After(200 * time.Microsecond)
		}
		select {
		case free <- struct{}{}:
			n++
		case <-again:
		case <-linger:
			return n, true
		case <-p.wanted: // the worker's results wait for this read to ride with them (nil: not announced)
			return n, true
		case <-stop.Done():
			p.release(n)
			return 0, false
		}
	}
	return n, true
}

// listening reports whether notifications reach the poller now.
func (p *Poller) listening() bool {
	if p.cfg.Wake == nil {
		return false
	}
	select {
	case <-p.cfg.Wake.Active():
		return p.cfg.Listener.BackendPID() != 0
	default:
		return false
	}
}

// pollResult is what one poll read and claimed.
type pollResult struct {
	read     int             // messages read
	tasks    []executor.Task // tasks claimed, each holding one slot
	held     int             // slots the poller holds after the poll, the tasks' included
	listened bool            // read by the listening path: when short, wait for news before reading again
}

// poll reads up to n messages and claims their tasks, holding the n slots gathered for them. A listening poller
// reads and claims in one call (pgflow.read_and_start_tasks: one round trip, one row version per message), which
// never waits (listened: when the read comes back short, Run waits for a notification, the time of the earliest
// announced delayed message, or ListenPollInterval (MaxPollWait if shorter), see waitForWake in wake.go).
// Otherwise it waits inside pgmq.read_with_poll, up to MaxPollSeconds, and holds no slot while it does: it frees
// them first and takes one again for each message read, when one is free; a message it finds no slot for is made
// visible again at once (sqlapi.MakeVisible) for any worker to take. So a queue without work never keeps slots
// from the worker's other queues. After stop ended, read messages are not claimed: they become visible again
// after the visibility timeout and another worker takes them.
func (p *Poller) poll(stop, calls context.Context, n int, backlog bool) (pollResult, error) {
	if p.listening() {
		p.clearWake()
		woken := p.woken
		p.woken = false
		read, tasks, err := p.cfg.Claimer.ReadAndClaim(stop, calls, n, p.cfg.VisibilitySeconds, backlog)
		if err == nil && woken && read == n {
			// Woken alone and the read came back full: more may wait than this worker can take now.
			p.passOn(calls)
		}
		return pollResult{read: read, tasks: tasks, held: n, listened: true}, err
	}
	p.release(n)
	msgs, err := sqlapi.ReadWithPoll(stop, p.cfg.DB, sqlapi.ReadParams{Queue: p.cfg.Queue, VisibilitySeconds: p.cfg.VisibilitySeconds,
		Qty: n, MaxPollSeconds: p.cfg.MaxPollSeconds, PollIntervalMs: p.cfg.PollIntervalMs})
	if err != nil || len(msgs) == 0 || stop.Err() != nil {
		return pollResult{read: len(msgs)}, err
	}
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	held := 0
	for held < len(ids) && p.acquire(stop, false) {
		held++
	}
	if spare := ids[held:]; len(spare) > 0 {
		if err := sqlapi.MakeVisible(calls, p.cfg.DB, p.cfg.Queue, spare); err != nil {
			p.cfg.Logger.Warn("read messages for which no handler slot was free any more; they reappear after their visibility timeout",
				"messages", len(spare), "error", err)
		}
	}
	if held == 0 {
		return pollResult{read: len(msgs)}, nil
	}
	return pollResult{read: len(msgs), tasks: p.cfg.Claimer.Claim(stop, calls, ids[:held]), held: held}, nil
}
