package poller

// How a listening poller decides when to read: the queue's notifications (pgflow:queue:<queue>) and a timer for
// the earliest delayed message it was told about.
//
// Payloads of the queue channel:
//   - ''                                  new messages are visible now: read now (schema v0.18.0+);
//   - '{"visible_at":"<timestamptz>"}'    a message becomes visible at that time (a start delay or a retry's
//     delay, schema v0.20.0+): remember the time and read when it comes;
//   - anything else (e.g. '{"cancel_run":…}', or what a later schema adds): not about reading; ignored here.
//
// A Resync (the listener reconnected, or fell behind) means notifications may have been lost: read now. Without
// any of these, the poller still reads every ListenPollInterval (2 s), which finds what no notification announced
// (messages of crashed workers after their visibility timeout, delays announced while disconnected).

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow/internal/notify"
)

const (
	// wakeMargin is added to a visible_at time before reading: the message's visibility is decided by the
	// database's clock, so reading a little after it absorbs a small clock difference between worker and database.
	wakeMargin = 2 * time.Millisecond
	// wakeCoalesce groups due times this close to the earliest one into one read at the latest of them, so a burst
	// of delayed messages announced by separate transactions costs one read per window, not one per message.
	wakeCoalesce = 10 * time.Millisecond
	// maxDueTimes bounds the delayed times a poller remembers; beyond it the latest are forgotten (the periodic
	// read finds their messages).
	maxDueTimes = 1024
)

// dueTimes is the sorted, deduplicated set of times at which announced delayed messages become visible.
type dueTimes []time.Time

func (d *dueTimes) add(t time.Time) {
	i, found := slices.BinarySearchFunc(*d, t, func(a, b time.Time) int { return a.Compare(b) })
	if found {
		return
	}
	*d = slices.Insert(*d, i, t)
	if len(*d) > maxDueTimes {
		*d = (*d)[:maxDueTimes]
	}
}

// popVisible forgets the times not later than now: a read issued now sees their messages.
func (d *dueTimes) popVisible(now time.Time) {
	i, _ := slices.BinarySearchFunc(*d, now, func(a, b time.Time) int {
		if a.After(b) {
			return 1
		}
		return -1
	})
	*d = slices.Delete(*d, 0, i)
}

// next returns when to read for the earliest due time: the latest due time within wakeCoalesce of it, plus
// wakeMargin; ok is false when no time is due.
func (d dueTimes) next() (at time.Time, ok bool) {
	if len(d) == 0 {
		return time.Time{}, false
	}
	at = d[0]
	for _, t := range d[1:] {
		if t.Sub(d[0]) > wakeCoalesce {
			break
		}
		at = t
	}
	return at.Add(wakeMargin), true
}

// queuePayload is the JSON form of a queue notification's payload.
type queuePayload struct {
	VisibleAt *string `json:"visible_at"`
}

// parseVisibleAt returns the time of a '{"visible_at": …}' payload; ok is false for any other payload.
func parseVisibleAt(payload string) (time.Time, bool) {
	if !strings.HasPrefix(strings.TrimSpace(payload), "{") {
		return time.Time{}, false
	}
	var p queuePayload
	if json.Unmarshal([]byte(payload), &p) != nil || p.VisibleAt == nil {
		return time.Time{}, false
	}
	return parseTimestamp(*p.VisibleAt)
}

// parseTimestamp reads an RFC 3339 time, or PostgreSQL's text form of a timestamptz.
func parseTimestamp(s string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999Z07"} {
		if t, err := time.Parse(layout, strings.TrimSpace(s)); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// takeNotes handles the queue notifications received so far: it remembers announced visible_at times and
// reports whether any message asks for a read now (an empty payload or a Resync).
func (p *Poller) takeNotes(msgs []notify.Message) (readNow bool) {
	for _, m := range msgs {
		switch {
		case m.Resync, m.Payload == "":
			readNow = true
		default:
			if t, ok := parseVisibleAt(m.Payload); ok {
				p.due.add(t)
			}
			// Other payloads are not about reading.
		}
	}
	return readNow
}

// clearWake takes the notifications received so far and forgets the due times that have come: the read that
// follows sees their messages.
func (p *Poller) clearWake() {
	select {
	case <-p.ready():
		p.takeNotes(p.drain())
	default:
	}
	p.due.popVisible(time.Now())
}

// listenPollInterval is how long a listening poller waits without a notification before it reads anyway.
func (p *Poller) listenPollInterval() time.Duration {
	d := defaultListenPollInterval
	if p.cfg.ListenPollInterval > 0 {
		d = p.cfg.ListenPollInterval
	}
	if p.cfg.MaxPollWait > 0 {
		d = min(d, p.cfg.MaxPollWait)
	}
	return d
}

// waitForWake waits until it is time to read again: a notification of new visible messages, the earliest
// announced delayed message's time, the periodic read, or stop.
func (p *Poller) waitForWake(stop context.Context) {
	periodic := time.NewTimer(p.listenPollInterval())
	defer periodic.Stop()
	var dueTimer *time.Timer // Go 1.23+ timers: Reset needs no draining
	defer func() {
		if dueTimer != nil {
			dueTimer.Stop()
		}
	}()
	for {
		var due <-chan time.Time
		if at, ok := p.due.next(); ok {
			if dueTimer == nil {
				dueTimer = time.NewTimer(time.Until(at))
			} else {
				dueTimer.Reset(time.Until(at))
			}
			due = dueTimer.C
		}
		select {
		case <-p.ready():
			if p.takeNotes(p.drain()) {
				return
			}
		case <-due:
			return
		case <-periodic.C:
			return
		case <-stop.Done():
			return
		}
	}
}
