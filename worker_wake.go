package pgflow

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow/internal/notify"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// listenPollInterval bounds how long a listening worker waits for a notification before it reads its queue
// anyway: messages that become visible without one (delayed starts, retries after their backoff, messages of
// crashed workers after their visibility timeout) are found within this time. With heartbeats every 5 s, an
// idle worker sends less than one statement per second.
const listenPollInterval = 2 * time.Second

// queueWaker wakes the poll loop when the schema announces new messages on the worker's queue
// (pg_notify('pgflow:queue:<queue>') by pgflow.start_ready_steps, schema v0.18.0). It listens on a dedicated
// connection (LISTEN needs a session) that reconnects by itself; while it is not listening, the worker polls with
// pgmq.read_with_poll as before.
type queueWaker struct {
	l   *notify.Listener
	sub *notify.Subscription
}

func newQueueWaker(pool *pgxpool.Pool, queue string, log *slog.Logger) (*queueWaker, error) {
	cfg := pool.Config().ConnConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "pgflow-worker-listener"
	}
	l := notify.New(notify.Config{
		Connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cfg) },
		Logger:  log,
	})
	sub, err := l.Subscribe(sqlapi.QueueChannel(queue))
	if err != nil {
		l.Close()
		return nil, err
	}
	return &queueWaker{l: l, sub: sub}, nil
}

// listening reports whether notifications reach the worker now.
func (q *queueWaker) listening() bool {
	select {
	case <-q.sub.Active():
		return q.l.BackendPID() != 0
	default:
		return false
	}
}

// clear forgets the notifications received so far (the read that follows sees their messages).
func (q *queueWaker) clear() {
	select {
	case <-q.sub.Ready():
		q.sub.Drain()
	default:
	}
}

func (q *queueWaker) close() { q.l.Close() }

// poll reads up to n messages and claims their tasks with start_tasks; it returns how many messages it read. A
// listening worker reads with pgmq.read, which never waits, and when the queue has nothing visible it waits for
// a notification (or listenPollInterval, or MaxPollWait if shorter) and returns nothing, so the caller polls
// again at once. Otherwise the worker waits inside pgmq.read_with_poll.
func (r *workerRun) poll(n int) (read int, tasks []claimedTask, err error) {
	q := r.waker
	if q == nil || !q.listening() {
		msgs, err := sqlapi.ReadWithPoll(r.loopCtx, r.w.pool, r.w.queue, r.cfg.vtSeconds, n, r.cfg.maxPollSeconds, r.cfg.pollIntervalMs)
		if err != nil || len(msgs) == 0 || r.loopCtx.Err() != nil {
			// After shutdown began, read messages are not claimed: they become visible again after the
			// visibility timeout and another worker takes them.
			return len(msgs), nil, err
		}
		return len(msgs), r.claim(msgs), nil
	}
	q.clear()
	msgs, err := sqlapi.Read(r.loopCtx, r.w.pool, r.w.queue, r.cfg.vtSeconds, n)
	if err != nil {
		return 0, nil, err
	}
	if len(msgs) > 0 {
		if r.loopCtx.Err() != nil {
			return len(msgs), nil, nil // shutdown began: not claimed (see above)
		}
		return len(msgs), r.claim(msgs), nil
	}
	t := time.NewTimer(min(listenPollInterval, r.cfg.MaxPollWait))
	defer t.Stop()
	select {
	case <-q.sub.Ready():
		q.sub.Drain()
	case <-t.C:
	case <-r.loopCtx.Done():
	}
	return 0, nil, nil
}
