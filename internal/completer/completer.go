// Package completer records what became of claimed tasks: successful outputs (batched into one
// pgflow.complete_tasks call per burst of handlers that finish together), failures (pgflow.fail_task) and tasks a
// shutdown interrupted (pgflow.release_tasks). Every report is fenced by the attempt that produced it, so a
// report from an attempt that is no longer current changes nothing; it is logged (identity only, never the
// output) and counted as stale. Reporting never costs a task an attempt: transient database errors are retried
// with backoff until the worker's hard stop, then once more. Other statements may ride in a result call (Ride):
// the worker's claims do, so that under load one call records a batch and claims the next.
//
// This is the bottom of a task's path through the engine: it knows package sqlapi and nothing above itself.
package completer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-go/pgflow/internal/backoff"
	"github.com/pgflow-go/pgflow/internal/observe"
	"github.com/pgflow-go/pgflow/internal/pgerr"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/taskrun"
)

const (
	// maxBatch bounds the completions recorded in one pgflow.complete_tasks call.
	maxBatch = 256
	// stallAfter is how long a result call may run before the completer sends the next batch beside it. Below
	// that, one call is in flight at a time: the completions that arrive meanwhile queue up and go out together
	// in the next call, so batches grow with the load, and the batches of one worker never wait for each other's
	// row locks (map tasks of one run, the run and step rows of a flow). Two calls in flight at all times made
	// batches smaller and cost 13 % more server CPU per task on two cores (docs/performance.md, fifteenth
	// round); a call stuck behind a lock someone else holds still holds back the worker's other results for this
	// long only.
	stallAfter = 250 * time.Millisecond
	// maxInFlight is how many result calls may be in flight at once: one, and a second beside a stalled one.
	maxInFlight = 2
	// linger is how long a flusher waits for more completions while other tasks are still running.
	linger = time.Millisecond
	// releaseTimeout is how long a stopping worker tries to put an interrupted task back.
	releaseTimeout = 5 * time.Second
	// maxErrorMessageLen is the longest error_message the worker stores.
	maxErrorMessageLen = 32 << 10
)

// TaskCancelled is the status of a task whose run was cancelled (schema v0.20.0): a report about it is fenced.
const TaskCancelled = "cancelled"

// DB is what the completer needs of the database: queries and batches (a *pgxpool.Pool).
type DB interface {
	sqlapi.DBTX
	sqlapi.Batcher
}

// Config configures a Completer.
type Config struct {
	DB       DB
	Logger   *slog.Logger
	Observer *observe.Observer // nil: no hooks
	// QueueSize is how many completions may wait for a flusher (the worker's handler slots).
	QueueSize int
	// InFlight reports how many tasks are running now; a flusher lingers for more completions only while some are.
	InFlight func() int64
	// Retry is the backoff of transient database errors.
	Retry backoff.Policy
	// HardStop ends when a shutdown stops waiting for handlers: transient errors are then retried once more only.
	HardStop context.Context
	// Calls is the context of the database calls; it ends when the worker stops waiting for reports.
	Calls context.Context
	// Base outlives both (release calls run under it with their own timeout).
	Base context.Context
	// StallAfter replaces stallAfter when positive (tests).
	StallAfter time.Duration
	// RideWait replaces rideWait when positive (tests).
	RideWait time.Duration
}

// Completer records results. Create it with New and stop it with Stop once no handler waits for an outcome.
type Completer struct {
	cfg      Config
	queue    chan *pending
	rides    chan *ride
	riding   atomic.Int32  // rides handed over or waiting to be (tests wait for a ride to be on its way)
	expected atomic.Int32  // rides announced (Expect) and not yet on their way
	unexpect chan struct{} // a ride announced is no longer coming
	wanted   chan struct{} // a result call waits for an announced ride: come now (Expect)
	stopped  chan struct{}
	wg       sync.WaitGroup
	stopOnce sync.Once
	// mu orders hand-overs before the stop: once closed is set, no completion enters the queue, so the ones in
	// it when the flusher has returned are all that is left to settle.
	mu     sync.RWMutex
	closed bool
}

type pending struct {
	log    *slog.Logger
	meta   taskrun.Meta
	out    json.RawMessage
	settle Settler
}

// Settler is told a task's outcome once it is known (CompleteAsync).
type Settler interface {
	Settle(observe.Outcome)
}

// waiter is the Settler of Complete: a caller that waits for the outcome.
type waiter chan observe.Outcome

func (w waiter) Settle(o observe.Outcome) { w <- o }

// New starts a Completer's flusher.
func New(cfg Config) *Completer {
	c := &Completer{cfg: cfg, queue: make(chan *pending, max(cfg.QueueSize, 1)), rides: make(chan *ride),
		unexpect: make(chan struct{}, 1), wanted: make(chan struct{}, 1), stopped: make(chan struct{})}
	c.wg.Go(c.loop)
	return c
}

// Stop ends the flusher once its calls in flight have returned. A handler that reports later (one that ignored its
// context and was abandoned) gets observe.Unreported.
func (c *Completer) Stop() {
	c.stopOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		close(c.stopped)
	})
	c.wg.Wait()
	for {
		select {
		case p := <-c.queue:
			c.logLost(p.log, "complete_tasks", errors.New("the worker stopped reporting results"))
			p.settle.Settle(observe.Unreported)
		default:
			return
		}
	}
}

func ref(m taskrun.Meta) sqlapi.TaskRef {
	return sqlapi.TaskRef{RunID: m.RunID, StepSlug: m.StepSlug, TaskIndex: m.TaskIndex, Attempt: m.Attempt}
}

// Complete records a successful attempt and returns what became of the task. Completions of handlers that finish
// at about the same time are recorded together in one transaction; the outcome is the same as recording each
// alone. When the batch call fails with an error retrying cannot fix (an output the database refuses), every task
// of the batch is recorded on its own: the others first, then the refused ones are failed without retry with the
// database's reason, so one bad result never loses or delays the others.
func (c *Completer) Complete(log *slog.Logger, meta taskrun.Meta, out json.RawMessage) observe.Outcome {
	w := make(waiter, 1)
	c.CompleteAsync(log, meta, out, w)
	return <-w
}

// CompleteAsync is Complete without waiting: it hands the result over and returns, and s is told the outcome
// once it is known, on a flusher's goroutine (on the caller's when the completer has stopped: Unreported). A
// handler's goroutine can so end at once instead of sleeping until a flusher wakes it with the outcome. Settle
// must not block: it runs on the goroutine that records the next batches.
func (c *Completer) CompleteAsync(log *slog.Logger, meta taskrun.Meta, out json.RawMessage, s Settler) {
	p := &pending{log: log, meta: meta, out: out, settle: s}
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		c.logLost(log, "complete_tasks", errors.New("the worker stopped reporting results"))
		s.Settle(observe.Unreported)
		return
	}
	// The queue holds a completion per handler slot, so this waits only for a burst beyond that to be taken.
	c.queue <- p
	c.mu.RUnlock()
}

// ErrStopped is Ride's error once the completer has stopped: nothing was sent.
var ErrStopped = errors.New("the completer has stopped")

// errLaneStalled is Ride's error when the completer's calls in flight stalled (stallAfter): nothing was sent.
var errLaneStalled = errors.New("the completer's calls in flight have stalled")

// maxRides bounds the statements of other callers (Ride) one call carries.
const maxRides = 16

// ride is a caller's statements waiting for the next call (Ride).
type ride struct {
	queue func(b *pgx.Batch)
	done  chan error
}

// Ride sends the statements queue adds in the completer's next call, after the completions waiting then (alone
// when none are; sqlapi.CompleteTasksWith says why after), and returns once that call has returned: nil when the
// statements committed. They share the completions' transaction, or, when the completions hold a task of a map
// step, run in a transaction of their own once those have committed (flushWithRides). A worker's claims ride so (claimer.ReadAndClaim): under load each of its calls
// claims the next batch of tasks and records one batch of results, one commit and one busy connection where there
// were two, and a claim never runs beside the worker's own completion call. The statements must not wait for row
// locks (a claim's are SKIP LOCKED), or the worker's results would wait with them. A ride waits for a call to
// carry it as long as a call may run before the next goes out beside it (stallAfter); then it is refused, and its
// caller goes alone. An error means the statements did not commit; the completions are then recorded without them
// if they were not (see flush), and what to do about the ride is the caller's; queue's pgx.Batch callbacks read
// the ride's rows and wrap its errors.
func (c *Completer) Ride(queue func(b *pgx.Batch)) error {
	r := &ride{queue: queue, done: make(chan error, 1)}
	c.riding.Add(1)
	defer c.riding.Add(-1)
	wait := time.NewTimer(c.stallAfter())
	defer wait.Stop()
	select {
	case c.rides <- r:
	case <-wait.C:
		return errLaneStalled
	case <-c.stopped:
		return ErrStopped
	}
	return <-r.done
}

// rideWait bounds how long a result call waits for a ride announced by Expect.
const rideWait = 5 * time.Millisecond

// Expect announces a ride (the caller is about to gather what it will claim, then Ride): until done is called, a
// result call that would go out without a ride waits up to rideWait for it. Without it, under load, a worker's
// result call would leave while its poller gathers the slots that the previous call freed, and the claim would
// wait for that call instead of riding in it. A value on wanted says that a result call is waiting for the ride:
// the caller should stop gathering and ride with what it has, since the slots it waits for may be held by the
// very results that wait (a value may be left from an earlier call: it only makes one claim smaller). done must be
// called once, when the ride is on its way or will not come.
func (c *Completer) Expect() (wanted <-chan struct{}, done func()) {
	c.expected.Add(1)
	var once sync.Once
	return c.wanted, func() {
		once.Do(func() {
			c.expected.Add(-1)
			select {
			case c.unexpect <- struct{}{}:
			default:
			}
		})
	}
}

// awaitRide waits for a ride announced by Expect: up to rideWait, until a ride comes, or until no ride is
// expected any more.
func (c *Completer) awaitRide() []*ride {
	select { // a stale wake from an earlier announcement
	case <-c.unexpect:
	default:
	}
	select {
	case c.wanted <- struct{}{}:
	default:
	}
	t := time.NewTimer(cmp.Or(c.cfg.RideWait, rideWait))
	defer t.Stop()
	for c.expected.Load() > 0 {
		select {
		case r := <-c.rides:
			return c.moreRides([]*ride{r})
		case <-c.unexpect:
		case <-t.C:
			return nil
		case <-c.stopped:
			return nil
		}
	}
	return c.moreRides(nil)
}

// loop gathers batches and records them, one call at a time unless a call stalls (stallAfter); rides go with the
// next call. It returns once the completer stops and the calls in flight have returned.
func (c *Completer) loop() {
	// Each call in flight owns one of these maps (splitRepeated's, kept across batches: cleared, not made again).
	free := make(chan map[taskKey]bool, maxInFlight)
	for range maxInFlight {
		free <- make(map[taskKey]bool)
	}
	var calls sync.WaitGroup
	defer calls.Wait()
	stallAt := c.stallAfter()
	stall := time.NewTimer(stallAt)
	defer stall.Stop()
	for {
		var seen map[taskKey]bool
		select {
		case seen = <-free:
		case <-c.stopped:
			return
		}
		var batch []*pending
		var rides []*ride
		select {
		case first := <-c.queue:
			batch = c.gather(first)
		case r := <-c.rides:
			rides = append(rides, r)
			batch = c.queued()
		case <-c.stopped:
			return
		}
		rides = c.moreRides(rides)
		if len(rides) == 0 && c.expected.Load() > 0 {
			rides = c.awaitRide()
		}
		done := make(chan struct{})
		calls.Go(func() {
			defer close(done)
			c.flush(batch, seen, rides)
			free <- seen
		})
		stall.Reset(stallAt)
		select {
		case <-done:
		case <-stall.C: // stalled: the next batch may go out beside it
		}
	}
}

// gather takes every completion queued now after first. While other tasks are still running (a burst of handlers
// that started together tends to finish together), it waits up to linger for more, so a burst is not split into a
// lone first completion and the rest.
func (c *Completer) gather(first *pending) []*pending {
	batch := []*pending{first}
	var deadline <-chan time.Time
	for len(batch) < maxBatch {
		select {
		case p := <-c.queue:
			batch = append(batch, p)
			continue
		default:
		}
		if c.cfg.InFlight == nil || c.cfg.InFlight() <= int64(len(batch)) {
			return batch
		}
		if deadline == nil {
			t := time.NewTimer(linger)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case p := <-c.queue:
			batch = append(batch, p)
		case <-deadline:
			return batch
		case <-c.stopped:
			return batch
		}
	}
	return batch
}

func (c *Completer) stallAfter() time.Duration {
	if c.cfg.StallAfter > 0 {
		return c.cfg.StallAfter
	}
	return stallAfter
}

// queued takes the completions queued now, without waiting for more (a ride does not wait for a burst).
func (c *Completer) queued() []*pending { return takeReady(c.queue, nil, maxBatch) }

// moreRides adds the rides waiting now to rides.
func (c *Completer) moreRides(rides []*ride) []*ride { return takeReady(c.rides, rides, maxRides) }

// takeReady appends to into what ch holds now, without waiting, until into holds limit values.
func takeReady[T any](ch <-chan T, into []T, limit int) []T {
	for len(into) < limit {
		select {
		case v := <-ch:
			into = append(into, v)
		default:
			return into
		}
	}
	return into
}

// flush records a batch and hands every task its outcome, in one call with rides when there are some. A batch
// never names one task twice (two attempts of a task finishing together): the second goes into a batch of its
// own.
func (c *Completer) flush(batch []*pending, seen map[taskKey]bool, rides []*ride) {
	batch, again := splitRepeated(batch, seen)
	defer func() {
		if len(again) > 0 {
			c.flush(again, seen, nil)
		}
	}()
	if len(rides) > 0 && c.flushWithRides(batch, rides) {
		return
	}
	if len(batch) == 0 {
		return
	}
	if len(batch) == 1 {
		c.oneByOne(batch)
		return
	}
	results := taskResults(batch)
	var done []sqlapi.CompletedTask
	var notes sqlapi.Notifications
	err := c.retry(c.cfg.Logger, "complete_tasks", func(ctx context.Context) (err error) {
		done, notes, err = sqlapi.CompleteTasksDeferred(ctx, c.cfg.DB, results)
		return err
	})
	if err != nil {
		c.cfg.Logger.Warn("the database refused a batch of results; recording them one task at a time",
			"tasks", len(batch), "error", err)
		c.oneByOne(batch)
		return
	}
	c.settleRecorded(batch, done, notes)
}

// settleRecorded sends what a committed result call deferred and hands every task of its batch its outcome.
func (c *Completer) settleRecorded(batch []*pending, done []sqlapi.CompletedTask, notes sqlapi.Notifications) {
	c.sendNotifications(c.cfg.Logger, notes)
	for i, p := range batch {
		p.settle.Settle(c.completionOutcome(p.log, p.meta, done[i]))
	}
}

// flushWithRides records batch (possibly empty) and runs rides in one call, once: it reports false when the
// results were not recorded, after handing each ride the error; batch is then still to be recorded (the caller
// retries it alone, so a result the database refuses is failed on its own and never costs the rides more than this
// call). A batch with a task of a map step commits before its rides run (sqlapi.CompleteTasksWith's commitFirst);
// a ride that fails after that commit is handed its own error, and the results are settled.
func (c *Completer) flushWithRides(batch []*pending, rides []*ride) bool {
	err := c.cfg.Calls.Err()
	rideErr := err // what the rides get
	var done []sqlapi.CompletedTask
	var notes sqlapi.Notifications
	if err == nil {
		done, notes, rideErr, err = sqlapi.CompleteTasksWith(c.cfg.Calls, c.cfg.DB, taskResults(batch), func(b *pgx.Batch) {
			for _, r := range rides {
				r.queue(b)
			}
		}, hasMapTask(batch))
	}
	for _, r := range rides {
		r.done <- rideErr
	}
	if err != nil {
		return false
	}
	c.settleRecorded(batch, done, notes)
	return true
}

// hasMapTask reports whether batch holds a task of a map step (an element index above 0): other workers then
// complete tasks of the same step state at the same time, and wait for this call's locks on it and on its run.
func hasMapTask(batch []*pending) bool {
	return slices.ContainsFunc(batch, func(p *pending) bool { return p.meta.TaskIndex > 0 })
}

func taskResults(batch []*pending) []sqlapi.TaskResult {
	results := make([]sqlapi.TaskResult, len(batch))
	for i, p := range batch {
		results[i] = sqlapi.TaskResult{RunID: p.meta.RunID, StepSlug: p.meta.StepSlug, TaskIndex: p.meta.TaskIndex,
			Output: p.out, Attempt: p.meta.Attempt}
	}
	return results
}

// sendNotifications delivers what a committed call deferred (sqlapi.Notifications: events and wake-ups sent after
// the commit, so that concurrent commits are not serialised by PostgreSQL's notification lock). A failure loses
// only notifications: listeners miss the events, workers find the tasks at their next periodic read.
func (c *Completer) sendNotifications(log *slog.Logger, notes sqlapi.Notifications) {
	if err := notes.Send(c.cfg.Calls, c.cfg.DB); err != nil {
		log.Warn("results recorded, but their notifications were not sent (listeners miss these events; workers find new tasks at their next periodic read)",
			"error", err)
	}
}

// taskKey names a task (not an attempt).
type taskKey struct {
	run, step string
	index     int
}

// splitRepeated keeps the first result of each task in batch and returns the others apart; seen is scratch space.
func splitRepeated(batch []*pending, seen map[taskKey]bool) (unique, again []*pending) {
	if len(batch) < 2 {
		return batch, nil
	}
	clear(seen)
	unique = batch[:0:0]
	for _, p := range batch {
		k := taskKey{p.meta.RunID, p.meta.StepSlug, p.meta.TaskIndex}
		if seen[k] {
			again = append(again, p)
			continue
		}
		seen[k] = true
		unique = append(unique, p)
	}
	return unique, again
}

// oneByOne records each result on its own: first every result the database accepts, then it fails the tasks
// whose output it refused, so that a refused task failing its run cannot keep the others from being recorded.
func (c *Completer) oneByOne(batch []*pending) {
	var refused []*pending
	var reasons []error
	for _, p := range batch {
		o, why := c.completeOne(p.log, p.meta, p.out)
		if why != nil {
			refused, reasons = append(refused, p), append(reasons, why)
			continue
		}
		p.settle.Settle(o)
	}
	for i, p := range refused {
		msg := fmt.Sprintf("flow %q, step %q: the database refused the handler's output: %s",
			p.meta.FlowSlug, p.meta.StepSlug, pgerr.Reason(reasons[i]))
		p.log.Warn("task output refused by the database; failing the task without retry", "error", msg)
		p.settle.Settle(c.Fail(p.log, p.meta, msg, true))
	}
}

// completeOne records one successful task; refused is the database's permanent refusal of the output, when it
// refused it (then nothing was recorded and the task is still to be failed).
func (c *Completer) completeOne(log *slog.Logger, meta taskrun.Meta, out json.RawMessage) (o observe.Outcome, refused error) {
	var done []sqlapi.CompletedTask
	var notes sqlapi.Notifications
	err := c.retry(log, "complete_tasks", func(ctx context.Context) (err error) {
		done, notes, err = sqlapi.CompleteTasksDeferred(ctx, c.cfg.DB, []sqlapi.TaskResult{{RunID: meta.RunID,
			StepSlug: meta.StepSlug, TaskIndex: meta.TaskIndex, Output: out, Attempt: meta.Attempt}})
		return err
	})
	c.sendNotifications(log, notes)
	switch {
	case err != nil && pgerr.Permanent(err) && !pgerr.Misconfigured(err):
		// Invalid data or a program limit (jsonb's size or nesting): a verdict on this output, not on the setup.
		return "", err
	case err != nil:
		c.logLost(log, "complete_tasks", err)
		return observe.Unreported, nil
	}
	return c.completionOutcome(log, meta, done[0]), nil
}

// completionOutcome turns what the database reported for one completion into the task's outcome, logging it.
func (c *Completer) completionOutcome(log *slog.Logger, meta taskrun.Meta, done sqlapi.CompletedTask) observe.Outcome {
	switch done.Outcome {
	case sqlapi.OutcomeRecorded:
		if done.Status == "failed" {
			log.Warn("task failed: the database refused its output (see the task's error_message)")
			return observe.Failed
		}
		return observe.Completed
	case sqlapi.OutcomeStale:
		c.Stale(log, meta, observe.StaleSuperseded, nil, 0)
		return observe.Stale
	default:
		if done.Status == TaskCancelled {
			log.Info("run cancelled: the task's result changes nothing", "outcome", done.Outcome)
			return observe.Cancelled
		}
		log.Info("task result not recorded: the task is no longer running (its run failed or its step finished)",
			"status", done.Status, "outcome", done.Outcome)
		return observe.NotRecorded
	}
}

// Fail records a failed attempt with pgflow.fail_task (permanent: no retry) and returns what became of the task.
func (c *Completer) Fail(log *slog.Logger, meta taskrun.Meta, msg string, permanent bool) observe.Outcome {
	return c.fail(log, meta, msg, permanent, nil)
}

// FailRetryAfter records a failed attempt whose handler asked for its retry after delay (pgflow.RetryAfter):
// pgflow.fail_task with retry_delay, which replaces the step's backoff (the attempt is spent all the same).
func (c *Completer) FailRetryAfter(log *slog.Logger, meta taskrun.Meta, msg string, delay time.Duration) observe.Outcome {
	return c.fail(log, meta, msg, false, &delay)
}

func (c *Completer) fail(log *slog.Logger, meta taskrun.Meta, msg string, permanent bool, retryDelay *time.Duration) observe.Outcome {
	msg = cleanErrorMessage(msg)
	var failed sqlapi.FailedTask
	var notes sqlapi.Notifications
	err := c.retry(log, "fail_task", func(ctx context.Context) (err error) {
		failed, notes, err = sqlapi.FailTaskAt(ctx, c.cfg.DB, ref(meta), msg, permanent, retryDelay)
		return err
	})
	c.sendNotifications(log, notes)
	switch {
	case err != nil:
		c.logLost(log, "fail_task", err)
		return observe.Unreported
	case failed.Outcome == sqlapi.OutcomeStale:
		c.Stale(log, meta, observe.StaleSuperseded, errors.New(msg), failed.CurrentAttempt)
		return observe.Stale
	case failed.Outcome != sqlapi.OutcomeRecorded && failed.Status == TaskCancelled:
		log.Info("run cancelled: the task's failure changes nothing", "outcome", failed.Outcome)
		return observe.Cancelled
	case failed.Outcome != sqlapi.OutcomeRecorded:
		log.Info("task failure not recorded: the task is no longer running (its run failed or its step finished)",
			"status", failed.Status, "outcome", failed.Outcome)
		return observe.NotRecorded
	case failed.Status == "queued" && retryDelay != nil:
		log.Info("task will be retried after the delay its handler asked for", "retry_after", *retryDelay)
		return observe.Retried
	case failed.Status == "queued":
		log.Info("task will be retried")
		return observe.Retried
	case permanent:
		log.Warn("task failed permanently: not retried", "error", msg)
		return observe.Failed
	default:
		log.Warn("task failed permanently: no attempts left", "error", msg)
		return observe.Failed
	}
}

// Release puts a task interrupted by a shutdown back in its queue without spending its attempt
// (pgflow.release_tasks); why says what interrupted it.
func (c *Completer) Release(log *slog.Logger, meta taskrun.Meta, why string) observe.Outcome {
	ctx, cancel := context.WithTimeout(c.cfg.Base, releaseTimeout)
	defer cancel()
	var released []bool
	err := pgerr.Retry(ctx, c.cfg.Retry, nil, func(ctx context.Context) (err error) {
		released, err = sqlapi.ReleaseTasks(ctx, c.cfg.DB, []sqlapi.TaskRef{ref(meta)})
		return err
	})
	switch {
	case err != nil:
		log.Error("could not put the interrupted task back in the queue; stalled-task recovery will requeue it", "error", err)
		return observe.Unreported
	case released[0]:
		log.Info("task put back in the queue without spending its attempt: " + why)
		return observe.Released
	default:
		log.Info("task not released: this attempt is no longer running (its run or step finished, or it was recovered)")
		return observe.NotRecorded
	}
}

// Stale logs a result that is not recorded because its attempt is no longer current, and reports it to the
// hooks: the task's identity only, never the output.
func (c *Completer) Stale(log *slog.Logger, meta taskrun.Meta, reason string, handlerErr error, current int) {
	args := []any{"reason", reason}
	if current > 0 {
		args = append(args, "current_attempt", current)
	}
	if handlerErr != nil {
		args = append(args, "handler_failed", true)
	}
	switch reason {
	case observe.StaleTimedOut:
		log.Warn("stale result dropped: the handler returned after its step timeout had already failed this attempt", args...)
	default:
		log.Warn("stale result not recorded: this attempt is no longer the task's current attempt "+
			"(the task was recovered and claimed again)", args...)
	}
	c.cfg.Observer.Stale(meta, reason, handlerErr, current)
}

// retry runs a report until it succeeds: transient errors are retried with backoff until the hard stop, after
// which one more attempt is made; other errors are returned at once.
func (c *Completer) retry(log *slog.Logger, call string, fn func(context.Context) error) error {
	return pgerr.Retry(c.cfg.HardStop, c.cfg.Retry, func(n int, delay time.Duration, err error) {
		log.Warn("reporting the task's result failed, retrying", "call", "pgflow."+call, "retry", n, "delay", delay, "error", err)
	}, func(context.Context) error {
		if c.cfg.Calls.Err() != nil {
			return c.cfg.Calls.Err()
		}
		return fn(c.cfg.Calls)
	})
}

func (c *Completer) logLost(log *slog.Logger, call string, err error) {
	log.Error("could not report the task's result; the task stays started until stalled-task recovery requeues it",
		"call", "pgflow."+call, "error", err)
}

// cleanErrorMessage makes msg storable as text: valid UTF-8, no NUL characters, bounded length.
func cleanErrorMessage(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	msg = strings.ReplaceAll(msg, "\x00", `\x00`)
	if len(msg) > maxErrorMessageLen {
		cut := maxErrorMessageLen
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + " … (truncated)"
	}
	if msg == "" {
		msg = "handler failed without an error message"
	}
	return msg
}
