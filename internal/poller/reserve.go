package poller

// Tasks claimed by a start (pgflow.WorkerConfig.EagerStarts): the Client that starts runs of a flow this worker
// serves claims their first tasks in the start's own transaction, for this worker, up to the handler slots free
// at that moment, and hands them over here. They skip the queue's notification, the wake of a poller and a claim
// of their own. A Reservation holds the slots from before the start until its tasks are handed over.

import (
	"context"
	"time"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// Reservation is a set of free handler slots of one Poller, taken for tasks that a start will claim for the
// poller's worker row. Exactly one of Deliver and Cancel ends it.
type Reservation struct {
	p *Poller
	n int
}

// Reserve takes up to max handler slots that are free right now, without waiting, for a claim made elsewhere.
// It returns nil when none is free, or when the poller is not running (not started yet, or stopping: a stopping
// worker takes nothing new). Run does not return before every reservation has ended.
func (p *Poller) Reserve(max int) *Reservation {
	p.resMu.Lock()
	if !p.open {
		p.resMu.Unlock()
		return nil
	}
	p.reserved.Add(1)
	p.resMu.Unlock()
	n := 0
	for n < min(max, p.cfg.BatchSize) && p.acquire(context.Background(), false) {
		n++
	}
	if n == 0 {
		p.reserved.Done()
		return nil
	}
	return &Reservation{p: p, n: n}
}

// Claim is what the start should claim: at most the reserved number of tasks, from the poller's queue, for its
// worker row, hidden for the poller's visibility timeout when read but not claimed.
func (r *Reservation) Claim() sqlapi.StartClaim {
	return sqlapi.StartClaim{Queue: r.p.cfg.Queue, WorkerID: r.p.cfg.WorkerID, Qty: r.n,
		VisibilitySeconds: r.p.cfg.VisibilitySeconds}
}

// Deliver starts the tasks the start claimed (committed: they are this worker's now) and frees the slots they do
// not use. claimedAt is a time not later than the start's transaction began. A read that came back full may have
// left messages visible: then the queue's workers are woken for them.
func (r *Reservation) Deliver(got sqlapi.StartClaimed, claimedAt time.Time) {
	p := r.p
	defer p.reserved.Done()
	tasks := p.cfg.Claimer.Tasks(p.calls, got.Tasks, got.Unclaimed, claimedAt)
	p.cfg.Observer.Polled(p.cfg.Flow, p.cfg.Queue, p.cfg.WorkerID, claimedAt, got.Read, len(tasks), nil)
	p.release(r.n - len(tasks))
	p.startTasks(tasks)
	if got.Read >= r.n {
		p.passOn(p.calls)
	}
}

// Cancel frees the reserved slots: the start failed, or did not claim.
func (r *Reservation) Cancel() {
	r.p.release(r.n)
	r.p.reserved.Done()
}

// openReservations lets Reserve take slots while Run reads the queue; the returned function stops new
// reservations and waits for the ones in progress.
func (p *Poller) openReservations(calls context.Context) (closeAndWait func()) {
	p.resMu.Lock()
	p.calls = calls
	p.open = true
	p.resMu.Unlock()
	return func() {
		p.resMu.Lock()
		p.open = false
		p.resMu.Unlock()
		p.reserved.Wait()
	}
}
