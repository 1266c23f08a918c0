package sqlapi

// Reads of pgflow.workers for the CLI, the dashboard and the metrics adapter: the registered workers with the age
// of their last heartbeat and the tasks they are running. They change nothing.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgflow-go/pgflow/internal/pgerr"
)

// WorkerRow is one pgflow.workers row, with the age of its last heartbeat measured by the database clock and the
// number of tasks it is running.
type WorkerRow struct {
	WorkerID        string
	QueueName       string
	FunctionName    string
	StartedAt       time.Time
	LastHeartbeatAt time.Time
	DeprecatedAt    *time.Time
	StoppedAt       *time.Time
	// ListensAt is since when the worker has listened on its own channel (schema v0.20.0), nil when it does not:
	// only such workers are woken alone by the schema.
	ListensAt *time.Time
	// ListenerPID is the server process id of the session it listens in (schema v0.20.0), 0 when it does not.
	ListenerPID  uint32
	HeartbeatAge time.Duration // database now() - last_heartbeat_at
	RunningTasks int64         // its step_tasks with status 'started' (counted through the runs in progress)
}

// Status classifies the worker: "stopped" (shut down and said so), "stopping" (deprecated, finishing its tasks),
// "alive" (a heartbeat within staleAfter) or "unresponsive" (silent for longer: crashed or cut off).
func (w WorkerRow) Status(staleAfter time.Duration) string {
	switch {
	case w.StoppedAt != nil:
		return "stopped"
	case w.DeprecatedAt != nil:
		return "stopping"
	case w.HeartbeatAge <= staleAfter:
		return "alive"
	default:
		return "unresponsive"
	}
}

// listWorkersSQL counts each worker's running tasks through the started runs (idx_runs_status), their started
// step states and their tasks (primary keys): step_tasks has no index on status or last_worker_id, so that a
// task's claim and completion stay heap-only updates (schema v0.20.0). A started task always belongs to a started
// step state of a started run. The count costs the runs in progress, not the history (about 50 ms with 100,000
// runs queued): once per call (MATERIALIZED, joined), not once per worker.
const listWorkersSQL = `
with running as materialized (
  select t.last_worker_id as worker_id, count(*) as n
    from pgflow.runs as r
    join pgflow.step_states as ss on ss.run_id = r.run_id
    join pgflow.step_tasks as t on t.run_id = ss.run_id and t.step_slug = ss.step_slug
   where r.status = 'started' and ss.status = 'started' and t.status = 'started'
     and ($2::uuid is null or t.last_worker_id = $2::uuid)
   group by t.last_worker_id)
select w.worker_id::text, w.queue_name, w.function_name, w.started_at, w.last_heartbeat_at, w.deprecated_at,
  w.stopped_at, w.listens_at, coalesce(w.listener_pid, 0), greatest(extract(epoch from (now() - w.last_heartbeat_at)), 0)::float8,
  coalesce(running.n, 0)
from pgflow.workers as w
left join running on running.worker_id = w.worker_id
where ($1::float8 is null or w.last_heartbeat_at >= now() - make_interval(secs => $1::float8))
  and ($2::uuid is null or w.worker_id = $2::uuid)
order by (w.stopped_at is null) desc, w.last_heartbeat_at desc, w.worker_id`

// ListWorkers returns the workers whose last heartbeat is at most since old (since <= 0: all of them), live ones
// first, then by the most recent heartbeat.
func ListWorkers(ctx context.Context, db DBTX, since time.Duration) ([]WorkerRow, error) {
	var secs any
	if since > 0 {
		secs = since.Seconds()
	}
	return listWorkers(ctx, db, secs, nil)
}

// GetWorker returns the worker with the given id, or nil when there is none.
func GetWorker(ctx context.Context, db DBTX, workerID string) (*WorkerRow, error) {
	ws, err := listWorkers(ctx, db, nil, workerID)
	if err != nil || len(ws) == 0 {
		return nil, err
	}
	return &ws[0], nil
}

func listWorkers(ctx context.Context, db DBTX, secs, id any) ([]WorkerRow, error) {
	rows, err := db.Query(ctx, listWorkersSQL, secs, id)
	if err != nil {
		return nil, fmt.Errorf("read the workers: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (WorkerRow, error) {
		var w WorkerRow
		var age float64
		err := row.Scan(&w.WorkerID, &w.QueueName, &w.FunctionName, &w.StartedAt, &w.LastHeartbeatAt,
			&w.DeprecatedAt, &w.StoppedAt, &w.ListensAt, &w.ListenerPID, &age, &w.RunningTasks)
		w.HeartbeatAge = time.Duration(age * float64(time.Second))
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the workers: %w", err)
	}
	return out, nil
}

// ErrWorkerNotRegistered is wrapped by HeartbeatWorker when the database has no row for the worker id
// (SQLSTATE P0002 raised by pgflow.heartbeat_worker): the worker should register again.
var ErrWorkerNotRegistered = errors.New("worker is not registered")

// RegisterWorker calls pgflow.register_worker(worker_id, queue_name, function_name): the worker row exists and
// is live afterwards.
func RegisterWorker(ctx context.Context, db DBTX, workerID, queueName, functionName string) error {
	_, err := db.Exec(ctx,
		`select from pgflow.register_worker(worker_id => $1::uuid, queue_name => $2::text, function_name => $3::text)`,
		workerID, queueName, functionName)
	if err != nil {
		return fmt.Errorf("pgflow.register_worker(worker %s, queue %q): %w", workerID, queueName, err)
	}
	return nil
}

// HeartbeatWorker calls pgflow.heartbeat_worker(worker_id, listener_pid) and returns true when the worker has been
// deprecated. listenerPID is the server process id of the session whose LISTEN on the worker's own channel
// (WorkerChannel) is in effect now, 0 when there is none (NULL to the schema): pgflow._wake_queue wakes only
// listening workers alone, and the heartbeats of the queue's other workers forget the session once it has ended
// (schema v0.20.0). An unregistered worker yields an error wrapping
// ErrWorkerNotRegistered.
func HeartbeatWorker(ctx context.Context, db DBTX, workerID string, listenerPID uint32) (deprecated bool, err error) {
	err = db.QueryRow(ctx,
		`select pgflow.heartbeat_worker(worker_id => $1::uuid, listener_pid => nullif($2::integer, 0))`,
		workerID, int64(listenerPID)).Scan(&deprecated)
	if err != nil {
		if pgerr.Code(err) == "P0002" { // no_data_found, raised by heartbeat_worker
			return false, fmt.Errorf("pgflow.heartbeat_worker(worker %s, listener pid %d): %w: %w", workerID, listenerPID,
				ErrWorkerNotRegistered, err)
		}
		return false, fmt.Errorf("pgflow.heartbeat_worker(worker %s, listener pid %d): %w", workerID, listenerPID, err)
	}
	return deprecated, nil
}

// MarkWorkerStopped calls pgflow.mark_worker_stopped(worker_id).
func MarkWorkerStopped(ctx context.Context, db DBTX, workerID string) error {
	if _, err := db.Exec(ctx, `select pgflow.mark_worker_stopped(worker_id => $1::uuid)`, workerID); err != nil {
		return fmt.Errorf("pgflow.mark_worker_stopped(worker %s): %w", workerID, err)
	}
	return nil
}

// MaintenanceLockKey is the transaction-level advisory lock (single bigint form) that serialises stalled-task
// maintenance across the workers of one database: "pgflow" in ASCII. The two-integer lock space used by
// pgflow.ensure_flow_compiled is separate.
const MaintenanceLockKey int64 = 0x7067666c6f77

// RequeueStalledTasks runs pgflow.requeue_stalled_tasks() in a transaction that first takes the maintenance
// advisory lock with pg_try_advisory_xact_lock. When another session holds the lock it does nothing and
// returns ran = false; otherwise it returns the number of tasks requeued.
func RequeueStalledTasks(ctx context.Context, db TxBeginner) (ran bool, requeued int, err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, 0, fmt.Errorf("requeue stalled tasks: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var locked bool
	if err := tx.QueryRow(ctx, `select pg_try_advisory_xact_lock($1::bigint)`, MaintenanceLockKey).Scan(&locked); err != nil {
		return false, 0, fmt.Errorf("requeue stalled tasks: advisory lock %d: %w", MaintenanceLockKey, err)
	}
	if !locked {
		return false, 0, nil
	}
	if err := tx.QueryRow(ctx, `select pgflow.requeue_stalled_tasks()`).Scan(&requeued); err != nil {
		return false, 0, fmt.Errorf("pgflow.requeue_stalled_tasks(): %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, 0, fmt.Errorf("requeue stalled tasks: commit: %w", err)
	}
	return true, requeued, nil
}
