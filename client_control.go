package pgflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// CancelRunOpts are the options of Client.CancelRun. A nil *CancelRunOpts means the defaults.
type CancelRunOpts struct {
	// Reason is recorded with the run (Run.CancelReason) and shown by the CLI and the dashboard; "" records none.
	Reason string
}

// RetryRunOpts are the options of Client.RetryRun. A nil *RetryRunOpts means the defaults.
type RetryRunOpts struct {
	// Fresh starts a new run of the same flow with the same input instead of resuming the run in place; the new run
	// names the original in Run.RetryOf. The original run is left as it is.
	Fresh bool
}

// CancelRun cancels a started run and returns it as it is afterwards (status RunCancelled). In one transaction
// the database stops the run: no further step starts, its unfinished steps are skipped (SkipReason
// "run_cancelled") and its unfinished tasks cancelled, their queued messages archived, and the results of tasks
// still running are fenced: whatever their handlers return later changes nothing. Workers that listen for queue
// notifications (the default) cancel the context of those handlers at once, with a *RunCancelledError as its
// cause (context.Cause); a worker in poll-only mode finds out when its handler reports. Subscribe delivers
// EventRunCancelled and ends, WaitRun returns the run, and Run.Err is a *RunCancelledError.
//
// An unknown run gives ErrRunNotFound; a run that is already completed, failed or cancelled gives ErrRunFinished
// (nothing changes; the error names the status).
func (c *Client) CancelRun(ctx context.Context, runID string, opts *CancelRunOpts) (*Run, error) {
	id, err := canonicalRunID(runID)
	if err != nil {
		return nil, fmt.Errorf("pgflow: cancel run: %w", err)
	}
	var reason string
	if opts != nil {
		reason = opts.Reason
	}
	if err := c.checkSchema(ctx, c.pool); err != nil {
		return nil, fmt.Errorf("pgflow: cancel run %s: %w", id, err)
	}
	if _, err := sqlapi.CancelRun(ctx, c.pool, id, reason); err != nil {
		return nil, controlError("cancel", id, err)
	}
	return c.getRun(ctx, id)
}

// RetryRun runs a failed or cancelled run again and returns the run that now runs.
//
// By default it resumes the run in place: the run returns to RunStarted, completed steps keep their outputs and
// are not run again (their dependents see the stored outputs), and the steps that failed, were skipped because the
// run failed or was cancelled, or never ran get fresh attempts. Workers pick the ready steps up as usual. Two
// concurrent retries of one run resume it once: the other gets ErrRunFinished.
//
// With opts.Fresh it starts a new run of the same flow (as compiled now) with the same input instead, linked to
// the original by Run.RetryOf, and returns the new run; the original stays as it is (and may be retried again).
//
// Either way the run must be failed or cancelled: an unknown run gives ErrRunNotFound, a run that is started or
// completed gives ErrRunFinished naming its status (nothing changes).
func (c *Client) RetryRun(ctx context.Context, runID string, opts *RetryRunOpts) (*Run, error) {
	id, err := canonicalRunID(runID)
	if err != nil {
		return nil, fmt.Errorf("pgflow: retry run: %w", err)
	}
	fresh := opts != nil && opts.Fresh
	if err := c.checkSchema(ctx, c.pool); err != nil {
		return nil, fmt.Errorf("pgflow: retry run %s: %w", id, err)
	}
	r, err := sqlapi.RetryRun(ctx, c.pool, id, fresh)
	if err != nil {
		verb := "retry"
		if fresh {
			verb = "retry (fresh)"
		}
		return nil, controlError(verb, id, err)
	}
	return c.getRun(ctx, r.RunID)
}

// controlError turns the database's answer to cancel_run or retry_run into the client's error: it names the run
// and says what to do.
func controlError(verb, id string, err error) error {
	switch {
	case sqlapi.IsRunMissing(err):
		return fmt.Errorf("pgflow: %s run %s: %w (check the id: pgflow runs list)", verb, id, ErrRunNotFound)
	case sqlapi.IsRunFinished(err):
		hint := "nothing was changed"
		if strings.HasPrefix(verb, "retry") {
			hint = "nothing was changed; only a failed or cancelled run can be retried: to run a completed run's input again, start a new run with it"
		}
		return fmt.Errorf("pgflow: %s run %s: %w: %s (%s)", verb, id, ErrRunFinished, sqlapi.ErrorMessage(err), hint)
	case sqlapi.IsInvalidRunID(err):
		return fmt.Errorf("pgflow: %s run %s: %w: %w", verb, id, ErrInvalidRunID, err)
	}
	return fmt.Errorf("pgflow: %s run %s: %w", verb, id, err)
}

// DefaultWorkerAliveWithin is how recent a worker's last heartbeat must be for RunHealth (and WaitRun's warnings)
// to count it as alive: six of the workers' default heartbeat intervals.
const DefaultWorkerAliveWithin = 6 * DefaultHeartbeatInterval

// RunHealthOpts are the options of Client.RunHealth. A nil *RunHealthOpts means the defaults.
type RunHealthOpts struct {
	// AliveWithin is how recent a worker's last heartbeat must be for it to count as alive. Default:
	// DefaultWorkerAliveWithin (30 s); raise it for workers with a longer WorkerConfig.HeartbeatInterval.
	AliveWithin time.Duration
}

// RunHealth says whether anything can make progress on a run, and if not, why. It is what WaitRun warns about and
// what the CLI and the dashboard show.
type RunHealth struct {
	RunID  string
	Status RunStatus
	// CheckedAt is the database's time of the check.
	CheckedAt time.Time
	// Queues lists every queue that holds queued or started tasks of the run.
	Queues []RunQueue
	// StalledTasks are started tasks past their step timeout: their worker is gone (or their handler ignores the
	// timeout), and they wait for stalled-task recovery, which requeues them at RecoveryAt (if a worker with
	// maintenance enabled runs).
	StalledTasks []StalledTask
}

// RunQueue is one queue a run waits on.
type RunQueue struct {
	Name         string
	QueuedTasks  int // tasks of the run waiting for a worker
	StartedTasks int // tasks of the run a worker claimed
	// AliveWorkers counts the worker rows serving the queue that are not stopped or stopping and whose last
	// heartbeat is within RunHealthOpts.AliveWithin.
	AliveWorkers int
	// LastHeartbeatAt is the latest heartbeat of any worker that ever served the queue; nil when none registered.
	LastHeartbeatAt *time.Time
}

// StalledTask is a started task of a run that outlived its step timeout.
type StalledTask struct {
	StepSlug  string
	TaskIndex int
	Attempt   int
	StartedAt time.Time
	Timeout   time.Duration
	// WorkerID is the worker that claimed it ("" when unknown).
	WorkerID string
	// Requeued counts earlier recoveries; after 3 the next one fails the task instead.
	Requeued int
	// RecoveryAt is when stalled-task recovery takes it back: StartedAt + Timeout + 30 s.
	RecoveryAt time.Time
}

// WaitingWithoutWorkers returns the queues holding tasks of the run that no alive worker serves: nothing will run
// them until a worker for the queue starts. Nil for a run that is not started.
func (h *RunHealth) WaitingWithoutWorkers() []RunQueue {
	if h.Status != RunStarted {
		return nil
	}
	var out []RunQueue
	for _, q := range h.Queues {
		if q.AliveWorkers == 0 {
			out = append(out, q)
		}
	}
	return out
}

// OK reports whether nothing is wrong: the run is finished, or every queue it waits on has an alive worker and no
// task of it is stalled.
func (h *RunHealth) OK() bool { return len(h.Problems()) == 0 }

// Problems describes, one sentence each, why the run cannot make progress on its own; nil when nothing is wrong.
func (h *RunHealth) Problems() []string {
	if h.Status != RunStarted {
		return nil
	}
	var out []string
	for _, q := range h.WaitingWithoutWorkers() {
		seen := "no worker ever served it"
		if q.LastHeartbeatAt != nil {
			seen = fmt.Sprintf("the last worker heartbeat was %s ago", h.CheckedAt.Sub(*q.LastHeartbeatAt).Round(time.Second))
		}
		out = append(out, fmt.Sprintf("queue %q holds %d queued and %d started task(s) of run %s but no alive worker serves it (%s): start a worker for its flow (with per-step queues, for that step)",
			q.Name, q.QueuedTasks, q.StartedTasks, h.RunID, seen))
	}
	for _, t := range h.StalledTasks {
		out = append(out, fmt.Sprintf("task %d of step %q (attempt %d) started %s ago and outlived its timeout of %s: it waits for stalled-task recovery at %s",
			t.TaskIndex, t.StepSlug, t.Attempt, h.CheckedAt.Sub(t.StartedAt).Round(time.Second), t.Timeout,
			t.RecoveryAt.Format(time.RFC3339)))
	}
	return out
}

// RunHealth reads what a run waits on: the queues of its queued and started tasks with the alive workers serving
// them, and its tasks stalled past their step timeout. It changes nothing. An unknown run gives ErrRunNotFound.
// The client's role needs SELECT on the pgflow tables (runs, step_tasks, steps, flows, workers).
func (c *Client) RunHealth(ctx context.Context, runID string, opts *RunHealthOpts) (*RunHealth, error) {
	id, err := canonicalRunID(runID)
	if err != nil {
		return nil, fmt.Errorf("pgflow: run health: %w", err)
	}
	alive := DefaultWorkerAliveWithin
	if opts != nil && opts.AliveWithin != 0 {
		if opts.AliveWithin < 0 {
			return nil, fmt.Errorf("pgflow: run health of run %s: RunHealthOpts.AliveWithin = %s: must be positive (0 means %s)",
				id, opts.AliveWithin, DefaultWorkerAliveWithin)
		}
		alive = opts.AliveWithin
	}
	if err := c.checkSchema(ctx, c.pool); err != nil {
		return nil, fmt.Errorf("pgflow: run health of run %s: %w", id, err)
	}
	row, err := sqlapi.GetRunHealth(ctx, c.pool, id, alive)
	if err != nil {
		return nil, fmt.Errorf("pgflow: run health of run %s: %w", id, err)
	}
	if row == nil {
		return nil, fmt.Errorf("pgflow: run health of run %s: %w", id, ErrRunNotFound)
	}
	h := &RunHealth{RunID: id, Status: RunStatus(row.Status), CheckedAt: row.Now}
	for _, q := range row.Queues {
		h.Queues = append(h.Queues, RunQueue{Name: q.Queue, QueuedTasks: q.Queued, StartedTasks: q.Started,
			AliveWorkers: q.AliveWorkers, LastHeartbeatAt: q.LastSeen})
	}
	for _, s := range row.Stalled {
		t := StalledTask{StepSlug: s.StepSlug, TaskIndex: s.TaskIndex, Attempt: s.Attempt, StartedAt: s.StartedAt,
			Timeout: time.Duration(s.TimeoutSeconds) * time.Second, Requeued: s.RequeuedCount}
		if s.WorkerID != nil {
			t.WorkerID = *s.WorkerID
		}
		t.RecoveryAt = t.StartedAt.Add(t.Timeout + 30*time.Second)
		h.StalledTasks = append(h.StalledTasks, t)
	}
	return h, nil
}

// healthInterval is how often WaitRun checks what a run waits on.
const healthInterval = 5 * time.Second

// healthWatch is WaitRun's "nothing waits silently" check: it logs a warning when the run waits on a queue no
// alive worker serves, or on a task stalled past its timeout; once per wait, then again only when the situation
// changes (and an info line when it resolves).
type healthWatch struct {
	c     *Client
	id    string
	next  time.Time
	last  string // the problems last logged, joined; "" when none
	noted bool   // a failed check was logged
}

func (h *healthWatch) check(ctx context.Context) {
	if time.Now().Before(h.next) {
		return
	}
	h.next = time.Now().Add(max(healthInterval, h.c.pollInterval))
	health, err := h.c.RunHealth(ctx, h.id, nil)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrRunNotFound) && !h.noted {
			h.noted = true
			h.c.log.Debug("wait run: cannot check whether workers serve the run", "run_id", h.id, "error", err)
		}
		return
	}
	// The key names what is wrong, not for how long, so a wait logs a situation once.
	var keys []string
	for _, q := range health.WaitingWithoutWorkers() {
		keys = append(keys, "queue "+q.Name)
	}
	for _, t := range health.StalledTasks {
		keys = append(keys, fmt.Sprintf("stalled %s/%d/%d", t.StepSlug, t.TaskIndex, t.Attempt))
	}
	if health.Status != RunStarted {
		keys = nil
	}
	slices.Sort(keys)
	key := strings.Join(keys, "\n")
	if key == h.last {
		return
	}
	if key == "" {
		h.c.log.Info("wait run: the run can make progress again", "run_id", h.id)
	} else {
		for _, p := range health.Problems() {
			h.c.log.Warn("wait run: "+p, "run_id", h.id)
		}
	}
	h.last = key
}
