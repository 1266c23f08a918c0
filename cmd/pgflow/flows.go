package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

type flowJSON struct {
	FlowSlug       string    `json:"flow_slug"`
	OptMaxAttempts int       `json:"opt_max_attempts"`
	OptBaseDelay   int       `json:"opt_base_delay"` // seconds
	OptTimeout     int       `json:"opt_timeout"`    // seconds
	CreatedAt      time.Time `json:"created_at"`
	StepCount      int       `json:"step_count"`
	MapStepCount   int       `json:"map_step_count"`
	ActiveRuns     int64     `json:"active_runs"`
	QueueMode      string    `json:"queue_mode"` // "flow" (one queue) or "step" (one queue per step)
	// MessageRetention is "archive" (messages archived when their task finishes) or "delete" (deleted at the claim).
	MessageRetention string            `json:"message_retention"`
	Queue            *queueJSON        `json:"queue"`  // the flow's one queue; null with per-step queues or when unreadable
	Queues           []*queueJSON      `json:"queues"` // every queue of the flow in step order; null entries are unreadable
	Steps            []sqlapi.FlowStep `json:"steps"`
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

A flow with per-step queues (pgflow.QueuePerStep) has one queue per step: QUEUED adds them up, and --steps shows
each step's queue with its depth.

--steps adds each flow's steps with their type, queue and dependencies. --json prints an array of documents with
the fields flow_slug, opt_max_attempts, opt_base_delay, opt_timeout, created_at, step_count, map_step_count,
active_runs, queue_mode ("flow" or "step"), message_retention ("archive" or "delete": whether a task's message is
archived when the task finishes or deleted when a worker claims it), queue {name, length, visible} (the flow's one queue; null with per-step
queues or if it cannot be read), queues[] (every queue of the flow in step order, each like queue; null if it
cannot be read) and steps[] {step_slug, step_type, step_index, deps, queue_name}.`,
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
				// The flow's queues: the ones its steps record (schema v0.17.0+), else the one named like the flow.
				// A queue that cannot be read is shown as unknown.
				names := []string{f.FlowSlug}
				if len(f.Steps) > 0 && f.Steps[0].QueueName != nil {
					names = names[:0]
					for _, st := range f.Steps {
						if st.QueueName != nil && !slices.Contains(names, *st.QueueName) {
							names = append(names, *st.QueueName)
						}
					}
				}
				d.QueueMode = f.QueueMode
				d.MessageRetention = f.MessageRetention
				for _, name := range names {
					var q *queueJSON
					if depth, err := sqlapi.GetQueueMetrics(ctx, pool, name); err == nil {
						q = &queueJSON{Name: name, Length: depth.Length, Visible: depth.Visible}
					} else if ctx.Err() != nil {
						return ctx.Err()
					}
					d.Queues = append(d.Queues, q)
				}
				if f.QueueMode != "step" && len(d.Queues) == 1 {
					d.Queue = d.Queues[0]
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
				queued := queuedText(d.Queues)
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
						queue := ""
						if s.QueueName != nil {
							queue = "queue " + *s.QueueName
							if d.QueueMode == "step" {
								queue += ": " + queuedText(queueNamed(d.Queues, *s.QueueName))
							}
						}
						fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", s.StepIndex, s.StepSlug, s.StepType, queue, deps)
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

// queuedText sums the depths of queues: "N (V visible)", with "in K queues" for several, or "?" when one of them
// could not be read.
func queuedText(queues []*queueJSON) string {
	var length, visible int64
	for _, q := range queues {
		if q == nil {
			return "?"
		}
		length += q.Length
		visible += q.Visible
	}
	text := fmt.Sprintf("%d (%d visible)", length, visible)
	if len(queues) > 1 {
		text += fmt.Sprintf(" in %d queues", len(queues))
	}
	return text
}

// queueNamed returns the queue called name among queues as a one-element list ([nil] when it was unreadable).
func queueNamed(queues []*queueJSON, name string) []*queueJSON {
	for _, q := range queues {
		if q != nil && q.Name == name {
			return []*queueJSON{q}
		}
	}
	return []*queueJSON{nil}
}
