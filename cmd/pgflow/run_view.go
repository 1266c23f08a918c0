package main

// A run as `runs show` and `runs start` print it: the text view (header, step table, errors, task table) and the
// --json document, both built from the read model sqlapi.RunDetail.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// runView is a run as the CLI shows it.
type runView struct {
	run *sqlapi.RunDetail
	// echoLimit, when positive, leaves an input longer than this many bytes out of the --json document (runs
	// start: the caller has the input; echoing 50 MB back helps no one). The text view always shows a preview.
	echoLimit int
	// notes are what the started run waits on that needs attention (runHealth); shown after the step table.
	notes []healthNote
}

// Input echo limits: the text view shows at most inputPreviewChars characters of a run's input; runs start
// --json leaves an input longer than startInputJSONLimit bytes out (input null, input_bytes its size).
const (
	inputPreviewChars   = 200
	startInputJSONLimit = 4 << 10
)

// inputPreview is the run input for the text view: compact JSON, cut after inputPreviewChars characters with
// a note that says so, how long the input is, and how to see all of it.
func inputPreview(runID string, raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	prefix, cut := compactPrefix(raw, inputPreviewChars)
	if !cut {
		return prefix
	}
	return fmt.Sprintf("%s… (truncated: the input has %d bytes; 'pgflow runs show %s --json' prints it whole)",
		prefix, len(raw), runID)
}

// compactPrefix returns the first max characters of the JSON document raw without the whitespace between
// tokens, and whether raw goes on after them. It reads only as much of raw as it returns, so a preview of a
// large document costs little.
func compactPrefix(raw []byte, max int) (string, bool) {
	var b strings.Builder
	inString, escaped, n := false, false, 0
	for i := 0; i < len(raw); {
		r, size := utf8.DecodeRune(raw[i:])
		i += size
		if !inString && (r == ' ' || r == '\t' || r == '\n' || r == '\r') {
			continue
		}
		if n == max {
			return b.String(), true
		}
		switch {
		case escaped:
			escaped = false
		case inString && r == '\\':
			escaped = true
		case r == '"':
			inString = !inString
		}
		b.WriteRune(r)
		n++
	}
	return b.String(), false
}

// readRun reads the run runID as the read model; withTasks adds every task of every step. The errors name the
// run id and say what to do.
func readRun(ctx context.Context, db sqlapi.DBTX, runID string, withTasks bool) (*sqlapi.RunDetail, error) {
	p := sqlapi.GetRunDetailParams{RunID: runID}
	if withTasks {
		p.TasksPerStep = -1
	}
	d, err := sqlapi.GetRunDetail(ctx, db, p)
	switch {
	case sqlapi.IsInvalidRunID(err):
		return nil, fmt.Errorf("RUN_ID %q is not a run id (a UUID such as 0f8fad5b-d9cb-469f-a165-70867728950e)", runID)
	case err != nil:
		return nil, withSchemaHint(err)
	case d == nil:
		return nil, fmt.Errorf("run %s not found: %w", runID, pgflow.ErrRunNotFound)
	}
	return d, nil
}

// runError names each failed step of a failed run with its message, or says that the run was cancelled and
// why; "" for a run that neither failed nor was cancelled.
func runError(d *sqlapi.RunDetail) string {
	if d.Run.Status == "cancelled" {
		msg := fmt.Sprintf("run %s of flow %q was cancelled", d.Run.RunID, d.Run.FlowSlug)
		if _, reason := runCancel(d.Run); deref(reason) != "" {
			msg += ": " + *reason
		}
		return msg
	}
	if d.Run.Status != "failed" {
		return ""
	}
	var parts []string
	for _, s := range d.Steps {
		if s.Status == "failed" {
			parts = append(parts, fmt.Sprintf("step %q: %s", s.StepSlug, deref(s.ErrorMessage)))
		}
	}
	msg := fmt.Sprintf("run %s of flow %q failed", d.Run.RunID, d.Run.FlowSlug)
	if len(parts) > 0 {
		msg += ": " + strings.Join(parts, "; ")
	}
	return msg
}

// completedOutput is a run's or step's output when it completed; nil (JSON null) before.
func completedOutput(status string, raw json.RawMessage) json.RawMessage {
	if status != "completed" || len(raw) == 0 {
		return nil
	}
	return raw
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

type runJSON struct {
	RunID          string          `json:"run_id"`
	FlowSlug       string          `json:"flow_slug"`
	Status         string          `json:"status"`
	Input          json.RawMessage `json:"input"`
	InputBytes     *int            `json:"input_bytes,omitempty"` // runs start: the size of an input left out
	Output         json.RawMessage `json:"output"`                // null unless completed
	Error          *string         `json:"error"`                 // failed runs: the failed steps and their messages
	RemainingSteps int             `json:"remaining_steps"`
	StartedAt      time.Time       `json:"started_at"`
	CompletedAt    *time.Time      `json:"completed_at"`
	FailedAt       *time.Time      `json:"failed_at"`
	CancelledAt    *time.Time      `json:"cancelled_at"`
	CancelReason   *string         `json:"cancel_reason"`
	Steps          []stepJSON      `json:"steps"`
	// Warnings say what a started run waits on that will not come by itself (no alive worker on a queue, a task
	// waiting for stalled-task recovery); left out when there is none.
	Warnings []healthNote `json:"warnings,omitempty"`
}

type stepJSON struct {
	StepSlug       string          `json:"step_slug"`
	StepType       string          `json:"step_type"`
	Status         string          `json:"status"`
	RemainingDeps  int             `json:"remaining_deps"`
	InitialTasks   *int            `json:"initial_tasks"`
	RemainingTasks *int            `json:"remaining_tasks"`
	Tasks          taskSummaryJSON `json:"tasks"`
	Output         json.RawMessage `json:"output"` // null unless completed
	ErrorMessage   *string         `json:"error_message"`
	SkipReason     *string         `json:"skip_reason"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at"`
	CompletedAt    *time.Time      `json:"completed_at"`
	FailedAt       *time.Time      `json:"failed_at"`
	SkippedAt      *time.Time      `json:"skipped_at"`
	TaskList       []taskJSON      `json:"task_list,omitempty"` // only with --tasks
}

type taskSummaryJSON struct {
	Total         int     `json:"total"`
	Queued        int     `json:"queued"`
	Started       int     `json:"started"`
	Completed     int     `json:"completed"`
	Failed        int     `json:"failed"`
	AttemptsTotal int     `json:"attempts_total"` // attempts over all tasks
	AttemptsMax   int     `json:"attempts_max"`   // the most attempts of one task
	LastError     *string `json:"last_error"`     // the error of the most recent failed attempt, if any
}

type taskJSON struct {
	TaskIndex    int        `json:"task_index"`
	Status       string     `json:"status"`
	Attempts     int        `json:"attempts"`
	QueueName    *string    `json:"queue_name"` // the queue of message_id (schema v0.17.0+)
	MessageID    *string    `json:"message_id"`
	ErrorMessage *string    `json:"error_message"`
	WorkerID     *string    `json:"worker_id"`
	QueuedAt     time.Time  `json:"queued_at"`
	StartedAt    *time.Time `json:"started_at"`
	CompletedAt  *time.Time `json:"completed_at"`
	FailedAt     *time.Time `json:"failed_at"`
}

func summaryJSON(s sqlapi.TaskSummary) taskSummaryJSON {
	return taskSummaryJSON{Total: s.Total, Queued: s.Queued, Started: s.Started, Completed: s.Completed,
		Failed: s.Failed, AttemptsTotal: s.AttemptsTotal, AttemptsMax: s.AttemptsMax, LastError: s.LastError}
}

// document renders the --json document of the run; withTasks adds the tasks of every step.
func (v *runView) document(withTasks bool) runJSON {
	r := v.run.Run
	doc := runJSON{
		RunID: r.RunID, FlowSlug: r.FlowSlug, Status: r.Status, Input: r.Input, Output: completedOutput(r.Status, r.Output),
		Error: strPtr(runError(v.run)), RemainingSteps: r.RemainingSteps, StartedAt: r.StartedAt,
		CompletedAt: r.CompletedAt, FailedAt: r.FailedAt, Steps: make([]stepJSON, 0, len(v.run.Steps)),
		Warnings: v.notes,
	}
	doc.CancelledAt, doc.CancelReason = runCancel(r)
	if doc.CancelReason != nil && *doc.CancelReason == "" {
		doc.CancelReason = nil
	}
	if v.echoLimit > 0 && len(r.Input) > v.echoLimit {
		n := len(r.Input)
		doc.Input, doc.InputBytes = nil, &n
	}
	for _, s := range v.run.Steps {
		sj := stepJSON{
			StepSlug: s.StepSlug, StepType: s.Definition.StepType, Status: s.Status,
			RemainingDeps: s.RemainingDeps, InitialTasks: s.InitialTasks, RemainingTasks: s.RemainingTasks,
			Tasks: summaryJSON(s.Tasks), Output: completedOutput(s.Status, s.Output),
			ErrorMessage: nonEmpty(s.ErrorMessage), SkipReason: nonEmpty(s.SkipReason),
			CreatedAt: s.CreatedAt, StartedAt: s.StartedAt, CompletedAt: s.CompletedAt, FailedAt: s.FailedAt,
			SkippedAt: s.SkippedAt,
		}
		if withTasks {
			sj.TaskList = []taskJSON{}
			for _, t := range s.TaskList {
				tj := taskJSON{
					TaskIndex: t.TaskIndex, Status: t.Status, Attempts: t.AttemptsCount, QueueName: t.QueueName,
					ErrorMessage: t.ErrorMessage,
					WorkerID:     t.LastWorkerID, QueuedAt: t.QueuedAt, StartedAt: t.StartedAt,
					CompletedAt: t.CompletedAt, FailedAt: t.FailedAt,
				}
				if t.MessageID != nil {
					tj.MessageID = strPtr(strconv.FormatInt(*t.MessageID, 10))
				}
				sj.TaskList = append(sj.TaskList, tj)
			}
		}
		doc.Steps = append(doc.Steps, sj)
	}
	return doc
}

// writeText prints the run as a header, a step table, the full error messages and, with withTasks, a task table.
func (v *runView) writeText(w io.Writer, withTasks bool) {
	r := v.run.Run
	fmt.Fprintf(w, "Run       %s\n", r.RunID)
	fmt.Fprintf(w, "Flow      %s\n", r.FlowSlug)
	fmt.Fprintf(w, "Status    %s\n", runStatusText(r))
	fmt.Fprintf(w, "Started   %s\n", formatTime(r.StartedAt))
	fmt.Fprintf(w, "Input     %s\n", inputPreview(r.RunID, r.Input))
	if r.Status == "completed" {
		fmt.Fprintf(w, "Output    %s\n", compactJSON(completedOutput(r.Status, r.Output)))
	}
	fmt.Fprintln(w)

	tw := newTable(w)
	fmt.Fprintln(tw, "STEP\tTYPE\tSTATUS\tTASKS\tATTEMPTS\tTIME\tDETAIL")
	for _, s := range v.run.Steps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.StepSlug, s.Definition.StepType, s.Status,
			taskCount(s, s.Tasks), attemptsText(s.Tasks), stepTime(s), oneLine(stepDetail(s, s.Tasks), 60))
	}
	_ = tw.Flush()

	for _, s := range v.run.Steps {
		if msg := deref(s.ErrorMessage); msg != "" {
			fmt.Fprintf(w, "\nstep %s %s: %s\n", s.StepSlug, s.Status, msg)
		}
	}
	if r.Status == "cancelled" {
		fmt.Fprintf(w, "\n%s\n", runError(v.run))
	}
	for i, n := range v.notes {
		if i == 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "warning: %s\n", n.Text)
	}

	var tasks []sqlapi.Task
	for _, s := range v.run.Steps {
		tasks = append(tasks, s.TaskList...)
	}
	if withTasks && len(tasks) > 0 {
		fmt.Fprintln(w)
		tw := newTable(w)
		fmt.Fprintln(tw, "STEP\tTASK\tSTATUS\tATTEMPTS\tMESSAGE\tWORKER\tERROR")
		for _, t := range tasks {
			msgID, worker, errMsg := "-", "-", ""
			if t.MessageID != nil {
				msgID = strconv.FormatInt(*t.MessageID, 10)
				if t.QueueName != nil {
					msgID = *t.QueueName + "/" + msgID // message ids are unique per queue
				}
			}
			if t.LastWorkerID != nil {
				worker = *t.LastWorkerID
			}
			if t.ErrorMessage != nil {
				errMsg = oneLine(*t.ErrorMessage, 60)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\n", t.StepSlug, t.TaskIndex, t.Status, t.AttemptsCount,
				msgID, worker, errMsg)
		}
		_ = tw.Flush()
	}
}

// runStatusText is "started (1.2s so far)", "completed in 2.31s" or "failed after 0.52s".
func runStatusText(r sqlapi.RunRow) string {
	switch {
	case r.Status == "completed" && r.CompletedAt != nil:
		return "completed in " + formatDuration(r.CompletedAt.Sub(r.StartedAt))
	case r.Status == "failed" && r.FailedAt != nil:
		return "failed after " + formatDuration(r.FailedAt.Sub(r.StartedAt))
	case r.Status == "cancelled":
		if at, _ := runCancel(r); at != nil {
			return "cancelled after " + formatDuration(at.Sub(r.StartedAt))
		}
		return "cancelled"
	default:
		return fmt.Sprintf("%s (%d steps left)", r.Status, r.RemainingSteps)
	}
}

// taskCount is "done/total" from the task summary, or from the step's counters when it counts no tasks.
func taskCount(s sqlapi.StepDetail, sum sqlapi.TaskSummary) string {
	if sum.Total > 0 {
		return fmt.Sprintf("%d/%d", sum.Completed, sum.Total)
	}
	if s.InitialTasks == nil {
		return "-"
	}
	done := *s.InitialTasks
	if s.RemainingTasks != nil {
		done -= *s.RemainingTasks
	} else if s.Status != "completed" {
		done = 0
	}
	return fmt.Sprintf("%d/%d", done, *s.InitialTasks)
}

func attemptsText(sum sqlapi.TaskSummary) string {
	switch {
	case sum.Total == 0:
		return "-"
	case sum.Total == 1:
		return strconv.Itoa(sum.AttemptsMax)
	default:
		return fmt.Sprintf("%d (max %d)", sum.AttemptsTotal, sum.AttemptsMax)
	}
}

// stepTime is the step's duration once it ended, the time it has been running so far, or "-".
func stepTime(s sqlapi.StepDetail) string {
	if s.StartedAt == nil {
		return "-"
	}
	switch {
	case s.CompletedAt != nil:
		return formatDuration(s.CompletedAt.Sub(*s.StartedAt))
	case s.FailedAt != nil:
		return formatDuration(s.FailedAt.Sub(*s.StartedAt))
	case s.SkippedAt != nil:
		return formatDuration(s.SkippedAt.Sub(*s.StartedAt))
	default:
		return formatDuration(time.Since(*s.StartedAt)) + "…"
	}
}

// stepDetail is the output of a completed step, the reason of a skipped one, the error of a failed one, the
// last error of a step that is retrying, or what a created step waits for.
func stepDetail(s sqlapi.StepDetail, sum sqlapi.TaskSummary) string {
	switch s.Status {
	case "completed":
		return compactJSON(completedOutput(s.Status, s.Output))
	case "skipped":
		if nr := notRun(s); nr != "" {
			return nr
		}
		if msg := deref(s.ErrorMessage); msg != "" {
			return deref(s.SkipReason) + ": " + msg
		}
		return deref(s.SkipReason)
	case "failed":
		return deref(s.ErrorMessage)
	case "started":
		if sum.LastError != nil {
			return "retrying after: " + *sum.LastError
		}
		return ""
	default:
		if s.RemainingDeps > 0 {
			return fmt.Sprintf("waiting for %d %s", s.RemainingDeps, plural(s.RemainingDeps, "dependency", "dependencies"))
		}
		return ""
	}
}

// notRun is "not run (run failed)" or "not run (run cancelled)" for a step skipped because its run ended
// before it ran; "" otherwise.
func notRun(s sqlapi.StepDetail) string {
	if s.Status != "skipped" {
		return ""
	}
	switch deref(s.SkipReason) {
	case "run_failed":
		return "not run (run failed)"
	case "run_cancelled":
		return "not run (run cancelled)"
	}
	return ""
}

// runTerminal reports whether a run status is final (completed, failed or cancelled).
func runTerminal(status string) bool {
	return status == "completed" || status == "failed" || status == "cancelled"
}

// runCancel returns when and why the run was cancelled (nil when it was not, or no reason was given).
func runCancel(r sqlapi.RunRow) (*time.Time, *string) {
	return r.CancelledAt, r.CancelReason
}
