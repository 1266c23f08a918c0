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

// Message is a PGMQ message as far as the worker needs it.
type Message struct {
	ID        int64
	ReadCount int
}

// ReadParams says what to read of a queue.
type ReadParams struct {
	Queue             string
	VisibilitySeconds int // how long read messages stay hidden from other readers
	Qty               int // at most this many messages
	// MaxPollSeconds and PollIntervalMs: how long ReadWithPoll waits for a message, and how often it looks.
	MaxPollSeconds, PollIntervalMs int
}

// ReadWithPoll calls pgmq.read_with_poll: it reads up to p.Qty messages of p.Queue, hiding them for
// p.VisibilitySeconds, and waits up to p.MaxPollSeconds (checking every p.PollIntervalMs) when none is visible.
func ReadWithPoll(ctx context.Context, db DBTX, p ReadParams) ([]Message, error) {
	queue, vt, qty, maxPollSeconds, pollIntervalMs := p.Queue, p.VisibilitySeconds, p.Qty, p.MaxPollSeconds, p.PollIntervalMs
	rows, err := db.Query(ctx,
		`select m.msg_id, m.read_ct
		   from pgmq.read_with_poll(queue_name => $1::text, vt => $2::integer, qty => $3::integer,
		                            max_poll_seconds => $4::integer, poll_interval_ms => $5::integer) as m`,
		queue, vt, qty, maxPollSeconds, pollIntervalMs)
	if err != nil {
		return nil, fmt.Errorf("pgmq.read_with_poll(queue %q): %w", queue, err)
	}
	msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Message, error) {
		var m Message
		err := r.Scan(&m.ID, &m.ReadCount)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgmq.read_with_poll(queue %q): %w", queue, err)
	}
	return msgs, nil
}

// Read calls pgmq.read: it reads up to p.Qty visible messages of p.Queue, hiding them for p.VisibilitySeconds, and
// never waits (the poll fields are not used).
func Read(ctx context.Context, db DBTX, p ReadParams) ([]Message, error) {
	queue, vt, qty := p.Queue, p.VisibilitySeconds, p.Qty
	rows, err := db.Query(ctx,
		`select m.msg_id, m.read_ct from pgmq.read(queue_name => $1::text, vt => $2::integer, qty => $3::integer) as m`,
		queue, vt, qty)
	if err != nil {
		return nil, fmt.Errorf("pgmq.read(queue %q): %w", queue, err)
	}
	msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Message, error) {
		var m Message
		err := r.Scan(&m.ID, &m.ReadCount)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgmq.read(queue %q): %w", queue, err)
	}
	return msgs, nil
}

// MakeVisible makes messages of queue that were read but will not be claimed visible again now
// (pgflow.set_vt_batch with an offset of 0), so that any reader takes them without waiting for their visibility
// timeout. Messages that no longer exist are skipped.
func MakeVisible(ctx context.Context, db DBTX, queue string, msgIDs []int64) error {
	if len(msgIDs) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx,
		`select from pgflow.set_vt_batch(queue_name => $1::text, msg_ids => $2::bigint[],
		                                 vt_offsets => pg_catalog.array_fill(0, array[pg_catalog.cardinality($2::bigint[])]))`,
		queue, msgIDs); err != nil {
		return fmt.Errorf("pgflow.set_vt_batch(queue %q, %d messages, visible now): %w", queue, len(msgIDs), err)
	}
	return nil
}

// QueueChannel is the notification channel on which the schema (v0.18.0 and later) announces new visible
// messages of a queue: pgflow.start_ready_steps notifies it once per transaction that sent undelayed messages.
func QueueChannel(queue string) string { return "pgflow:queue:" + queue }

// WorkerChannel is the channel of one worker row (schema v0.20.0 and later): pgflow._wake_queue tells one alive
// worker of a queue on it, instead of every listener on QueueChannel, that messages are visible now. Its payloads
// mean what they mean on QueueChannel.
func WorkerChannel(workerID string) string { return "pgflow:w:" + workerID }

// WakeQueue sends the read-now notification (an empty payload) on the queue's channel, waking every worker listening there: a
// worker that was woken alone and cannot take everything passes the wake on with it.
func WakeQueue(ctx context.Context, db DBTX, queue string) error {
	if _, err := db.Exec(ctx, `select pg_catalog.pg_notify($1, '')`, QueueChannel(queue)); err != nil {
		return fmt.Errorf("notify the workers of queue %q: %w", queue, err)
	}
	return nil
}
