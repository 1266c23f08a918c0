// Package claimer claims the tasks behind messages read from a queue (pgflow.start_tasks, by the stored queue
// identity, or pgflow.read_and_start_tasks, which reads and claims in one call) and explains, by identity only,
// the messages it could not claim. It knows the executor's Task (what it produces) and package sqlapi, nothing
// above.
package claimer

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-go/pgflow/internal/backoff"
	"github.com/pgflow-go/pgflow/internal/executor"
	"github.com/pgflow-go/pgflow/internal/pgerr"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// Config configures a Claimer of one flow's queue.
type Config struct {
	DB       sqlapi.Batcher
	Read     sqlapi.DBTX // reads and claims in one call (ReadAndClaim); explains unclaimed messages
	Flow     string
	Queue    string
	WorkerID string // the worker row serving Queue
	Logger   *slog.Logger
	Retry    backoff.Policy
	// Lane, when not nil, carries ReadAndClaim's call in the worker's next completion call (completer.Ride).
	Lane Lane
}

// Lane sends statements in a call of the worker's completer, after the results waiting then
// (completer.Completer.Ride): in their transaction, or in one of its own once map results have committed.
type Lane interface {
	Ride(queue func(b *pgx.Batch)) error
}

// Claimer claims tasks for one flow's queue.
type Claimer struct{ cfg Config }

// New returns a Claimer.
func New(cfg Config) *Claimer { return &Claimer{cfg: cfg} }

// Claim starts the tasks of msgIDs, retrying transient errors until stop ends. The call itself runs under calls,
// which a shutdown does not cancel: once start_tasks has committed, its rows must reach handlers, so the call may
// not be interrupted half way. Messages whose task cannot be claimed are left untouched and explained in the log.
func (c *Claimer) Claim(stop, calls context.Context, msgIDs []int64) []executor.Task {
	if len(msgIDs) == 0 {
		return nil
	}
	var claimed []sqlapi.ClaimedTask
	var claimedAt time.Time
	err := pgerr.Retry(stop, c.cfg.Retry, func(n int, delay time.Duration, err error) {
		c.cfg.Logger.Warn("claiming tasks failed, retrying", "retry", n, "delay", delay, "messages", len(msgIDs), "error", err)
	}, func(context.Context) (err error) {
		if stop.Err() != nil {
			return stop.Err()
		}
		claimedAt = time.Now()
		claimed, err = sqlapi.StartTasks(calls, c.cfg.DB, c.cfg.Flow, c.cfg.Queue, msgIDs, c.cfg.WorkerID)
		return err
	})
	if err != nil {
		if stop.Err() == nil {
			c.cfg.Logger.Warn("claiming tasks failed; the messages reappear after their visibility timeout",
				"messages", len(msgIDs), "error", err)
		}
		return nil
	}
	if len(claimed) < len(msgIDs) {
		c.explainUnclaimed(calls, msgIDs, claimed)
	}
	out := make([]executor.Task, len(claimed))
	for i, t := range claimed {
		out[i] = executor.Task{ClaimedTask: t, QueueName: c.cfg.Queue, WorkerID: c.cfg.WorkerID, ClaimedAt: claimedAt}
	}
	return out
}

// ReadAndClaim reads up to n messages and claims their tasks in one call (pgflow.read_and_start_tasks, one
// transaction): no message is read without its claim committing with it, so unlike Claim there is nothing to
// retry here; an error goes back to the poller, which backs off and reads again. Messages read but not claimed
// are hidden for vtSeconds and explained in the log. It runs under calls (see Claim), once stop has not ended.
// With ride and a Lane the call rides with the worker's next completion call (in its transaction, or right after
// it commits when it records map tasks); when the claim did not commit there, it is made again alone at once. The poller rides when its last read was full: with work queued,
// calls that claim and complete together cost the database less per task (one busy connection per worker where
// there were two; docs/performance-rounds.md, twenty-first round); below that, a claim that waited for the
// worker's completion call in flight would make every run wait longer.
func (c *Claimer) ReadAndClaim(stop, calls context.Context, n, vtSeconds int, ride bool) (read int, tasks []executor.Task, err error) {
	if err := stop.Err(); err != nil {
		return 0, nil, err
	}
	claimedAt := time.Now()
	var r sqlapi.ReadAndStart
	rode := false
	if ride && c.cfg.Lane != nil {
		rode = c.cfg.Lane.Ride(func(b *pgx.Batch) {
			sqlapi.QueueReadAndStartTasks(b, c.cfg.Flow, c.cfg.Queue, c.cfg.WorkerID, n, vtSeconds, &r)
		}) == nil
	}
	if !rode {
		// Alone: not riding, once the completer has stopped or stalled, or when the claim failed in the shared
		// call (it did not commit; a result the database refused must not cost the claim a retry delay).
		r = sqlapi.ReadAndStart{}
		r.Claimed, r.Unclaimed, r.Read, err = sqlapi.ReadAndStartTasks(calls, c.cfg.Read, c.cfg.Flow, c.cfg.Queue,
			c.cfg.WorkerID, n, vtSeconds)
		if err != nil {
			return 0, nil, err
		}
	}
	if len(r.Unclaimed) > 0 {
		c.explain(calls, r.Unclaimed)
	}
	out := make([]executor.Task, len(r.Claimed))
	for i, t := range r.Claimed {
		out[i] = executor.Task{ClaimedTask: t, QueueName: c.cfg.Queue, WorkerID: c.cfg.WorkerID, ClaimedAt: claimedAt}
	}
	return r.Read, out, nil
}

// explainUnclaimed logs why messages of a batch were not claimed. A message with no matching task, or whose
// task belongs to another flow, is left exactly as it is (in the queue, not archived, its visibility untouched)
// and reported at warn level with its identifiers, never its body: it will reappear after its visibility timeout
// until an operator handles it (docs/queues.md). Started and finished tasks are routine redeliveries (debug).
func (c *Claimer) explainUnclaimed(ctx context.Context, ids []int64, claimed []sqlapi.ClaimedTask) {
	got := make(map[int64]bool, len(claimed))
	for _, t := range claimed {
		got[t.MsgID] = true
	}
	var missing []int64
	for _, id := range ids {
		if !got[id] {
			missing = append(missing, id)
		}
	}
	c.explain(ctx, missing)
}

// explain logs why each of missing, messages read but not claimed, was not claimed.
func (c *Claimer) explain(ctx context.Context, missing []int64) {
	why, err := sqlapi.ClassifyUnclaimed(ctx, c.cfg.Read, c.cfg.Flow, c.cfg.Queue, missing)
	if err != nil {
		c.cfg.Logger.Warn("some messages were not claimed; could not tell why", "count", len(missing), "error", err)
		return
	}
	for _, u := range why {
		id := strconv.FormatInt(u.MsgID, 10)
		switch u.Reason {
		case sqlapi.UnclaimedNoTask:
			c.cfg.Logger.Warn("message has no matching task; left in the queue untouched (it reappears after its visibility timeout until an operator archives or deletes it)",
				"msg_id", id)
		case sqlapi.UnclaimedOtherFlow:
			c.cfg.Logger.Warn("message belongs to a task of another flow; skipped and left untouched",
				"msg_id", id, "task_flow", u.OwnerFlow)
		default:
			c.cfg.Logger.Debug("message not claimed: its task is not waiting to run", "msg_id", id, "reason", u.Reason)
		}
	}
}
