package main

// Nothing waits silently: what a started run waits on that will not come by itself — a queue that no alive
// worker serves, a task that outlived its timeout and waits for stalled-task recovery (Client.RunHealth).

import (
	"context"
	"fmt"
	"time"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// healthNote is one thing a started run waits on that needs someone's attention.
type healthNote struct {
	Kind   string `json:"kind"`            // no_worker | stalled_task
	Queue  string `json:"queue,omitempty"` // no_worker
	Step   string `json:"step_slug,omitempty"`
	Task   *int   `json:"task_index,omitempty"` // stalled_task
	Worker string `json:"worker_id,omitempty"`  // stalled_task: the worker that claimed it, when known
	Text   string `json:"text"`
}

// runHealth returns the notes for run d (none unless it is started), from Client.RunHealth.
func runHealth(ctx context.Context, client *pgflow.Client, d *sqlapi.RunDetail) ([]healthNote, error) {
	if d.Run.Status != "started" {
		return nil, nil
	}
	h, err := client.RunHealth(ctx, d.Run.RunID, nil)
	if err != nil {
		return nil, withSchemaHint(err)
	}
	var notes []healthNote
	for _, q := range h.WaitingWithoutWorkers() {
		seen := "no worker ever served it"
		if q.LastHeartbeatAt != nil {
			seen = "the last worker heartbeat was " + formatDuration(h.CheckedAt.Sub(*q.LastHeartbeatAt)) + " ago"
		}
		notes = append(notes, healthNote{Kind: "no_worker", Queue: q.Name, Text: fmt.Sprintf(
			"no alive worker serves queue %q, which this run waits on (%d queued, %d started %s; %s): start a "+
				"worker of flow %q ('pgflow workers' lists the workers)", q.Name, q.QueuedTasks, q.StartedTasks,
			plural(q.QueuedTasks+q.StartedTasks, "task", "tasks"), seen, d.Run.FlowSlug)})
	}
	for _, t := range h.StalledTasks {
		idx := t.TaskIndex
		worker := ""
		if t.WorkerID != "" {
			worker = " on worker " + t.WorkerID
		}
		notes = append(notes, healthNote{Kind: "stalled_task", Step: t.StepSlug, Task: &idx, Worker: t.WorkerID,
			Text: fmt.Sprintf("task %d of step %q waits for stalled-task recovery: attempt %d started %s ago%s and "+
				"outlived its timeout of %s; a worker requeues it from %s", idx, t.StepSlug, t.Attempt,
				formatDuration(h.CheckedAt.Sub(t.StartedAt)), worker, formatDuration(t.Timeout), formatTime(t.RecoveryAt))})
	}
	return notes, nil
}

// healthCheckInterval is how often runs start --wait checks what the run waits on.
var healthCheckInterval = 5 * time.Second
