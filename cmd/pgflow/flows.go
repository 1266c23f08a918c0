package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

type flowJSON struct {
	FlowSlug       string            `json:"flow_slug"`
	OptMaxAttempts int               `json:"opt_max_attempts"`
	OptBaseDelay   int               `json:"opt_base_delay"` // seconds
	OptTimeout     int               `json:"opt_timeout"`    // seconds
	CreatedAt      time.Time         `json:"created_at"`
	StepCount      int               `json:"step_count"`
	MapStepCount   int               `json:"map_step_count"`
	ActiveRuns     int64             `json:"active_runs"`
	Queue          *queueJSON        `json:"queue"` // null when pgmq.metrics could not read the queue
	Steps          []sqlapi.FlowStep `json:"steps"`
}

type queueJSON struct {
	Name    string `json:"name"`
	Length  int64  `json:"length"`
	Visible int64  `json:"visible"`
}

func newFlowsCmd(g *globalOptions) *cobra.Command {
	var asJSON, steps bool
	cmd := &cobra.Command{
		Use:   "flows",
		Short: "List the flows in the database with their steps, options and queue depth",
		Long: `List every flow compiled into the database: its number of steps (and map steps), its options (max
attempts, base retry delay, task timeout), the runs still in progress and the depth of its PGMQ queue (messages in
the queue, and how many of them a worker could read now; the rest wait for a retry delay or are being worked on).

--steps adds each flow's steps with their type and dependencies. --json prints an array of documents with the
fields flow_slug, opt_max_attempts, opt_base_delay, opt_timeout, created_at, step_count, map_step_count,
active_runs, queue {name, length, visible} (null if the queue cannot be read) and steps[] {step_slug, step_type,
step_index, deps, queue_name}.`,
		Example: `  pgflow flows
  pgflow flows --steps
  pgflow flows --json | jq '.[] | {flow_slug, active_runs}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			flows, err := sqlapi.ListFlows(ctx, pool, sqlapi.ListFlowsParams{})
			if err != nil {
				return withSchemaHint(err)
			}
			docs := make([]flowJSON, 0, len(flows))
			for _, f := range flows {
				d := flowJSON{
					FlowSlug: f.FlowSlug, OptMaxAttempts: f.MaxAttempts, OptBaseDelay: f.BaseDelay, OptTimeout: f.Timeout,
					CreatedAt: f.CreatedAt, StepCount: len(f.Steps), ActiveRuns: f.Runs.Started, Steps: f.Steps,
				}
				for _, s := range f.Steps {
					if s.StepType == "map" {
						d.MapStepCount++
					}
				}
				// The flow's queue: the one its steps record (schema v0.17.0+), else the one named like the flow.
				// A queue that cannot be read is shown as unknown.
				queue := f.FlowSlug
				if len(f.Steps) > 0 && f.Steps[0].QueueName != nil {
					queue = *f.Steps[0].QueueName
				}
				if depth, err := sqlapi.GetQueueMetrics(ctx, pool, queue); err == nil {
					d.Queue = &queueJSON{Name: queue, Length: depth.Length, Visible: depth.Visible}
				} else if ctx.Err() != nil {
					return ctx.Err()
				}
				docs = append(docs, d)
			}

			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, docs)
			}
			if len(docs) == 0 {
				fmt.Fprintln(out, "no flows yet: a worker compiles its flow when it starts (try 'pgflow demo')")
				return nil
			}
			tw := newTable(out)
			fmt.Fprintln(tw, "FLOW\tSTEPS\tMAX_ATTEMPTS\tBASE_DELAY\tTIMEOUT\tACTIVE_RUNS\tQUEUED\tCREATED")
			for _, d := range docs {
				stepsText := fmt.Sprint(d.StepCount)
				if d.MapStepCount > 0 {
					stepsText += fmt.Sprintf(" (%d map)", d.MapStepCount)
				}
				queued := "?"
				if d.Queue != nil {
					queued = fmt.Sprintf("%d (%d visible)", d.Queue.Length, d.Queue.Visible)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%ds\t%ds\t%d\t%s\t%s\n", d.FlowSlug, stepsText, d.OptMaxAttempts,
					d.OptBaseDelay, d.OptTimeout, d.ActiveRuns, queued, formatTime(d.CreatedAt))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if steps {
				for _, d := range docs {
					fmt.Fprintf(out, "\n%s\n", d.FlowSlug)
					tw := newTable(out)
					for _, s := range d.Steps {
						deps := ""
						if len(s.Deps) > 0 {
							deps = "depends on " + strings.Join(s.Deps, ", ")
						}
						fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", s.StepIndex, s.StepSlug, s.StepType, deps)
					}
					if err := tw.Flush(); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the flows as JSON")
	cmd.Flags().BoolVar(&steps, "steps", false, "also list each flow's steps and dependencies")
	return cmd
}
