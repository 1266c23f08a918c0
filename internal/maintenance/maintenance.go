// Package maintenance keeps a worker's rows alive and the database's stalled tasks moving: heartbeats for every
// worker row of a process (one per queue it serves), each saying whether the row listens on its own channel,
// registering a row again when it went missing, shutdown on deprecation, and pgflow.requeue_stalled_tasks under an
// advisory lock so that one worker of a database runs it at a time. It knows package sqlapi only.
package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// Row is one worker row: a worker id, the queue it serves and, for a worker that listens for notifications, how to
// learn whether its LISTEN on the row's own channel is in effect.
type Row struct {
	WorkerID string
	Queue    string
	// Listening, when not nil, reports whether the row's LISTEN on its own channel (sqlapi.WorkerChannel) is in
	// effect now, and a channel closed at the next change (notify.Subscription.Listening). nil: never listening.
	Listening func() (listening bool, changed <-chan struct{})
}

// DB is what maintenance needs: queries and transactions (a *pgxpool.Pool).
type DB interface {
	sqlapi.DBTX
	sqlapi.TxBeginner
}

// listening reports the row's listening state now and the channel closed at its next change (nil: never changes).
func (r Row) listening() (bool, <-chan struct{}) {
	if r.Listening == nil {
		return false, nil
	}
	return r.Listening()
}

// Heartbeat sends a heartbeat for every row every interval until ctx ends, each saying whether the row listens on
// its own channel now, so the schema wakes a row alone only while its LISTEN is in effect. A change of that state
// is written at once (one heartbeat of the rows that changed), not at the next interval: a row whose listener
// connection was lost stops being chosen as soon as the listener notices, and one that listens again is chosen
// again as soon as its LISTEN succeeded. A row missing from pgflow.workers is registered again (as functionName);
// onDeprecated is called (once) when the database deprecates a row.
func Heartbeat(ctx context.Context, db DB, rows []Row, functionName string, interval time.Duration, log *slog.Logger,
	onDeprecated func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	h := &heartbeats{db: db, rows: rows, functionName: functionName, log: log, onDeprecated: onDeprecated,
		said: make([]*bool, len(rows))}
	// One watcher per listening row turns its state changes into kicks (coalesced: a pass reads every row's state
	// when it runs). Each watcher takes the channel of the next change before it kicks, so a change that happens
	// while a pass runs kicks again.
	kick := make(chan struct{}, 1)
	var watchers sync.WaitGroup
	defer watchers.Wait()
	for _, r := range rows {
		_, changed := r.listening()
		if changed == nil {
			continue
		}
		watchers.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-changed:
				}
				_, changed = r.listening()
				select {
				case kick <- struct{}{}:
				default:
				}
			}
		})
	}
	h.beat(ctx, false) // the state of each row since its registration is unknown here: write it now
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.beat(ctx, false)
		case <-kick:
			h.beat(ctx, true)
		}
	}
}

// heartbeats is the state of one Heartbeat loop.
type heartbeats struct {
	db           DB
	rows         []Row
	functionName string
	log          *slog.Logger
	onDeprecated func()
	deprecated   bool
	said         []*bool // per row, the listening state its last successful heartbeat wrote (nil: none yet)
}

// beat sends a heartbeat for every row, or with changedOnly for the rows whose listening state differs from what
// their last heartbeat said.
func (h *heartbeats) beat(ctx context.Context, changedOnly bool) {
	for i, r := range h.rows {
		listening, _ := r.listening()
		if changedOnly && h.said[i] != nil && *h.said[i] == listening {
			continue
		}
		dep, err := sqlapi.HeartbeatWorker(ctx, h.db, r.WorkerID, listening)
		if errors.Is(err, sqlapi.ErrWorkerNotRegistered) {
			h.log.Warn("worker row missing from pgflow.workers; registering again", "worker_id", r.WorkerID, "queue", r.Queue)
			if err := sqlapi.RegisterWorker(ctx, h.db, r.WorkerID, r.Queue, h.functionName); err != nil {
				if ctx.Err() == nil {
					h.log.Warn("registering the worker again failed", "worker_id", r.WorkerID, "error", err)
				}
				continue
			}
			// A new registration does not listen: say at once whether this row does.
			dep, err = sqlapi.HeartbeatWorker(ctx, h.db, r.WorkerID, listening)
		}
		switch {
		case err != nil:
			if ctx.Err() == nil {
				h.log.Warn("heartbeat failed", "worker_id", r.WorkerID, "error", err)
			}
			continue
		case dep && !h.deprecated:
			h.deprecated = true
			h.log.Info("worker deprecated: finishing in-flight tasks and stopping", "worker_id", r.WorkerID, "queue", r.Queue)
			h.onDeprecated()
		}
		if h.said[i] == nil || *h.said[i] != listening {
			h.log.Debug("heartbeat: recorded whether the worker listens on its own channel", "worker_id", r.WorkerID,
				"listening", listening)
		}
		h.said[i] = &listening
	}
}

// RequeueStalled runs pgflow.requeue_stalled_tasks every interval (when no other worker of the database is doing
// it) until ctx ends.
func RequeueStalled(ctx context.Context, db DB, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ran, n, err := sqlapi.RequeueStalledTasks(ctx, db)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				log.Warn("stalled-task maintenance failed", "error", err)
			}
		case !ran:
			log.Debug("stalled-task maintenance skipped: another worker is running it")
		case n > 0:
			log.Info("requeued stalled tasks", "count", n)
		}
	}
}
