package sqlapi

// Reads of pgflow.step_tasks for the run read model (GetRunDetail): the tasks of a run, and per step a summary
// over all of its tasks. A map step can have hundreds of thousands of tasks, so the summary is counted by the
// database and the task list is bounded per step. Plain selects: the role needs select on pgflow.step_tasks and
// pgflow.steps.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Task is one pgflow.step_tasks row, with its output as text cut at the caller's limit.
type Task struct {
	StepSlug      string
	TaskIndex     int
	Status        string // queued | started | completed | failed
	AttemptsCount int
	RequeuedCount int
	QueueName     *string // step_tasks.queue_name (schema v0.17.0+), the queue of MessageID; nil on older schemas
	MessageID     *int64
	ErrorMessage  *string
	LastWorkerID  *string
	QueuedAt      time.Time
	StartedAt     *time.Time
	CompletedAt   *time.Time
	FailedAt      *time.Time
	OutputChars   int     // length of the output's JSON text, 0 when there is none
	Output        *string // the output's JSON text, at most the limit's characters; nil when there is none or none was asked for
}

// Truncated reports whether Output holds only the beginning of the output.
func (t Task) Truncated() bool {
	return t.Output != nil && len([]rune(*t.Output)) < t.OutputChars
}

// ListRunTasksParams selects the tasks of one run.
type ListRunTasksParams struct {
	RunID string
	// PerStep is how many tasks of each step to return, the lowest task indexes; <= 0 returns all of them.
	PerStep int
	// OutputChars is how many characters of each output to return; <= 0 returns no output text (OutputChars
	// still tells its length).
	OutputChars int
}

const runTasksSQL = `
select t.step_slug, t.task_index, t.status, t.attempts_count, t.requeued_count, to_jsonb(t) ->> 'queue_name',
  t.message_id, t.error_message,
  t.last_worker_id::text, t.queued_at, t.started_at, t.completed_at, t.failed_at,
  coalesce(length(t.output::text), 0), case when $3::int > 0 then left(t.output::text, $3::int) end
from (
  select st.*, row_number() over (partition by st.step_slug order by st.task_index) as n
  from pgflow.step_tasks as st
  where st.run_id = $1::uuid) as t
join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
where $2::int <= 0 or t.n <= $2::int
order by s.step_index, t.task_index`

// ListRunTasks returns tasks of one run in step_index, task_index order (none for an unknown run).
func ListRunTasks(ctx context.Context, db DBTX, p ListRunTasksParams) ([]Task, error) {
	rows, err := db.Query(ctx, runTasksSQL, p.RunID, p.PerStep, p.OutputChars)
	if err != nil {
		return nil, fmt.Errorf("read the tasks of run %s: %w", p.RunID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Task, error) {
		var t Task
		err := row.Scan(&t.StepSlug, &t.TaskIndex, &t.Status, &t.AttemptsCount, &t.RequeuedCount, &t.QueueName, &t.MessageID,
			&t.ErrorMessage, &t.LastWorkerID, &t.QueuedAt, &t.StartedAt, &t.CompletedAt, &t.FailedAt,
			&t.OutputChars, &t.Output)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the tasks of run %s: %w", p.RunID, err)
	}
	return out, nil
}

// TaskSummary counts the tasks of one step of a run, over all of them.
type TaskSummary struct {
	Total         int
	Queued        int
	Started       int
	Completed     int
	Failed        int
	AttemptsTotal int // attempts over all tasks
	AttemptsMax   int // the most attempts of one task
	Retries       int // attempts beyond each task's first
	// LastError is the error of the task whose failure is the most recent (by failed_at, else queued_at: a
	// retried task keeps its last error while it is queued again); nil when no task has an error.
	LastError *string
}

const taskSummariesSQL = `
select t.step_slug, count(*)::int,
  (count(*) filter (where t.status = 'queued'))::int,
  (count(*) filter (where t.status = 'started'))::int,
  (count(*) filter (where t.status = 'completed'))::int,
  (count(*) filter (where t.status = 'failed'))::int,
  coalesce(sum(t.attempts_count), 0)::int,
  coalesce(max(t.attempts_count), 0)::int,
  coalesce(sum(greatest(t.attempts_count - 1, 0)), 0)::int,
  (select e.error_message
   from pgflow.step_tasks as e
   where e.run_id = $1::uuid and e.step_slug = t.step_slug and e.error_message is not null
   order by coalesce(e.failed_at, e.queued_at) desc, e.task_index
   limit 1)
from pgflow.step_tasks as t
where t.run_id = $1::uuid
group by t.step_slug`

// taskSummaries returns the task summary of every step of a run that has tasks, keyed by step slug.
func taskSummaries(ctx context.Context, db DBTX, runID string) (map[string]TaskSummary, error) {
	rows, err := db.Query(ctx, taskSummariesSQL, runID)
	if err != nil {
		return nil, fmt.Errorf("count the tasks of run %s: %w", runID, err)
	}
	out := map[string]TaskSummary{}
	var slug string
	var s TaskSummary
	_, err = pgx.ForEachRow(rows, []any{&slug, &s.Total, &s.Queued, &s.Started, &s.Completed, &s.Failed,
		&s.AttemptsTotal, &s.AttemptsMax, &s.Retries, &s.LastError}, func() error {
		out[slug] = s
		s.LastError = nil // the next row's scan must not write into the string just stored
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count the tasks of run %s: %w", runID, err)
	}
	return out, nil
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

// StartTasks claims the tasks behind msgIDs, read from queue, with
// pgflow.start_tasks(flow_slug, msg_ids, worker_id, queue_name) and reads, in the same round trip (one implicit
// transaction, so the second statement sees the claim), the claimed tasks' attempts_count and their steps'
// effective timeout and max attempts, which pgflow.step_task_record does not carry. Only tasks start_tasks returned are returned, ordered by message id.
func StartTasks(ctx context.Context, db Batcher, flowSlug, queue string, msgIDs []int64, workerID string) ([]ClaimedTask, error) {
	if len(msgIDs) == 0 {
		return nil, nil
	}
	var b pgx.Batch
	var tasks []ClaimedTask
	b.Queue(`select r.flow_slug, r.run_id::text, r.step_slug, r.input, r.msg_id, r.task_index, r.flow_input
	           from pgflow.start_tasks(flow_slug => $1::text, msg_ids => $2::bigint[], worker_id => $3::uuid,
	                                   queue_name => $4::text) as r`,
		flowSlug, msgIDs, workerID, queue).Query(func(rows pgx.Rows) error {
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
	            and t.queue_name = lower($4::text)
	            and t.message_id = any ($2::bigint[])
	            and t.status = 'started'
	            and t.last_worker_id = $3::uuid`,
		flowSlug, msgIDs, workerID, queue).Query(func(rows pgx.Rows) error {
		var id int64
		var in claimInfo
		_, err := pgx.ForEachRow(rows, []any{&id, &in.attempt, &in.timeout, &in.maxAttempts}, func() error {
			infos[id] = in
			return nil
		})
		return err
	})
	if err := db.SendBatch(ctx, &b).Close(); err != nil {
		return nil, fmt.Errorf("pgflow.start_tasks(flow %q, queue %q, %d message ids, worker %s): %w",
			flowSlug, queue, len(msgIDs), workerID, err)
	}
	for i := range tasks {
		in := infos[tasks[i].MsgID]
		tasks[i].Attempt, tasks[i].TimeoutSeconds, tasks[i].MaxAttempts = in.attempt, in.timeout, in.maxAttempts
	}
	return tasks, nil
}

// ReadAndStartTasks reads up to qty messages of queue and claims their tasks for flowSlug in one call,
// pgflow.read_and_start_tasks: what Read and StartTasks do in two round trips and two row versions per message.
// Messages read but not claimed are hidden for vtSeconds (as Read hides them) and returned in unclaimed, in
// message id order; claimed tasks are ordered by message id. read is the number of messages read.
func ReadAndStartTasks(ctx context.Context, db DBTX, flowSlug, queue, workerID string, qty, vtSeconds int) (
	claimed []ClaimedTask, unclaimed []int64, read int, err error) {
	var r ReadAndStart
	rows, err := db.Query(ctx, readAndStartTasksSQL, flowSlug, queue, uuidArg(workerID), qty, vtSeconds)
	if err == nil {
		err = r.scan(rows)
	}
	if err != nil {
		return nil, nil, 0, readAndStartTasksErr(flowSlug, queue, workerID, qty, vtSeconds, err)
	}
	return r.Claimed, r.Unclaimed, r.Read, nil
}

// ReadAndStart is what one pgflow.read_and_start_tasks call queued into a batch (QueueReadAndStartTasks) read and
// claimed, set once the batch has run: as ReadAndStartTasks returns it.
type ReadAndStart struct {
	Claimed   []ClaimedTask
	Unclaimed []int64
	Read      int
}

// QueueReadAndStartTasks adds to b the call ReadAndStartTasks makes; out is filled when b runs. It lets a claim
// share the transaction and the round trip of other statements (a worker's completions, CompleteTasksWith): the
// claim then commits, or not, with them.
func QueueReadAndStartTasks(b *pgx.Batch, flowSlug, queue, workerID string, qty, vtSeconds int, out *ReadAndStart) {
	b.Queue(readAndStartTasksSQL, flowSlug, queue, uuidArg(workerID), qty, vtSeconds).Query(func(rows pgx.Rows) error {
		if err := out.scan(rows); err != nil {
			return readAndStartTasksErr(flowSlug, queue, workerID, qty, vtSeconds, err)
		}
		return nil
	})
}

const readAndStartTasksSQL = `
		select r.msg_id, r.claimed, r.flow_slug, r.run_id::text, r.step_slug, r.input, r.task_index, r.flow_input,
		       r.attempt, r.timeout, r.max_attempts
		  from pgflow.read_and_start_tasks(flow_slug => $1::text, queue_name => $2::text, worker_id => $3::uuid,
		                                   qty => $4::integer, vt => $5::integer) as r`

func readAndStartTasksErr(flowSlug, queue, workerID string, qty, vtSeconds int, err error) error {
	return fmt.Errorf("pgflow.read_and_start_tasks(flow %q, queue %q, qty %d, vt %d, worker %s): %w",
		flowSlug, queue, qty, vtSeconds, workerID, err)
}

// scan reads the rows of pgflow.read_and_start_tasks into r.
func (r *ReadAndStart) scan(rows pgx.Rows) error {
	var c ClaimedTask
	var ok bool
	// Scanned without pointers to pointers (pgx allocates each through reflection) and with the slugs, which a
	// batch repeats, made strings once per call: a claim is on every task's path.
	var flow, step pgtype.DriverBytes
	var run pgtype.Text
	var index, attempt, timeout, maxAttempts pgtype.Int4
	var slugs interner
	_, err := pgx.ForEachRow(rows, []any{&c.MsgID, &ok, &flow, &run, &step, &c.Input, &index, &c.FlowInput,
		&attempt, &timeout, &maxAttempts}, func() error {
		r.Read++
		if !ok {
			r.Unclaimed = append(r.Unclaimed, c.MsgID)
			return nil
		}
		t := c
		t.FlowSlug, t.RunID, t.StepSlug = slugs.str(flow), run.String, slugs.str(step)
		t.TaskIndex, t.Attempt, t.TimeoutSeconds, t.MaxAttempts = int(index.Int32), int(attempt.Int32), int(timeout.Int32),
			int(maxAttempts.Int32)
		r.Claimed = append(r.Claimed, t)
		c.Input, c.FlowInput = nil, nil // the next row's scan must not write into the slices just stored
		return nil
	})
	return err
}

// interner makes strings of the bytes of a text column, each distinct value once: the values a batch of rows
// repeats (slugs, statuses) then cost one allocation per call instead of one per row.
type interner []string

// str returns b as a string ("" for a NULL), the same string for the same bytes.
func (in *interner) str(b []byte) string {
	for _, s := range *in {
		if s == string(b) {
			return s
		}
	}
	s := string(b)
	if len(*in) < 16 {
		*in = append(*in, s)
	}
	return s
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
		return nil, fmt.Errorf("classify %d unclaimed messages of queue %q: %w", len(msgIDs), queue, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (UnclaimedMessage, error) {
		var u UnclaimedMessage
		err := r.Scan(&u.MsgID, &u.Reason, &u.OwnerFlow)
		return u, err
	})
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
// order of results, each task's status afterwards and the outcome the database reports. Every result carries the
// attempt that produced it (0: not fenced). Any error means nothing was recorded: the call is atomic.
func CompleteTasks(ctx context.Context, db DBTX, results []TaskResult) ([]CompletedTask, error) {
	if len(results) == 0 {
		return nil, nil
	}
	args := completeTasksArgs(results)
	rows, err := db.Query(ctx, completeTasksSQL, args...)
	if err != nil {
		return nil, completeTasksErr(results, err)
	}
	done, err := scanCompletedTasks(rows, len(results))
	if err != nil {
		return nil, completeTasksErr(results, err)
	}
	return done, nil
}

// CompleteTasksDeferred is CompleteTasks with the call's notifications (events, wakes of the workers of dependent
// steps) deferred (see Notifications): the caller sends them once the call returned.
func CompleteTasksDeferred(ctx context.Context, db Batcher, results []TaskResult) ([]CompletedTask, Notifications, error) {
	done, pending, _, err := CompleteTasksWith(ctx, db, results, nil, false)
	return done, pending, err
}

// CompleteTasksWith is CompleteTasksDeferred with the statements more adds (when not nil) sent after the
// completions in the same round trip: a worker's claims ride so with its completions (one call, one busy connection
// where there were two). They go after the completions, and must not wait for locks (a claim's are SKIP LOCKED):
// the completions wait for the row locks of runs, step states and messages that other transactions hold, and a
// transaction that held a claim's locks while it waited there could close a cycle with one that waits for those (a
// claim first deadlocked about once in five map burn-downs: docs/performance-rounds.md, twenty-first round).
//
// Without commitFirst the completions and more's statements share one transaction: all of it commits, or none,
// and err is its error (moreErr then too). With commitFirst the completions commit first and more's statements
// run in a transaction of their own once they have: the row locks of the completions' runs and step states are
// then not held while the claim runs too. That is for the tasks of map steps, whose step state and run other
// workers' completions of the same step lock at the same time (docs/performance-rounds.md, twenty-second round);
// it costs one more commit. err is then the completions' error (nil: they committed) and moreErr the error of
// more's statements, which ran only after that commit (the completions' error when they did not run). A failure inside the completions leaves the connection in
// a failed transaction block, which the pool closes (pgxpool does not keep such connections).
//
// With no results more's statements go alone (moreErr). An error of complete_tasks names the results; one of
// more's statements is theirs to wrap (in their pgx.Batch callbacks).
func CompleteTasksWith(ctx context.Context, db Batcher, results []TaskResult, more func(b *pgx.Batch), commitFirst bool) (
	done []CompletedTask, pending Notifications, moreErr, err error) {
	if len(results) == 0 {
		if more == nil {
			return nil, "", nil, nil
		}
		var b pgx.Batch
		more(&b)
		return nil, "", db.SendBatch(ctx, &b).Close(), nil
	}
	var b pgx.Batch
	apart := commitFirst && more != nil
	if apart {
		b.Queue(`begin`)
	}
	var failed, committed bool
	deferred := queueDeferNotifications(&b, len(results), func(b *pgx.Batch) {
		b.Queue(completeTasksSQL, completeTasksArgs(results)...).Query(func(rows pgx.Rows) (err error) {
			done, err = scanCompletedTasks(rows, len(results))
			failed = err != nil
			return err
		})
		if more != nil && !apart {
			more(b) // inside the deferral: what they would notify is deferred with the rest
		}
	})
	if apart {
		b.Queue(`commit`).Exec(func(pgconn.CommandTag) error {
			committed = true
			return nil
		})
		more(&b) // a transaction of its own: what it notifies, it notifies at its commit
	}
	err = db.SendBatch(ctx, &b).Close()
	switch {
	case err != nil && (more == nil || failed):
		err = completeTasksErr(results, err)
		return nil, "", err, err
	case err != nil && !(apart && committed):
		return nil, "", err, err
	}
	return done, deferred.notifications(), err, nil
}

const completeTasksSQL = `select t.task_position, t.task_status, t.outcome
   from pgflow.complete_tasks(run_ids => $1::uuid[], step_slugs => $2::text[], task_indexes => $3::integer[],
                              outputs => $4::jsonb[], attempts => $5::integer[]) as t`

func completeTasksArgs(results []TaskResult) []any {
	runs := make([]string, len(results))
	steps := make([]string, len(results))
	idx := make([]int32, len(results))
	outs := make([]string, len(results))
	attempts := make([]*int32, len(results))
	values := make([]int32, len(results)) // what attempts point to: one allocation, not one per task
	for i, r := range results {
		runs[i], steps[i], idx[i], outs[i] = r.RunID, r.StepSlug, int32(r.TaskIndex), string(r.Output)
		if r.Attempt > 0 {
			values[i] = int32(r.Attempt)
			attempts[i] = &values[i]
		}
	}
	return []any{uuidsArg(runs), steps, idx, outs, attempts}
}

func completeTasksErr(results []TaskResult, err error) error {
	r := results[0]
	return fmt.Errorf("pgflow.complete_tasks(%d tasks, first: run %s, step %q, task %d): %w",
		len(results), r.RunID, r.StepSlug, r.TaskIndex, err)
}

func scanCompletedTasks(rows pgx.Rows, n int) ([]CompletedTask, error) {
	done := make([]CompletedTask, n)
	var pos int32
	var status, outcome pgtype.DriverBytes // a handful of distinct values: interned, not allocated per row
	var words interner
	seen := 0
	_, err := pgx.ForEachRow(rows, []any{&pos, &status, &outcome}, func() error {
		if pos < 1 || int(pos) > n {
			return fmt.Errorf("position %d out of range", pos)
		}
		seen++
		done[pos-1].Status = words.str(status)
		done[pos-1].Outcome = OutcomeUnknown
		if outcome != nil {
			done[pos-1].Outcome = words.str(outcome)
		}
		return nil
	})
	if err == nil && seen != n {
		err = fmt.Errorf("%d rows for %d tasks", seen, n)
	}
	if err != nil {
		return nil, err
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

// FailTaskAt records the failure of attempt ref.Attempt with pgflow.fail_task(..., attempt, permanent,
// retry_delay) (schema v0.20.0): the database changes nothing unless that attempt is the task's current, started
// attempt. permanent fails the task without retry (the step's when_exhausted policy applies). retryDelay, when not
// nil, replaces the step's backoff for the retry (if one remains): it is sent in whole seconds, rounded up (never
// earlier than asked), negative as 0, at most math.MaxInt32; the database records when the retry becomes visible in
// step_tasks.retry_at. fail_task returns the task row as it
// is afterwards, which cannot tell "queued again by this call" from "requeued by stalled-task recovery before this
// call", so the same round trip (one implicit transaction) first reads the task under the lock of its run row,
// which every state change but recovery's takes first, and the outcome compares both:
// recorded when the task was started at ref.Attempt before and fail_task moved it on without a recovery in
// between; stale when another attempt is current or recovery took the task back; ignored otherwise.
func FailTaskAt(ctx context.Context, db Batcher, ref TaskRef, errorMessage string, permanent bool, retryDelay *time.Duration) (FailedTask, Notifications, error) {
	type taskState struct {
		status             string
		attempts, requeued int
		permanentlyStalled bool
	}
	var before, after taskState
	var haveBefore, haveAfter bool
	failSQL := `select t.status, t.attempts_count, t.requeued_count, t.permanently_stalled_at is not null
	           from pgflow.fail_task(run_id => $1::uuid, step_slug => $2::text, task_index => $3::integer,
	                                 error_message => $4::text, attempt => $5::integer, permanent => $6::boolean) as t`
	args := []any{ref.RunID, ref.StepSlug, ref.TaskIndex, errorMessage, ref.Attempt, permanent}
	if s := delaySeconds(retryDelay); s != nil {
		// Without a retry delay the call leaves retry_delay out (its default, the step's backoff).
		failSQL = `select t.status, t.attempts_count, t.requeued_count, t.permanently_stalled_at is not null
	           from pgflow.fail_task(run_id => $1::uuid, step_slug => $2::text, task_index => $3::integer,
	                                 error_message => $4::text, attempt => $5::integer, permanent => $6::boolean,
	                                 retry_delay => $7::integer) as t`
		args = append(args, *s)
	}
	pending, err := deferNotifications(ctx, db, 1, func(b *pgx.Batch) {
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
		b.Queue(failSQL, args...).Query(func(rows pgx.Rows) error {
			_, err := pgx.ForEachRow(rows, []any{&after.status, &after.attempts, &after.requeued, &after.permanentlyStalled}, func() error {
				haveAfter = true
				return nil
			})
			return err
		})
	})
	if err != nil {
		delay := "default"
		if s := delaySeconds(retryDelay); s != nil {
			delay = fmt.Sprintf("%ds", *s)
		}
		return FailedTask{}, "", fmt.Errorf("pgflow.fail_task(run %s, step %q, task %d, attempt %d, permanent %t, retry delay %s): %w",
			ref.RunID, ref.StepSlug, ref.TaskIndex, ref.Attempt, permanent, delay, err)
	}
	if !haveBefore || !haveAfter {
		return FailedTask{Outcome: OutcomeUnknown}, pending, nil
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
	return res, pending, nil
}

// delaySeconds is fail_task's retry_delay for d: nil (the step's backoff) when d is nil, else whole seconds
// rounded up, within [0, math.MaxInt32].
func delaySeconds(d *time.Duration) *int32 {
	if d == nil {
		return nil
	}
	var s int32
	switch {
	case *d <= 0:
	case *d >= time.Duration(math.MaxInt32)*time.Second:
		s = math.MaxInt32
	default:
		s = int32((*d + time.Second - 1) / time.Second)
	}
	return &s
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
		return nil, fmt.Errorf("pgflow.release_tasks(%d tasks, first: run %s, step %q, task %d, attempt %d): %w",
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
		return nil, fmt.Errorf("pgflow.release_tasks(%d tasks, first: run %s, step %q, task %d, attempt %d): %w",
			len(refs), runs[0], steps[0], idx[0], attempts[0], err)
	}
	return released, nil
}
