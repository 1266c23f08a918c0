package sqlapi

// Reads of PGMQ queue depth through pgmq.list_queues and pgmq.metrics, for the CLI, the dashboard and the
// metrics adapter. They change nothing.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// QueueMetrics is what pgmq.metrics reports about one queue, or why it could not be read.
type QueueMetrics struct {
	Name         string
	Length       int64 // messages in the queue, visible or not
	Visible      int64 // messages a reader could take now
	Total        int64 // messages ever sent
	OldestAgeSec *int  // age of the oldest message, nil when the queue is empty
	Err          error // ListQueueMetrics only: pgmq.metrics failed for this queue (the other fields are zero)
}

const queueMetricsSQL = `
select m.queue_length, m.queue_visible_length, m.total_messages, m.oldest_msg_age_sec
from pgmq.metrics(queue_name => $1::text) as m`

// GetQueueMetrics reads the metrics of one PGMQ queue. A queue that does not exist is an error (SQLSTATE 42P01)
// that names the queue.
func GetQueueMetrics(ctx context.Context, db DBTX, queue string) (QueueMetrics, error) {
	q := QueueMetrics{Name: queue}
	if err := db.QueryRow(ctx, queueMetricsSQL, queue).Scan(&q.Length, &q.Visible, &q.Total, &q.OldestAgeSec); err != nil {
		return QueueMetrics{Name: queue}, fmt.Errorf("read the metrics of queue %q: %w", queue, err)
	}
	return q, nil
}

// ListQueueMetrics reads the metrics of every queue pgmq.list_queues names, keyed by queue name. A queue whose
// metrics cannot be read gets an entry with Err set instead of failing the whole read; only the end of ctx stops
// it.
func ListQueueMetrics(ctx context.Context, db DBTX) (map[string]QueueMetrics, error) {
	rows, err := db.Query(ctx, `select q.queue_name from pgmq.list_queues() as q order by q.queue_name`)
	if err != nil {
		return nil, fmt.Errorf("list the queues: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the queues: %w", err)
	}
	out := make(map[string]QueueMetrics, len(names))
	for _, name := range names {
		q, err := GetQueueMetrics(ctx, db, name)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			q.Err = err
		}
		out[name] = q
	}
	return out, nil
}
