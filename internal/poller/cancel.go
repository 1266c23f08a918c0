package poller

// Run cancellation: pgflow.cancel_run sends '{"cancel_run":"<run id>"}' on the queue channel of every queue with
// started tasks of the run. The poller's relay takes the subscription's notifications as they arrive, also while
// the poller waits for a free handler slot (when every slot is busy, possibly with the very handlers to cancel),
// hands cancels to the executor at once, and queues every other notification for the wake logic (wake.go), which
// reads them through ready and drain instead of the subscription.

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/pgflow-go/pgflow/internal/notify"
)

// notes is the queue of notifications the relay passed on to the wake logic.
type notes struct {
	mu   sync.Mutex
	msgs []notify.Message
	// owed: msgs holds a read-now wake that came on the worker's own channel (it was told alone), not yet taken
	// by the wake logic nor passed on.
	owed  bool
	ready chan struct{} // capacity 1: msgs is not empty
}

func newNotes() *notes { return &notes{ready: make(chan struct{}, 1)} }

func (n *notes) push(msgs []notify.Message, own bool) {
	if len(msgs) == 0 {
		return
	}
	n.mu.Lock()
	n.msgs = append(n.msgs, msgs...)
	if own && slices.ContainsFunc(msgs, func(m notify.Message) bool { return !m.Resync && m.Payload == "" }) {
		n.owed = true
	}
	n.mu.Unlock()
	select {
	case n.ready <- struct{}{}:
	default:
	}
}

// ready receives a value when notifications other than cancels are waiting; take them with drain.
func (p *Poller) ready() <-chan struct{} { return p.notes.ready }

// drain returns the waiting notifications (cancels excluded) and empties the queue; it records (p.woken) whether
// they include a wake for this worker alone that was not passed on. Only Run's goroutine calls it.
func (p *Poller) drain() []notify.Message {
	p.notes.mu.Lock()
	defer p.notes.mu.Unlock()
	out := p.notes.msgs
	p.notes.msgs = nil
	if p.notes.owed {
		p.woken = true
		p.notes.owed = false
	}
	return out
}

// relay takes every notification of a subscription (the queue's channel, or with own the worker's channel) as it
// arrives: a cancel cancels the run's running handlers in the executor at once; the others go to the wake logic.
// A wake on the worker's own channel that comes while every slot is busy is passed on at once (passon.go). It
// returns when stop ends or the subscription closes.
func (p *Poller) relay(stop, calls context.Context, sub *notify.Subscription, own bool) {
	for {
		select {
		case <-stop.Done():
			return
		case <-sub.Done():
			return
		case <-sub.Ready():
		}
		msgs := sub.Drain()
		keep := msgs[:0]
		for _, m := range msgs {
			if runID, ok := cancelPayload(m); ok {
				n := p.cfg.Executor.CancelRun(runID)
				p.cfg.Logger.Info("run cancelled: cancelled the context of its running handlers", "run_id", runID, "handlers", n)
				continue
			}
			keep = append(keep, m)
		}
		p.notes.push(keep, own)
		if own && p.starved.Load() {
			p.passOnIfOwed(calls)
		}
	}
}

// cancelPayload returns the run id of a '{"cancel_run": "<run id>"}' notification.
func cancelPayload(m notify.Message) (runID string, ok bool) {
	if m.Resync || !strings.Contains(m.Payload, "cancel_run") {
		return "", false
	}
	var v struct {
		CancelRun string `json:"cancel_run"`
	}
	if json.Unmarshal([]byte(m.Payload), &v) != nil || v.CancelRun == "" {
		return "", false
	}
	return v.CancelRun, true
}
