// Package maintenance keeps a worker's rows alive and the database's stalled tasks moving: heartbeats for every
// worker row of a process (one per queue it serves), registering a row again when it went missing, shutdown on
// deprecation, and pgflow.requeue_stalled_tasks under an advisory lock so that one worker of a database runs it at
// a time. It knows package sqlapi only.
package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// Row is one worker row: a worker id and the queue it serves.
type Row struct {
	WorkerID string
	Queue    string
}

// DB is what maintenance needs: queries and transactions (a *pgxpool.Pool).
type DB interface {
	sqlapi.DBTX
	sqlapi.TxBeginner
}

// Heartbeat sends a heartbeat for every row every interval until ctx ends. A row missing from pgflow.workers is
// registered again (as functionName); onDeprecated is called (once) when the database deprecates a row.
func Heartbeat(ctx context.Context, db DB, rows []Row, functionName string, interval time.Duration, log *slog.Logger,
	onDeprecated func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	deprecated := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, r := range rows {
			dep, err := sqlapi.HeartbeatWorker(ctx, db, r.WorkerID)
			switch {
			case errors.Is(err, sqlapi.ErrWorkerNotRegistered):
				log.Warn("worker row missing from pgflow.workers; registering again", "worker_id", r.WorkerID, "queue", r.Queue)
				if err := sqlapi.RegisterWorker(ctx, db, r.WorkerID, r.Queue, functionName); err != nil && ctx.Err() == nil {
					log.Warn("registering the worker again failed", "worker_id", r.WorkerID, "error", err)
				}
			case err != nil:
				if ctx.Err() == nil {
					log.Warn("heartbeat failed", "worker_id", r.WorkerID, "error", err)
				}
			case dep && !deprecated:
				deprecated = true
				log.Info("worker deprecated: finishing in-flight tasks and stopping", "worker_id", r.WorkerID, "queue", r.Queue)
				onDeprecated()
			}
		}
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
