package pgflow

import (
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgflow-go/pgflow/internal/backoff"
	"github.com/pgflow-go/pgflow/internal/pgerr"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

const (
	// maxCompletionBatch bounds the completions recorded in one pgflow.complete_tasks call.
	maxCompletionBatch = 256
	// completionFlushers is the number of batches that may be in flight at once. While they are busy, new
	// completions queue up and go out together in the next batch, so batches grow with the load and a lone
	// completion never waits for company.
	completionFlushers = 2
	// completionLinger is how long a flusher waits for more completions while other tasks are still running.
	completionLinger = time.Millisecond
)

// completionBatcher records the results of successful handlers. Handlers hand their output over and wait for
// the outcome; flushers take everything queued (up to maxCompletionBatch) and record it with one
// pgflow.complete_tasks call, which is one transaction and one commit for the whole batch. Each task's result is
// still recorded by the same SQL logic as a single pgflow.complete_task call, fenced by the attempt that produced
// it, and a handler learns its own task's outcome. When the batch call fails with an error retrying cannot fix
// (for example one output the database refuses), every task of the batch is recorded on its own: the others
// first, then the refused ones are failed without retry with the database's reason, so one bad result never
// loses or delays the others. A batch never names one task twice (two attempts of a task finishing together):
// the second goes in a batch of its own. A database without pgflow.complete_tasks (schema older than v0.18.0) is detected once and
// then served one task at a time. Nothing is acknowledged before it is committed: a crash loses only results
// that were not recorded, and their tasks are redone after stalled-task recovery, as without batching.
type completionBatcher struct {
	r           *workerRun
	queue       chan *pendingCompletion
	stopped     chan struct{}
	wg          sync.WaitGroup
	unsupported atomic.Bool // pgflow.complete_tasks is missing: record one task at a time
	stopOnce    sync.Once
}

type pendingCompletion struct {
	log  *slog.Logger
	t    claimedTask
	out  json.RawMessage
	done chan TaskOutcome
}

func newCompletionBatcher(r *workerRun) *completionBatcher {
	b := &completionBatcher{r: r, queue: make(chan *pendingCompletion, r.cfg.MaxConcurrent), stopped: make(chan struct{})}
	b.unsupported.Store(!r.w.batching)
	for range completionFlushers {
		b.wg.Go(b.loop)
	}
	return b
}

// stop ends the flushers once no handler is waiting any more (after the drain). A handler that finishes later
// (one that ignored its context and was abandoned) gets OutcomeUnreported.
func (b *completionBatcher) stop() {
	b.stopOnce.Do(func() { close(b.stopped) })
	b.wg.Wait()
}

// complete queues one successful result and waits for its outcome.
func (b *completionBatcher) complete(log *slog.Logger, t claimedTask, out json.RawMessage) TaskOutcome {
	p := &pendingCompletion{log: log, t: t, out: out, done: make(chan TaskOutcome, 1)}
	select {
	case b.queue <- p:
	case <-b.stopped:
		b.r.logReportLost(log, "complete_task", errors.New("the worker stopped reporting results"))
		return OutcomeUnreported
	}
	select {
	case o := <-p.done:
		return o
	case <-b.stopped:
		select {
		case o := <-p.done:
			return o
		default:
		}
		b.r.logReportLost(log, "complete_task", errors.New("the worker stopped reporting results"))
		return OutcomeUnreported
	}
}

func (b *completionBatcher) loop() {
	for {
		var first *pendingCompletion
		select {
		case first = <-b.queue:
		case <-b.stopped:
			return
		}
		batch := b.gather(first)
		b.flush(batch)
	}
}

// gather takes every completion queued now after first. While other tasks of this worker are still running (a
// burst of handlers that started together tends to finish together), it waits up to completionLinger for more,
// so a burst is not split into a lone first completion and the rest.
func (b *completionBatcher) gather(first *pendingCompletion) []*pendingCompletion {
	batch := []*pendingCompletion{first}
	var deadline <-chan time.Time
	for len(batch) < maxCompletionBatch {
		select {
		case p := <-b.queue:
			batch = append(batch, p)
			continue
		default:
		}
		if b.r.inFlight.Load() <= int64(len(batch)) {
			return batch
		}
		if deadline == nil {
			t := time.NewTimer(completionLinger)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case p := <-b.queue:
			batch = append(batch, p)
		case <-deadline:
			return batch
		case <-b.stopped:
			return batch
		}
	}
	return batch
}

// flush records a batch and hands every task its outcome.
func (b *completionBatcher) flush(batch []*pendingCompletion) {
	batch, again := splitRepeatedTasks(batch)
	defer func() {
		if len(again) > 0 {
			b.flush(again)
		}
	}()
	if len(batch) == 1 || b.unsupported.Load() {
		b.oneByOne(batch)
		return
	}
	results := make([]sqlapi.TaskResult, len(batch))
	for i, p := range batch {
		results[i] = sqlapi.TaskResult{RunID: p.t.RunID, StepSlug: p.t.StepSlug, TaskIndex: p.t.TaskIndex, Output: p.out, Attempt: p.t.Attempt}
	}
	done, err := b.record(results)
	if err != nil {
		if pgerr.Code(err) == "42883" && !b.r.w.fencing { // undefined function: schema before v0.18.0
			if b.unsupported.CompareAndSwap(false, true) {
				b.r.log.Info("pgflow.complete_tasks is not installed (schema before v0.18.0): recording results one task at a time; run `pgflow migrate up` to batch them")
			}
		} else {
			b.r.log.Warn("the database refused a batch of results; recording them one task at a time", "tasks", len(batch), "error", err)
		}
		b.oneByOne(batch)
		return
	}
	for i, p := range batch {
		p.done <- b.r.completionOutcome(p.log, p.t, done[i])
	}
}

// splitRepeatedTasks keeps the first result of each task in batch and returns the others apart.
func splitRepeatedTasks(batch []*pendingCompletion) (unique, again []*pendingCompletion) {
	if len(batch) < 2 {
		return batch, nil
	}
	type key struct {
		run, step string
		index     int
	}
	seen := make(map[key]bool, len(batch))
	unique = batch[:0:0]
	for _, p := range batch {
		k := key{p.t.RunID, p.t.StepSlug, p.t.TaskIndex}
		if seen[k] {
			again = append(again, p)
			continue
		}
		seen[k] = true
		unique = append(unique, p)
	}
	return unique, again
}

// record calls pgflow.complete_tasks until it succeeds. Transient errors are retried with backoff until the
// hard stop (as single reports are); any other error is returned at once, and then nothing was recorded.
func (b *completionBatcher) record(results []sqlapi.TaskResult) ([]sqlapi.CompletedTask, error) {
	r := b.r
	for n := 1; ; n++ {
		done, err := sqlapi.CompleteTasks(r.reportCtx, r.w.pool, results, r.w.fencing)
		if err == nil {
			return done, nil
		}
		if !pgerr.Transient(err) || r.handlerCtx.Err() != nil || r.reportCtx.Err() != nil {
			return nil, err
		}
		delay := r.w.hooks.retry.Delay(n)
		r.log.Warn("recording a batch of task results failed, retrying", "call", "pgflow.complete_tasks",
			"tasks", len(results), "retry", n, "delay", delay, "error", err)
		_ = backoff.Sleep(r.handlerCtx, delay) // at the hard stop: one last attempt
	}
}

// oneByOne records each result on its own: first every result the database accepts, then it fails the tasks
// whose output it refused, so that a refused task failing its run cannot keep the others from being recorded.
func (b *completionBatcher) oneByOne(batch []*pendingCompletion) {
	var refused []*pendingCompletion
	var reasons []error
	for _, p := range batch {
		o, why := b.r.tryComplete(p.log, p.t, p.out)
		if why != nil {
			refused, reasons = append(refused, p), append(reasons, why)
			continue
		}
		p.done <- o
	}
	for i, p := range refused {
		p.done <- b.r.refuseOutput(p.log, p.t, reasons[i])
	}
}
