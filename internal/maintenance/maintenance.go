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
// learn whether its LISTEN on the row's own channel is in effect, and in which server session.
type Row struct {
	WorkerID string
	Queue    string
	// ListenerPID, when not nil, reports the server process id of the session whose LISTEN on the row's own
	// channel (sqlapi.WorkerChannel) is in effect now (0: none), and a channel closed at the next change
	// (notify.Subscription.ListenerPID). nil: never listening.
	ListenerPID func() (pid uint32, changed <-chan struct{})
}

// DB is what maintenance needs: queries and transactions (a *pgxpool.Pool).
type DB interface {
	sqlapi.DBTX
	sqlapi.TxBeginner
}

// listenerPID reports the row's listening session now (0: not listening) and the channel closed at its next change
// (nil: never changes).
func (r Row) listenerPID() (uint32, <-chan struct{}) {
	if r.ListenerPID == nil {
		return 0, nil
	}
	return r.ListenerPID()
}

// Heartbeat sends a heartbeat for every row every interval until ctx ends, each saying in which server session the
// row listens on its own channel now (if any), so the schema wakes a row alone only while its LISTEN is in effect
// and its session exists. A change of that state is written at once (one heartbeat of the rows that changed), not
// at the next interval: a row whose listener connection was lost stops being chosen as soon as the listener
// notices, and one that listens again, in a new session, is chosen again as soon as its LISTEN succeeded. A row
// missing from pgflow.workers is registered again (as functionName); onDeprecated is called (once) when the
// database deprecates a row.
func Heartbeat(ctx context.Context, db DB, rows []Row, functionName string, interval time.Duration, log *slog.Logger,
	onDeprecated func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	h := &heartbeats{db: db, rows: rows, functionName: functionName, log: log, onDeprecated: onDeprecated,
		said: make([]*uint32, len(rows))}
	// One watcher per listening row turns its state changes into kicks (coalesced: a pass reads every row's state
	// when it runs). Each watcher takes the channel of the next change before it kicks, so a change that happens
	// while a pass runs kicks again.
	kick := make(chan struct{}, 1)
	var watchers sync.WaitGroup
	defer watchers.Wait()
	for _, r := range rows {
		_, changed := r.listenerPID()
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
				_, changed = r.listenerPID()
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
	said         []*uint32 // per row, the listener pid its last successful heartbeat wrote (0: none; nil: no heartbeat yet)
}

// beat sends a heartbeat for every row, or with changedOnly for the rows whose listening session differs from what
// their last heartbeat said.
func (h *heartbeats) beat(ctx context.Context, changedOnly bool) {
	for i, r := range h.rows {
		pid, _ := r.listenerPID()
		if changedOnly && h.said[i] != nil && *h.said[i] == pid {
			continue
		}
		dep, err := sqlapi.HeartbeatWorker(ctx, h.db, r.WorkerID, pid)
		if errors.Is(err, sqlapi.ErrWorkerNotRegistered) {
			h.log.Warn("worker row missing from pgflow.workers; registering again", "worker_id", r.WorkerID, "queue", r.Queue)
			if err := sqlapi.RegisterWorker(ctx, h.db, r.WorkerID, r.Queue, h.functionName); err != nil {
				if ctx.Err() == nil {
					h.log.Warn("registering the worker again failed", "worker_id", r.WorkerID, "error", err)
				}
				continue
			}
			// A new registration does not listen: say at once whether this row does.
			dep, err = sqlapi.HeartbeatWorker(ctx, h.db, r.WorkerID, pid)
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
		if h.said[i] == nil || *h.said[i] != pid {
			h.log.Debug("heartbeat: recorded whether the worker listens on its own channel", "worker_id", r.WorkerID,
				"listener_pid", pid)
		}
		h.said[i] = &pid
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
