package sqlapi

// Reads of pgflow.workers for the CLI, the dashboard and the metrics adapter: the registered workers with the age
// of their last heartbeat and the tasks they are running. They change nothing.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	HeartbeatAge    time.Duration // database now() - last_heartbeat_at
	RunningTasks    int64         // its step_tasks with status 'started'
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

const listWorkersSQL = `
select w.worker_id::text, w.queue_name, w.function_name, w.started_at, w.last_heartbeat_at, w.deprecated_at,
  w.stopped_at, greatest(extract(epoch from (now() - w.last_heartbeat_at)), 0)::float8,
  (select count(*) from pgflow.step_tasks as t where t.last_worker_id = w.worker_id and t.status = 'started')
from pgflow.workers as w
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
			&w.DeprecatedAt, &w.StoppedAt, &age, &w.RunningTasks)
		w.HeartbeatAge = time.Duration(age * float64(time.Second))
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the workers: %w", err)
	}
	return out, nil
}
