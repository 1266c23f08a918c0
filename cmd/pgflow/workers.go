package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

type workerJSON struct {
	WorkerID            string     `json:"worker_id"`
	Status              string     `json:"status"` // alive | unresponsive | stopping | stopped
	QueueName           string     `json:"queue_name"`
	FunctionName        string     `json:"function_name"`
	StartedAt           time.Time  `json:"started_at"`
	LastHeartbeatAt     time.Time  `json:"last_heartbeat_at"`
	HeartbeatAgeSeconds float64    `json:"heartbeat_age_seconds"`
	DeprecatedAt        *time.Time `json:"deprecated_at"`
	StoppedAt           *time.Time `json:"stopped_at"`
	ListensAt           *time.Time `json:"listens_at"`   // since when it listens on its own channel; null: it does not
	ListenerPID         *uint32    `json:"listener_pid"` // the server process it listens in; null: it does not
	RunningTasks        int64      `json:"running_tasks"`
}

// listenerPID is the worker's listener_pid for JSON: null when it does not listen.
func listenerPID(w sqlapi.WorkerRow) *uint32 {
	if w.ListenerPID == 0 {
		return nil
	}
	return &w.ListenerPID
}

// workerStatus classifies a worker row (see sqlapi.WorkerRow.Status).
func workerStatus(w sqlapi.WorkerRow, staleAfter time.Duration) string { return w.Status(staleAfter) }

func newWorkersCmd(g *globalOptions) *cobra.Command {
	var asJSON bool
	var since, staleAfter time.Duration
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List workers: alive, stopped, last heartbeat",
		Long: `List the workers registered in pgflow.workers, running ones first.

STATUS is alive (a heartbeat within --stale-after), unresponsive (no heartbeat for longer: the process probably
died without shutting down; its tasks are requeued by stalled-task recovery), stopping (deprecated: it finishes
its tasks and exits) or stopped (shut down gracefully). QUEUE is the flow's queue, named like the flow. TASKS is
the number of tasks the worker is running now. Heartbeat ages are measured by the database clock.

Workers whose last heartbeat is older than --since are left out (--since 0 lists all). --json prints an array
of documents with the fields worker_id, status, queue_name, function_name, started_at, last_heartbeat_at,
heartbeat_age_seconds, deprecated_at, stopped_at and running_tasks.`,
		Example: `  pgflow workers
  pgflow workers --since 0 --json
  pgflow workers --stale-after 1m`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if since < 0 || staleAfter <= 0 {
				return fmt.Errorf("--since must be >= 0 and --stale-after > 0 (got %s and %s)", since, staleAfter)
			}
			url, err := g.requireURL()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			pool, err := openPool(ctx, url, 2, nil)
			if err != nil {
				return err
			}
			defer pool.Close()
			rows, err := sqlapi.ListWorkers(ctx, pool, since)
			if err != nil {
				return withSchemaHint(err)
			}
			docs := make([]workerJSON, 0, len(rows))
			for _, w := range rows {
				docs = append(docs, workerJSON{
					WorkerID: w.WorkerID, Status: workerStatus(w, staleAfter), QueueName: w.QueueName,
					FunctionName: w.FunctionName, StartedAt: w.StartedAt, LastHeartbeatAt: w.LastHeartbeatAt,
					HeartbeatAgeSeconds: w.HeartbeatAge.Seconds(), DeprecatedAt: w.DeprecatedAt, StoppedAt: w.StoppedAt,
					ListensAt: w.ListensAt, ListenerPID: listenerPID(w), RunningTasks: w.RunningTasks,
				})
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, docs)
			}
			if len(docs) == 0 {
				if since > 0 {
					fmt.Fprintf(out, "no workers with a heartbeat in the last %s (--since 0 lists all)\n", since)
				} else {
					fmt.Fprintln(out, "no workers registered")
				}
				return nil
			}
			tw := newTable(out)
			fmt.Fprintln(tw, "WORKER\tSTATUS\tQUEUE\tLAST_HEARTBEAT\tSTARTED\tTASKS\tFUNCTION")
			for i, d := range docs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s\t%d\t%s\n", d.WorkerID, d.Status, d.QueueName,
					formatDuration(rows[i].HeartbeatAge), formatTime(d.StartedAt), d.RunningTasks, d.FunctionName)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the workers as JSON")
	cmd.Flags().DurationVar(&since, "since", 24*time.Hour, "leave out workers whose last heartbeat is older than this (0: list all)")
	cmd.Flags().DurationVar(&staleAfter, "stale-after", 30*time.Second, "a running worker without a heartbeat for longer is unresponsive")
	return cmd
}
