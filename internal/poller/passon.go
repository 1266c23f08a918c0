package poller

// Targeted wake (schema v0.20.0+): pgflow._wake_queue tells one alive worker of a queue, on the worker row's own
// channel (sqlapi.WorkerChannel), that messages are visible, instead of every listener of the queue's channel; with
// N worker processes a start then costs one read instead of N, N-1 of them empty.
//
// The worker told may not be able to take everything: its read came back full (it asked for as many messages as
// it had free slots, and got them all, so more may wait), or every slot was busy when the wake came. Then it
// passes the wake on: one read-now notification on the queue's channel, which every listening worker of the
// queue receives. The rule is the simplest that leaves no backlog to the periodic read: a burst wakes everybody,
// and in a burst their reads are not empty. A wake that came through the queue's channel is never passed on (every
// worker already had it). Nothing is lost when the chosen worker is gone or never passes on (an older worker that
// does not listen on its own channel, a crash): the messages stay visible and any worker's periodic read (every
// ListenPollInterval, 2 s) takes them; that is the latency such a case can cost.

import (
	"context"
	"log/slog"
	"slices"

	"github.com/pgflow-go/pgflow/internal/notify"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// passOnIfOwed passes on a wake for this worker alone that is still waiting in the notes (and no longer owes it:
// the relay and Run may both try, only one sends).
func (p *Poller) passOnIfOwed(calls context.Context) {
	p.notes.mu.Lock()
	owed := p.notes.owed
	p.notes.owed = false
	p.notes.mu.Unlock()
	if owed {
		p.passOn(calls)
	}
}

// passOn wakes every listening worker of the queue, in the background (Run waits for it before returning).
func (p *Poller) passOn(calls context.Context) {
	p.passing.Go(func() {
		if err := sqlapi.WakeQueue(calls, p.cfg.DB, p.cfg.Queue); err != nil {
			if calls.Err() == nil {
				p.cfg.Logger.Warn("passing a wake on to the queue's other workers failed; they find the messages at their periodic read",
					"error", err)
			}
			return
		}
		p.cfg.Logger.Debug("woken alone but cannot take everything: woke the queue's other workers")
	})
}

// ForwardWakes passes on every read-now wake that arrives on a worker row's own channel (sub) to the queue's
// channel, until ctx ends. A stopping worker runs it between the end of its reads and the moment its row is
// recorded as stopped: until then pgflow._wake_queue may still choose it, and a wake it no longer acts on would
// leave the messages to the other workers' periodic read.
func ForwardWakes(ctx context.Context, db sqlapi.DBTX, queue string, sub *notify.Subscription, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.Done():
			return
		case <-sub.Ready():
		}
		if !slices.ContainsFunc(sub.Drain(), func(m notify.Message) bool { return !m.Resync && m.Payload == "" }) {
			continue
		}
		if err := sqlapi.WakeQueue(ctx, db, queue); err != nil && ctx.Err() == nil {
			log.Warn("passing a wake on to the queue's other workers failed; they find the messages at their periodic read",
				"error", err)
		}
	}
}
