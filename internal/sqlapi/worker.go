package sqlapi

// SQL sent by the flow worker: startup (ensure_flow_compiled, register_worker), polling (pgmq.read_with_poll,
// start_tasks), reporting (complete_task, fail_task), liveness (heartbeat_worker, mark_worker_stopped), the lazy
// flow input and the stalled-task maintenance.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Batcher sends several statements in one round trip; *pgxpool.Pool and *pgx.Conn implement it. The statements
// of one batch run in one implicit transaction.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// TxBeginner starts transactions; *pgxpool.Pool and *pgx.Conn implement it.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ErrWorkerNotRegistered is wrapped by HeartbeatWorker when the database has no row for the worker id
// (SQLSTATE P0002 raised by pgflow.heartbeat_worker): the worker should register again.
var ErrWorkerNotRegistered = errors.New("worker is not registered")

// CompileResult is the result of pgflow.ensure_flow_compiled.
type CompileResult struct {
	Status      string   `json:"status"` // compiled | verified | recompiled | mismatch
	Differences []string `json:"differences"`
}

// EnsureFlowCompiled calls pgflow.ensure_flow_compiled(flow_slug, shape, allow_data_loss).
func EnsureFlowCompiled(ctx context.Context, db DBTX, flowSlug string, shape json.RawMessage, allowDataLoss bool) (CompileResult, error) {
	var raw []byte
	err := db.QueryRow(ctx,
		`select pgflow.ensure_flow_compiled(flow_slug => $1::text, shape => $2::jsonb, allow_data_loss => $3::boolean)`,
		flowSlug, string(shape), allowDataLoss).Scan(&raw)
	if err != nil {
		return CompileResult{}, fmt.Errorf("sqlapi: pgflow.ensure_flow_compiled(flow %q): %w", flowSlug, err)
	}
	var res CompileResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return CompileResult{}, fmt.Errorf("sqlapi: pgflow.ensure_flow_compiled(flow %q) returned %s: %w", flowSlug, raw, err)
	}
	return res, nil
}

// RegisterWorker calls pgflow.register_worker(worker_id, queue_name, function_name): the worker row exists and
// is live afterwards.
func RegisterWorker(ctx context.Context, db DBTX, workerID, queueName, functionName string) error {
	_, err := db.Exec(ctx,
		`select from pgflow.register_worker(worker_id => $1::uuid, queue_name => $2::text, function_name => $3::text)`,
		workerID, queueName, functionName)
	if err != nil {
		return fmt.Errorf("sqlapi: pgflow.register_worker(worker %s, queue %q): %w", workerID, queueName, err)
	}
	return nil
}

// HeartbeatWorker calls pgflow.heartbeat_worker(worker_id) and returns true when the worker has been deprecated.
// An unregistered worker yields an error wrapping ErrWorkerNotRegistered.
func HeartbeatWorker(ctx context.Context, db DBTX, workerID string) (deprecated bool, err error) {
	err = db.QueryRow(ctx, `select pgflow.heartbeat_worker(worker_id => $1::uuid)`, workerID).Scan(&deprecated)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "P0002" {
			return false, fmt.Errorf("sqlapi: pgflow.heartbeat_worker(worker %s): %w: %w", workerID, ErrWorkerNotRegistered, err)
		}
		return false, fmt.Errorf("sqlapi: pgflow.heartbeat_worker(worker %s): %w", workerID, err)
	}
	return deprecated, nil
}

// MarkWorkerStopped calls pgflow.mark_worker_stopped(worker_id).
func MarkWorkerStopped(ctx context.Context, db DBTX, workerID string) error {
	if _, err := db.Exec(ctx, `select pgflow.mark_worker_stopped(worker_id => $1::uuid)`, workerID); err != nil {
		return fmt.Errorf("sqlapi: pgflow.mark_worker_stopped(worker %s): %w", workerID, err)
	}
	return nil
}

// Message is a PGMQ message as far as the worker needs it.
type Message struct {
	ID        int64
	ReadCount int
}

// ReadWithPoll calls pgmq.read_with_poll: it reads up to qty messages of queue, hiding them for vt seconds, and
// waits up to maxPollSeconds (checking every pollIntervalMs) when none is visible.
func ReadWithPoll(ctx context.Context, db DBTX, queue string, vt, qty, maxPollSeconds, pollIntervalMs int) ([]Message, error) {
	rows, err := db.Query(ctx,
		`select m.msg_id, m.read_ct
		   from pgmq.read_with_poll(queue_name => $1::text, vt => $2::integer, qty => $3::integer,
		                            max_poll_seconds => $4::integer, poll_interval_ms => $5::integer) as m`,
		queue, vt, qty, maxPollSeconds, pollIntervalMs)
	if err != nil {
		return nil, fmt.Errorf("sqlapi: pgmq.read_with_poll(queue %q): %w", queue, err)
	}
	msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Message, error) {
		var m Message
		err := r.Scan(&m.ID, &m.ReadCount)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlapi: pgmq.read_with_poll(queue %q): %w", queue, err)
	}
	return msgs, nil
}

// Read calls pgmq.read: it reads up to qty visible messages of queue, hiding them for vt seconds, and never waits.
func Read(ctx context.Context, db DBTX, queue string, vt, qty int) ([]Message, error) {
	rows, err := db.Query(ctx,
		`select m.msg_id, m.read_ct from pgmq.read(queue_name => $1::text, vt => $2::integer, qty => $3::integer) as m`,
		queue, vt, qty)
	if err != nil {
		return nil, fmt.Errorf("sqlapi: pgmq.read(queue %q): %w", queue, err)
	}
	msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Message, error) {
		var m Message
		err := r.Scan(&m.ID, &m.ReadCount)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlapi: pgmq.read(queue %q): %w", queue, err)
	}
	return msgs, nil
}

// QueueChannel is the notification channel on which the schema (v0.18.0 and later) announces new visible
// messages of a queue: pgflow.start_ready_steps notifies it once per transaction that sent undelayed messages.
func QueueChannel(queue string) string { return "pgflow:queue:" + queue }

// HasAttemptFencing reports whether the schema fences results by attempt and can release tasks (v0.20.0):
// pgflow.complete_tasks and pgflow.fail_task take the attempt, fail_task can fail permanently, and
// pgflow.release_tasks exists.
func HasAttemptFencing(ctx context.Context, db DBTX) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `select to_regprocedure('pgflow.release_tasks(uuid[], text[], integer[], integer[])') is not null
	                            and to_regprocedure('pgflow.fail_task(uuid, text, integer, text, integer, boolean)') is not null`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("sqlapi: look for pgflow.release_tasks: %w", err)
	}
	return ok, nil
}

// HasWorkerBatching reports whether the schema offers what a v0.18.0 worker uses to batch and to wake up:
// pgflow.complete_tasks and queue notifications (both came with v0.18.0).
func HasWorkerBatching(ctx context.Context, db DBTX) (bool, error) {
	var ok bool
	// v0.20.0 added a fifth argument (attempts): either signature will do.
	err := db.QueryRow(ctx, `select to_regprocedure('pgflow.complete_tasks(uuid[], text[], integer[], jsonb[])') is not null
	                             or to_regprocedure('pgflow.complete_tasks(uuid[], text[], integer[], jsonb[], integer[])') is not null`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("sqlapi: look for pgflow.complete_tasks: %w", err)
	}
	return ok, nil
}

// ClaimedTask is one row returned by pgflow.start_tasks (a pgflow.step_task_record) together with what the
// record lacks and the worker needs: the task's attempts_count after the claim and the effective step options.
type ClaimedTask struct {
	FlowSlug  string
	RunID     string // canonical UUID text
	StepSlug  string
	Input     json.RawMessage
	MsgID     int64
	TaskIndex int
	FlowInput json.RawMessage // nil when SQL NULL
	// Attempt is attempts_count after the claim: 1 on the first attempt. It is the fencing token of the
	// attempt's results (pgflow.complete_tasks / fail_task / release_tasks attempt arguments).
	Attempt int
	// TimeoutSeconds is the effective step timeout: steps.opt_timeout, else flows.opt_timeout (the timeout
	// start_tasks used for the message's visibility).
	TimeoutSeconds int
	// MaxAttempts is the effective steps.opt_max_attempts, else flows.opt_max_attempts.
	MaxAttempts int
}

// StartTasks claims the tasks behind msgIDs of the flow's default queue: the three-argument call a v0.16.0
// worker makes. See StartTasksFromQueue.
func StartTasks(ctx context.Context, db Batcher, flowSlug string, msgIDs []int64, workerID string) ([]ClaimedTask, error) {
	return StartTasksFromQueue(ctx, db, flowSlug, "", msgIDs, workerID)
}

// StartTasksFromQueue claims the tasks behind msgIDs, read from queue, with
// pgflow.start_tasks(flow_slug, msg_ids, worker_id, queue_name) and reads, in the same round trip (one implicit
// transaction, so the second statement sees the claim), the claimed tasks' attempts_count and their steps'
// effective timeout and max attempts, which pgflow.step_task_record does not carry. An empty queue passes NULL:
// the flow's default queue. Only tasks start_tasks returned are returned, ordered by message id.
func StartTasksFromQueue(ctx context.Context, db Batcher, flowSlug, queue string, msgIDs []int64, workerID string) ([]ClaimedTask, error) {
	if len(msgIDs) == 0 {
		return nil, nil
	}
	var queueArg *string
	if queue != "" {
		queueArg = &queue
	}
	var b pgx.Batch
	var tasks []ClaimedTask
	b.Queue(`select r.flow_slug, r.run_id::text, r.step_slug, r.input, r.msg_id, r.task_index, r.flow_input
	           from pgflow.start_tasks(flow_slug => $1::text, msg_ids => $2::bigint[], worker_id => $3::uuid,
	                                   queue_name => $4::text) as r`,
		flowSlug, msgIDs, workerID, queueArg).Query(func(rows pgx.Rows) error {
		var err error
		tasks, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClaimedTask, error) {
			var t ClaimedTask
			err := r.Scan(&t.FlowSlug, &t.RunID, &t.StepSlug, &t.Input, &t.MsgID, &t.TaskIndex, &t.FlowInput)
			return t, err
		})
		return err
	})
	type claimInfo struct{ attempt, timeout, maxAttempts int }
	infos := make(map[int64]claimInfo)
	b.Queue(`select t.message_id, t.attempts_count, coalesce(s.opt_timeout, f.opt_timeout),
	                coalesce(s.opt_max_attempts, f.opt_max_attempts)
	           from pgflow.step_tasks as t
	           join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
	           join pgflow.flows as f on f.flow_slug = t.flow_slug
	          where t.flow_slug = $1::text
	            and t.queue_name = lower(coalesce($4::text, pgflow._default_queue_name($1::text)))
	            and t.message_id = any ($2::bigint[])
	            and t.status = 'started'
	            and t.last_worker_id = $3::uuid`,
		flowSlug, msgIDs, workerID, queueArg).Query(func(rows pgx.Rows) error {
		var id int64
		var in claimInfo
		_, err := pgx.ForEachRow(rows, []any{&id, &in.attempt, &in.timeout, &in.maxAttempts}, func() error {
			infos[id] = in
			return nil
		})
		return err
	})
	if err := db.SendBatch(ctx, &b).Close(); err != nil {
		return nil, fmt.Errorf("sqlapi: pgflow.start_tasks(flow %q, queue %q, %d message ids, worker %s): %w",
			flowSlug, queue, len(msgIDs), workerID, err)
	}
	for i := range tasks {
		in := infos[tasks[i].MsgID]
		tasks[i].Attempt, tasks[i].TimeoutSeconds, tasks[i].MaxAttempts = in.attempt, in.timeout, in.maxAttempts
	}
	return tasks, nil
}

// FlowQueue returns the queue a worker of the flow polls: the flow's default route as the database defines it
// (pgflow._default_queue_name), so Go never rebuilds a queue name from a slug.
func FlowQueue(ctx context.Context, db DBTX, flowSlug string) (string, error) {
	var q string
	if err := db.QueryRow(ctx, `select pgflow._default_queue_name($1::text)`, flowSlug).Scan(&q); err != nil {
		return "", fmt.Errorf("sqlapi: default queue of flow %q: %w", flowSlug, err)
	}
	return q, nil
}

// Why a message read from a flow's queue was not claimed.
const (
	UnclaimedNoTask     = "no_task"     // no task of any flow has this (queue, message id)
	UnclaimedOtherFlow  = "other_flow"  // the matching task belongs to another flow
	UnclaimedStarted    = "started"     // the task already runs; completion or recovery is in charge
	UnclaimedIneligible = "ineligible"  // the task is finished, or its step or run no longer runs
	UnclaimedQueued     = "queued_race" // the task is still queued: another worker holds its row right now
)

// UnclaimedMessage says why one message id was not claimed.
type UnclaimedMessage struct {
	MsgID     int64
	Reason    string // one of the Unclaimed* constants
	OwnerFlow string // flow of the matching task, "" when there is none
}

// ClassifyUnclaimed explains, with one read-only query, why each of msgIDs (read from queue by a worker of
// flowSlug) was not claimed. It reads task identity only, never message bodies.
func ClassifyUnclaimed(ctx context.Context, db DBTX, flowSlug, queue string, msgIDs []int64) ([]UnclaimedMessage, error) {
	if len(msgIDs) == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, `
		select m.id,
		       case
		         when t.run_id is null then 'no_task'
		         when t.flow_slug <> $1::text then 'other_flow'
		         when t.status = 'started' then 'started'
		         when t.status = 'queued' and r.status = 'started' and ss.status = 'started' then 'queued_race'
		         else 'ineligible'
		       end,
		       coalesce(t.flow_slug, '')
		  from unnest($3::bigint[]) as m (id)
		  left join pgflow.step_tasks as t on t.queue_name = lower($2::text) and t.message_id = m.id
		  left join pgflow.runs as r on r.run_id = t.run_id
		  left join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
		 order by m.id`, flowSlug, queue, msgIDs)
	if err != nil {
		return nil, fmt.Errorf("sqlapi: classify %d unclaimed messages of queue %q: %w", len(msgIDs), queue, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (UnclaimedMessage, error) {
		var u UnclaimedMessage
		err := r.Scan(&u.MsgID, &u.Reason, &u.OwnerFlow)
		return u, err
	})
}

// CompleteTask calls pgflow.complete_task(run_id, step_slug, task_index, output) and returns the task's status
// afterwards ("" when the database has no such task).
func CompleteTask(ctx context.Context, db DBTX, runID, stepSlug string, taskIndex int, output json.RawMessage) (string, error) {
	return taskCall(ctx, db, "complete_task",
		`select t.status from pgflow.complete_task(run_id => $1::uuid, step_slug => $2::text, task_index => $3::integer, output => $4::jsonb) as t`,
		runID, stepSlug, taskIndex, string(output))
}

// TaskResult is one completed task's output, as CompleteTasks reports it.
type TaskResult struct {
	RunID     string
	StepSlug  string
	TaskIndex int
	Output    json.RawMessage
	Attempt   int // the attempt that produced the output; 0: not fenced
}

// Outcomes of a fenced report (pgflow.complete_tasks' outcome column; FailTaskAt derives the same ones).
const (
	OutcomeRecorded  = "recorded"  // this call recorded the result
	OutcomeStale     = "stale"     // the attempt is no longer the task's current attempt: nothing changed
	OutcomeIgnored   = "ignored"   // the task, its step or its run is no longer 'started': nothing changed
	OutcomeDuplicate = "duplicate" // the same task was named earlier in the call: nothing changed
	OutcomeUnknown   = "unknown"   // no such task
)

// CompletedTask is what CompleteTasks reports for one result.
type CompletedTask struct {
	Status  string // the task's status afterwards; "" when there is no such task
	Outcome string // one of the Outcome* constants
}

// CompleteTasks calls pgflow.complete_tasks for results (one transaction, one round trip) and returns, in the
// order of results, each task's status afterwards and the outcome. With fenced (schema v0.20.0) every result
// carries its attempt and the database reports the outcome; without, nothing is fenced and the outcome is derived
// from the status (completed: recorded; no task: unknown; else ignored). Any error means nothing was recorded:
// the call is atomic.
func CompleteTasks(ctx context.Context, db DBTX, results []TaskResult, fenced bool) ([]CompletedTask, error) {
	if len(results) == 0 {
		return nil, nil
	}
	runs := make([]string, len(results))
	steps := make([]string, len(results))
	idx := make([]int32, len(results))
	outs := make([]string, len(results))
	attempts := make([]*int32, len(results))
	for i, r := range results {
		runs[i], steps[i], idx[i], outs[i] = r.RunID, r.StepSlug, int32(r.TaskIndex), string(r.Output)
		if r.Attempt > 0 {
			a := int32(r.Attempt)
			attempts[i] = &a
		}
	}
	var rows pgx.Rows
	var err error
	if fenced {
		rows, err = db.Query(ctx,
			`select t.task_position, t.task_status, t.outcome
			   from pgflow.complete_tasks(run_ids => $1::uuid[], step_slugs => $2::text[], task_indexes => $3::integer[],
			                              outputs => $4::jsonb[], attempts => $5::integer[]) as t`,
			runs, steps, idx, outs, attempts)
	} else {
		rows, err = db.Query(ctx,
			`select t.task_position, t.task_status, case when t.task_status is null then 'unknown'
			                                             when t.task_status = 'completed' then 'recorded'
			                                             else 'ignored' end
			   from pgflow.complete_tasks(run_ids => $1::uuid[], step_slugs => $2::text[], task_indexes => $3::integer[],
			                              outputs => $4::jsonb[]) as t`,
			runs, steps, idx, outs)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlapi: pgflow.complete_tasks(%d tasks, first: run %s, step %q, task %d): %w",
			len(results), runs[0], steps[0], idx[0], err)
	}
	done := make([]CompletedTask, len(results))
	var pos int32
	var status, outcome *string
	n := 0
	_, err = pgx.ForEachRow(rows, []any{&pos, &status, &outcome}, func() error {
		if pos < 1 || int(pos) > len(results) {
			return fmt.Errorf("position %d out of range", pos)
		}
		n++
		if status != nil {
			done[pos-1].Status = *status
		}
		done[pos-1].Outcome = OutcomeUnknown
		if outcome != nil {
			done[pos-1].Outcome = *outcome
		}
		return nil
	})
	if err == nil && n != len(results) {
		err = fmt.Errorf("%d rows for %d tasks", n, len(results))
	}
	if err != nil {
		return nil, fmt.Errorf("sqlapi: pgflow.complete_tasks(%d tasks, first: run %s, step %q, task %d): %w",
			len(results), runs[0], steps[0], idx[0], err)
	}
	return done, nil
}

// TaskRef names one attempt of one task.
type TaskRef struct {
	RunID     string
	StepSlug  string
	TaskIndex int
	Attempt   int
}

// FailedTask is what FailTaskAt reports.
type FailedTask struct {
	Status         string // the task's status afterwards: "queued" (will be retried), "failed", ...; "" for no task
	Outcome        string // OutcomeRecorded, OutcomeStale, OutcomeIgnored or OutcomeUnknown
	CurrentAttempt int    // the task's attempts_count afterwards
}

// FailTaskAt records the failure of attempt ref.Attempt with pgflow.fail_task(..., attempt, permanent) (schema
// v0.20.0): the database changes nothing unless that attempt is the task's current, started attempt. permanent
// fails the task without retry (the step's when_exhausted policy applies). fail_task returns the task row as it
// is afterwards, which cannot tell "queued again by this call" from "requeued by stalled-task recovery before this
// call", so the same round trip (one implicit transaction) first reads the task under the lock of its run row,
// which every state change but recovery's takes first, and the outcome compares both:
// recorded when the task was started at ref.Attempt before and fail_task moved it on without a recovery in
// between; stale when another attempt is current or recovery took the task back; ignored otherwise.
func FailTaskAt(ctx context.Context, db Batcher, ref TaskRef, errorMessage string, permanent bool) (FailedTask, error) {
	type taskState struct {
		status             string
		attempts, requeued int
		permanentlyStalled bool
	}
	var before, after taskState
	var haveBefore, haveAfter bool
	var b pgx.Batch
	b.Queue(`select t.status, t.attempts_count, t.requeued_count, t.permanently_stalled_at is not null
	           from pgflow.runs as r
	           join pgflow.step_tasks as t on t.run_id = r.run_id
	          where r.run_id = $1::uuid and t.step_slug = $2::text and t.task_index = $3::integer
	            for update of r`,
		ref.RunID, ref.StepSlug, ref.TaskIndex).Query(func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&before.status, &before.attempts, &before.requeued, &before.permanentlyStalled}, func() error {
			haveBefore = true
			return nil
		})
		return err
	})
	b.Queue(`select t.status, t.attempts_count, t.requeued_count, t.permanently_stalled_at is not null
	           from pgflow.fail_task(run_id => $1::uuid, step_slug => $2::text, task_index => $3::integer,
	                                 error_message => $4::text, attempt => $5::integer, permanent => $6::boolean) as t`,
		ref.RunID, ref.StepSlug, ref.TaskIndex, errorMessage, ref.Attempt, permanent).Query(func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&after.status, &after.attempts, &after.requeued, &after.permanentlyStalled}, func() error {
			haveAfter = true
			return nil
		})
		return err
	})
	if err := db.SendBatch(ctx, &b).Close(); err != nil {
		return FailedTask{}, fmt.Errorf("sqlapi: pgflow.fail_task(run %s, step %q, task %d, attempt %d, permanent %t): %w",
			ref.RunID, ref.StepSlug, ref.TaskIndex, ref.Attempt, permanent, err)
	}
	if !haveBefore || !haveAfter {
		return FailedTask{Outcome: OutcomeUnknown}, nil
	}
	res := FailedTask{Status: after.status, CurrentAttempt: after.attempts}
	recovered := after.requeued != before.requeued || (after.permanentlyStalled && !before.permanentlyStalled)
	switch {
	case before.attempts != ref.Attempt || after.attempts != ref.Attempt || before.status == "queued" || recovered:
		res.Outcome = OutcomeStale
	case before.status == "started" && (after.status == "queued" || after.status == "failed"):
		res.Outcome = OutcomeRecorded
	default:
		res.Outcome = OutcomeIgnored
	}
	return res, nil
}

// ReleaseTasks puts tasks interrupted by a worker's shutdown back into their queue with
// pgflow.release_tasks (schema v0.20.0): a task that is 'started' at exactly the given attempt becomes 'queued'
// without spending the attempt and its message becomes visible at once; anything else changes nothing. It returns
// whether each task was released, in the order of refs.
func ReleaseTasks(ctx context.Context, db DBTX, refs []TaskRef) ([]bool, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	runs := make([]string, len(refs))
	steps := make([]string, len(refs))
	idx := make([]int32, len(refs))
	attempts := make([]int32, len(refs))
	for i, r := range refs {
		runs[i], steps[i], idx[i], attempts[i] = r.RunID, r.StepSlug, int32(r.TaskIndex), int32(r.Attempt)
	}
	rows, err := db.Query(ctx,
		`select t.task_position, t.released
		   from pgflow.release_tasks(run_ids => $1::uuid[], step_slugs => $2::text[], task_indexes => $3::integer[],
		                             attempts => $4::integer[]) as t`,
		runs, steps, idx, attempts)
	if err != nil {
		return nil, fmt.Errorf("sqlapi: pgflow.release_tasks(%d tasks, first: run %s, step %q, task %d, attempt %d): %w",
			len(refs), runs[0], steps[0], idx[0], attempts[0], err)
	}
	released := make([]bool, len(refs))
	var pos int32
	var ok bool
	_, err = pgx.ForEachRow(rows, []any{&pos, &ok}, func() error {
		if pos < 1 || int(pos) > len(refs) {
			return fmt.Errorf("position %d out of range", pos)
		}
		released[pos-1] = ok
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlapi: pgflow.release_tasks(%d tasks, first: run %s, step %q, task %d, attempt %d): %w",
			len(refs), runs[0], steps[0], idx[0], attempts[0], err)
	}
	return released, nil
}

// FailTask calls pgflow.fail_task(run_id, step_slug, task_index, error_message) and returns the task's status
// afterwards ("queued" when it will be retried, "failed" when exhausted; "" when the database has no such task).
func FailTask(ctx context.Context, db DBTX, runID, stepSlug string, taskIndex int, errorMessage string) (string, error) {
	return taskCall(ctx, db, "fail_task",
		`select t.status from pgflow.fail_task(run_id => $1::uuid, step_slug => $2::text, task_index => $3::integer, error_message => $4::text) as t`,
		runID, stepSlug, taskIndex, errorMessage)
}

func taskCall(ctx context.Context, db DBTX, fn, sql, runID, stepSlug string, taskIndex int, arg string) (string, error) {
	var status string
	err := db.QueryRow(ctx, sql, runID, stepSlug, taskIndex, arg).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("sqlapi: pgflow.%s(run %s, step %q, task %d): %w", fn, runID, stepSlug, taskIndex, err)
	}
	return status, nil
}

// ErrRunNotFound is wrapped by RunInput when no run has the given id.
var ErrRunNotFound = errors.New("run not found")

// RunInput returns the input of run runID.
func RunInput(ctx context.Context, db DBTX, runID string) (json.RawMessage, error) {
	var raw json.RawMessage
	err := db.QueryRow(ctx, `select r.input from pgflow.runs as r where r.run_id = $1::uuid`, runID).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("sqlapi: input of run %s: %w", runID, ErrRunNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlapi: input of run %s: %w", runID, err)
	}
	return raw, nil
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
		return false, 0, fmt.Errorf("sqlapi: requeue stalled tasks: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var locked bool
	if err := tx.QueryRow(ctx, `select pg_try_advisory_xact_lock($1::bigint)`, MaintenanceLockKey).Scan(&locked); err != nil {
		return false, 0, fmt.Errorf("sqlapi: requeue stalled tasks: advisory lock %d: %w", MaintenanceLockKey, err)
	}
	if !locked {
		return false, 0, nil
	}
	if err := tx.QueryRow(ctx, `select pgflow.requeue_stalled_tasks()`).Scan(&requeued); err != nil {
		return false, 0, fmt.Errorf("sqlapi: pgflow.requeue_stalled_tasks(): %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, 0, fmt.Errorf("sqlapi: requeue stalled tasks: commit: %w", err)
	}
	return true, requeued, nil
}
