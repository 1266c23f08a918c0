package pgflow

// Read-only views of a pgflow database for monitoring (the pgflowprom database collector, status pages): the
// flows with their steps and run counts, the PGMQ queues' depths and the registered workers. Plain selects: a
// read-only role suffices.

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// FlowInfo is one flow stored in the database, with its steps and how many of its runs are in each status.
type FlowInfo struct {
	Slug        string
	MaxAttempts int           // the flow's attempts per task (its steps' default)
	BaseDelay   time.Duration // the flow's base retry delay (its steps' default)
	Timeout     time.Duration // the flow's task timeout (its steps' default)
	CreatedAt   time.Time
	// QueuePerStep is true for a flow defined with QueuePerStep: each step has a queue of its own
	// (StepInfo.Queue); otherwise all steps share the flow's queue.
	QueuePerStep bool
	// DeleteTaskMessages is true for a flow whose task messages are deleted when a worker claims them
	// (DeleteTaskMessages) instead of archived when the task finishes.
	DeleteTaskMessages bool
	Steps              []StepInfo // in definition order
	Runs               RunCounts
}

// StepInfo is one step of a stored flow.
type StepInfo struct {
	Slug      string
	Type      string   // "single" or "map"
	DependsOn []string // the slugs of its dependencies, in definition order
	Queue     string   // the PGMQ queue its tasks' messages go to
}

// RunCounts counts the runs of a flow in each run status. Started counts the runs still in progress.
type RunCounts struct {
	Started   int64
	Completed int64
	Failed    int64
	Cancelled int64
}

// QueueInfo is the depth of one PGMQ queue, as pgmq.metrics reports it.
type QueueInfo struct {
	Name             string
	Length           int64         // messages in the queue, visible or not
	Visible          int64         // messages a reader could take now
	Sent             int64         // messages ever sent to the queue
	OldestMessageAge time.Duration // age of the oldest message; 0 when the queue is empty
	// Err is set when this queue's metrics could not be read (the counts are then zero); the other queues are
	// still reported.
	Err error
}

// WorkerInfo is one worker row of pgflow.workers (a worker has one per flow it serves).
type WorkerInfo struct {
	ID           string
	Queue        string // the queue it reads
	FunctionName string
	StartedAt    time.Time
	// LastHeartbeatAt is the worker's last heartbeat; HeartbeatAge is its age by the database clock.
	LastHeartbeatAt time.Time
	HeartbeatAge    time.Duration
	DeprecatedAt    *time.Time // set when the worker was told to stop (it finishes its tasks first)
	StoppedAt       *time.Time // set when the worker stopped cleanly
	// ListensAt is since when the worker has listened on its own notification channel, nil when it does not (a
	// PollOnly worker, one whose LISTEN connection is down, pgflow's TypeScript worker). The schema wakes only
	// listening workers alone; see docs/performance.md ("Targeted wake").
	ListensAt *time.Time
	// ListenerPID is the server process id of the database session it listens in (pg_stat_activity.pid), 0 when
	// it does not listen. A worker's heartbeat forgets the sessions of its queue's other workers that ended.
	ListenerPID  uint32
	RunningTasks int64 // its tasks with status started
}

// ListFlows returns every flow in the database, in slug order, with its steps and its run counts. Counting runs
// scans pgflow.runs.
func (c *Client) ListFlows(ctx context.Context) ([]FlowInfo, error) {
	if err := c.checkSchema(ctx, c.pool); err != nil {
		return nil, fmt.Errorf("pgflow: list flows: %w", err)
	}
	rows, err := sqlapi.ListFlows(ctx, c.pool, sqlapi.ListFlowsParams{})
	if err != nil {
		return nil, fmt.Errorf("pgflow: list flows: %w", err)
	}
	out := make([]FlowInfo, len(rows))
	for i, f := range rows {
		steps := make([]StepInfo, len(f.Steps))
		for j, s := range f.Steps {
			steps[j] = StepInfo{Slug: s.StepSlug, Type: s.StepType, DependsOn: s.Deps}
			if s.Deps == nil {
				steps[j].DependsOn = []string{}
			}
			if s.QueueName != nil {
				steps[j].Queue = *s.QueueName
			}
		}
		out[i] = FlowInfo{
			Slug:               f.FlowSlug,
			MaxAttempts:        f.MaxAttempts,
			BaseDelay:          time.Duration(f.BaseDelay) * time.Second,
			Timeout:            time.Duration(f.Timeout) * time.Second,
			CreatedAt:          f.CreatedAt,
			QueuePerStep:       f.QueueMode == queueModeStep,
			DeleteTaskMessages: f.MessageRetention == messageRetentionDelete,
			Steps:              steps,
			Runs: RunCounts{Started: f.Runs.Started, Completed: f.Runs.Completed, Failed: f.Runs.Failed,
				Cancelled: f.Runs.Cancelled},
		}
	}
	return out, nil
}

// ListQueues returns the depth of every PGMQ queue of the database (pgmq.list_queues, which includes queues that
// are not pgflow's), in name order. A queue whose metrics cannot be read is reported with Err set rather than
// failing the call; only an error listing the queues, or the end of ctx, fails it.
func (c *Client) ListQueues(ctx context.Context) ([]QueueInfo, error) {
	if err := c.checkSchema(ctx, c.pool); err != nil {
		return nil, fmt.Errorf("pgflow: list queues: %w", err)
	}
	m, err := sqlapi.ListQueueMetrics(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("pgflow: list queues: %w", err)
	}
	out := make([]QueueInfo, 0, len(m))
	for name, q := range m {
		info := QueueInfo{Name: name, Length: q.Length, Visible: q.Visible, Sent: q.Total}
		if q.OldestAgeSec != nil {
			info.OldestMessageAge = time.Duration(*q.OldestAgeSec) * time.Second
		}
		if q.Err != nil {
			info.Err = fmt.Errorf("pgflow: %w", q.Err)
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ListWorkers returns the worker rows whose last heartbeat is at most since old (since <= 0: all of them), the
// ones not stopped first, then by the most recent heartbeat.
func (c *Client) ListWorkers(ctx context.Context, since time.Duration) ([]WorkerInfo, error) {
	if err := c.checkSchema(ctx, c.pool); err != nil {
		return nil, fmt.Errorf("pgflow: list workers: %w", err)
	}
	rows, err := sqlapi.ListWorkers(ctx, c.pool, since)
	if err != nil {
		return nil, fmt.Errorf("pgflow: list workers: %w", err)
	}
	out := make([]WorkerInfo, len(rows))
	for i, w := range rows {
		out[i] = WorkerInfo{
			ID:              w.WorkerID,
			Queue:           w.QueueName,
			FunctionName:    w.FunctionName,
			StartedAt:       w.StartedAt,
			LastHeartbeatAt: w.LastHeartbeatAt,
			HeartbeatAge:    w.HeartbeatAge,
			DeprecatedAt:    w.DeprecatedAt,
			StoppedAt:       w.StoppedAt,
			ListensAt:       w.ListensAt,
			ListenerPID:     w.ListenerPID,
			RunningTasks:    w.RunningTasks,
		}
	}
	return out, nil
}
