package main

// runs list, runs cancel and runs retry: find runs, stop one, run one again.

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgflow-go/pgflow"
)

// runStatusNames are the run statuses --status accepts.
var runStatusNames = []pgflow.RunStatus{pgflow.RunStarted, pgflow.RunCompleted, pgflow.RunFailed, pgflow.RunCancelled}

func newRunsListCmd(g *globalOptions) *cobra.Command {
	var flow, status, after, before, cursor string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Long: `List runs newest first (by start time, then run id), one page at a time.

--flow and --status (started, completed, failed or cancelled) filter the runs; --started-after and
--started-before bound their start time, as an RFC 3339 timestamp (2025-11-30T03:48:00Z), a date (2025-11-30,
midnight UTC) or a duration before now (90m, 24h). --limit is the page size (1 to 1000). When more runs match,
the last line gives the command for the next page (--cursor); with --json the document's next_cursor is it.

--json prints {"runs": [{run_id, flow_slug, status, remaining_steps, steps_total, steps_done, started_at,
completed_at, failed_at, cancelled_at, error}], "next_cursor": "..." or null}. Run ids are strings.`,
		Example: `  pgflow runs list
  pgflow runs list --flow greet --status failed --started-after 24h
  pgflow runs list --status cancelled --json | jq -r '.runs[].run_id'
  pgflow runs list --limit 100 --cursor MTczMjk0…`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := &pgflow.ListRunsOpts{Flow: flow, Limit: limit, Cursor: cursor}
			if status != "" {
				st, err := parseRunStatus(status)
				if err != nil {
					return err
				}
				opts.Status = st
			}
			if limit < 1 || limit > 1000 {
				return fmt.Errorf("--limit %d: must be from 1 to 1000", limit)
			}
			now := time.Now()
			var err error
			if opts.StartedAfter, err = parseTimeFlag("--started-after", after, now); err != nil {
				return err
			}
			if opts.StartedBefore, err = parseTimeFlag("--started-before", before, now); err != nil {
				return err
			}
			ctx := cmd.Context()
			s, err := openClientSession(ctx, g)
			if err != nil {
				return err
			}
			defer s.Close()
			page, err := s.client.ListRuns(ctx, opts)
			if err != nil {
				if cursor != "" && strings.Contains(err.Error(), "Cursor") {
					return fmt.Errorf("--cursor %q is not a cursor printed by 'pgflow runs list': %w", cursor, err)
				}
				return withSchemaHint(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), runListDocument(page))
			}
			writeRunList(cmd.OutOrStdout(), page, cmd, now)
			return nil
		},
	}
	cmd.Flags().StringVar(&flow, "flow", "", "only runs of this flow")
	cmd.Flags().StringVar(&status, "status", "", "only runs in this status: started, completed, failed or cancelled")
	cmd.Flags().StringVar(&after, "started-after", "", "only runs started after this time (RFC 3339, a date, or a duration ago such as 24h)")
	cmd.Flags().StringVar(&before, "started-before", "", "only runs started before this time (RFC 3339, a date, or a duration ago)")
	cmd.Flags().IntVar(&limit, "limit", 50, "runs per page (1 to 1000)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "continue after the previous page (the cursor it printed)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the page as JSON")
	return cmd
}

// parseRunStatus checks a --status value.
func parseRunStatus(s string) (pgflow.RunStatus, error) {
	for _, st := range runStatusNames {
		if string(st) == s {
			return st, nil
		}
	}
	names := make([]string, len(runStatusNames))
	for i, st := range runStatusNames {
		names[i] = string(st)
	}
	return "", fmt.Errorf("--status %q: must be one of %s", s, strings.Join(names, ", "))
}

// parseTimeFlag reads a time bound: RFC 3339, a date (midnight UTC) or a duration before now. "" is no bound.
func parseTimeFlag(flag, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%s %q: a duration means that long ago and must not be negative", flag, v)
		}
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%s %q: not an RFC 3339 time (2025-11-30T03:48:00Z), a date (2025-11-30) or a "+
		"duration before now (24h)", flag, v)
}

type runListJSON struct {
	Runs       []runListItemJSON `json:"runs"`
	NextCursor *string           `json:"next_cursor"` // null on the last page
}

type runListItemJSON struct {
	RunID          string     `json:"run_id"`
	FlowSlug       string     `json:"flow_slug"`
	Status         string     `json:"status"`
	RemainingSteps int        `json:"remaining_steps"`
	StepsTotal     int        `json:"steps_total"`
	StepsDone      int        `json:"steps_done"`
	StartedAt      time.Time  `json:"started_at"`
	CompletedAt    *time.Time `json:"completed_at"`
	FailedAt       *time.Time `json:"failed_at"`
	CancelledAt    *time.Time `json:"cancelled_at"`
	Error          *string    `json:"error"`
}

func runListDocument(page *pgflow.RunList) runListJSON {
	doc := runListJSON{Runs: make([]runListItemJSON, 0, len(page.Runs)), NextCursor: strPtr(page.NextCursor)}
	for _, r := range page.Runs {
		doc.Runs = append(doc.Runs, runListItemJSON{
			RunID: r.ID, FlowSlug: r.FlowSlug, Status: string(r.Status), RemainingSteps: r.RemainingSteps,
			StepsTotal: r.StepsTotal, StepsDone: r.StepsDone, StartedAt: r.StartedAt, CompletedAt: r.CompletedAt,
			FailedAt: r.FailedAt, CancelledAt: r.CancelledAt, Error: strPtr(r.Error),
		})
	}
	return doc
}

// writeRunList prints the page as a table and, when there is more, the command for the next page.
func writeRunList(w io.Writer, page *pgflow.RunList, cmd *cobra.Command, now time.Time) {
	if len(page.Runs) == 0 {
		fmt.Fprintln(w, "no runs match")
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "RUN\tFLOW\tSTATUS\tSTEPS\tSTARTED\tTIME\tERROR")
	for _, r := range page.Runs {
		end := now
		switch {
		case r.CompletedAt != nil:
			end = *r.CompletedAt
		case r.FailedAt != nil:
			end = *r.FailedAt
		case r.CancelledAt != nil:
			end = *r.CancelledAt
		}
		took := formatDuration(end.Sub(r.StartedAt))
		if r.Status == pgflow.RunStarted {
			took += "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", r.ID, r.FlowSlug, r.Status, r.StepsDone, r.StepsTotal,
			formatTime(r.StartedAt), took, oneLine(r.Error, 60))
	}
	_ = tw.Flush()
	if page.NextCursor != "" {
		fmt.Fprintf(w, "more runs: %s\n", nextPageCommand(cmd, page.NextCursor))
	}
}

// nextPageCommand is the command line that lists the next page: the same flags with --cursor.
func nextPageCommand(cmd *cobra.Command, cursor string) string {
	parts := []string{"pgflow runs list"}
	for _, name := range []string{"flow", "status", "started-after", "started-before", "limit"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			parts = append(parts, "--"+name+" "+shellQuote(f.Value.String()))
		}
	}
	return strings.Join(append(parts, "--cursor "+cursor), " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:+/@", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func newRunsCancelCmd(g *globalOptions) *cobra.Command {
	var reason string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cancel RUN_ID",
		Short: "Cancel a started run",
		Long: `Cancel a started run: it becomes cancelled at once (one transaction), no further step starts, its queued
tasks are removed from their queues and its running tasks' results are ignored; workers running its handlers
see their context cancelled. Its unfinished steps show as "not run (run cancelled)".

--reason is stored with the run (pgflow.runs.cancel_reason) and shown by 'pgflow runs show'. Cancelling a run
that already ended (completed, failed or cancelled) changes nothing and is an error (exit status 1).
'pgflow runs retry RUN_ID' resumes a cancelled run.`,
		Example: `  pgflow runs cancel 0f8fad5b-d9cb-469f-a165-70867728950e
  pgflow runs cancel 0f8fad5b-d9cb-469f-a165-70867728950e --reason "wrong input"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			ctx := cmd.Context()
			s, err := openClientSession(ctx, g)
			if err != nil {
				return err
			}
			defer s.Close()
			if _, err := readRun(ctx, s.pool, id, false); err != nil { // names a bad or unknown id
				return err
			}
			if _, err := s.client.CancelRun(ctx, id, &pgflow.CancelRunOpts{Reason: reason}); err != nil {
				return runControlError("cancel", id, err)
			}
			d, err := readRun(ctx, s.pool, id, false)
			if err != nil {
				return err
			}
			if !asJSON {
				fmt.Fprintf(cmd.OutOrStdout(), "cancelled run %s\n\n", id)
			}
			return printRun(cmd.OutOrStdout(), &runView{run: d}, asJSON, false)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the run is cancelled (stored with the run)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the cancelled run as JSON (as runs show --json)")
	return cmd
}

func newRunsRetryCmd(g *globalOptions) *cobra.Command {
	var fresh, asJSON bool
	cmd := &cobra.Command{
		Use:   "retry RUN_ID",
		Short: "Resume a failed or cancelled run, or run it again as a new run",
		Long: `Resume a failed or cancelled run in place: it returns to started; completed steps keep their outputs and
are not run again; failed and not-run steps get fresh attempts. Workers of its flow then finish it.

--fresh instead starts a new run of the same flow with the same input, linked to the original (its retry_of);
the original stays as it is. Only a failed or cancelled run can be retried, either way; a started or completed
one gives an error naming its status. Two retries at once resume the run once: the second gets an error.`,
		Example: `  pgflow runs retry 0f8fad5b-d9cb-469f-a165-70867728950e
  pgflow runs retry 0f8fad5b-d9cb-469f-a165-70867728950e --fresh --json | jq -r .run_id`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			ctx := cmd.Context()
			s, err := openClientSession(ctx, g)
			if err != nil {
				return err
			}
			defer s.Close()
			if _, err := readRun(ctx, s.pool, id, false); err != nil {
				return err
			}
			run, err := s.client.RetryRun(ctx, id, &pgflow.RetryRunOpts{Fresh: fresh})
			if err != nil {
				return runControlError("retry", id, err)
			}
			d, err := readRun(ctx, s.pool, run.ID, false)
			if err != nil {
				return err
			}
			if !asJSON {
				if run.ID != id {
					fmt.Fprintf(cmd.OutOrStdout(), "started run %s, a fresh retry of run %s\n\n", run.ID, id)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "resumed run %s\n\n", id)
				}
			}
			return printRun(cmd.OutOrStdout(), &runView{run: d, echoLimit: startInputJSONLimit}, asJSON, false)
		},
	}
	cmd.Flags().BoolVar(&fresh, "fresh", false, "start a new run with the same input instead of resuming this one")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the resumed (or new) run as JSON (as runs show --json)")
	return cmd
}

// runControlError turns the library's errors for cancel/retry into messages naming the run and what to do.
func runControlError(op, id string, err error) error {
	switch {
	case errors.Is(err, pgflow.ErrRunNotFound):
		return fmt.Errorf("run %s not found", id)
	case errors.Is(err, pgflow.ErrRunFinished) && op == "cancel":
		return fmt.Errorf("cannot cancel run %s: %w", id, err)
	case errors.Is(err, pgflow.ErrRunFinished):
		return fmt.Errorf("cannot retry run %s: %w", id, err)
	default:
		return withSchemaHint(fmt.Errorf("%s run %s: %w", op, id, err))
	}
}
