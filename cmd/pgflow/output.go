package main

// Shared helpers of the flows, runs, workers and demo commands: connecting, the --json documents (stable
// snake_case field names, ids as strings), text tables, and the live progress view of `runs watch` and `demo`.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// openPool connects a small pool for one CLI command and checks that the server answers. params are extra
// run-time parameters of every connection (the demo sets pgflow.environment=local).
func openPool(ctx context.Context, url string, maxConns int32, params map[string]string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("bad --database-url: %w", err)
	}
	cfg.MaxConns = maxConns
	cc := cfg.ConnConfig
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "pgflow-cli"
	}
	for k, v := range params {
		cc.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s:%d/%s: %w", cc.Host, cc.Port, cc.Database, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s:%d/%s: %w", cc.Host, cc.Port, cc.Database, err)
	}
	return pool, nil
}

// withSchemaHint adds a hint to errors that say a pgflow or pgmq object is missing.
func withSchemaHint(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42883" || pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		return fmt.Errorf("%w (is the pgflow schema installed? run 'pgflow migrate up')", err)
	}
	return err
}

// writeJSON writes v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// isTerminal reports whether w is a character device (a terminal), which gets the redrawing progress view.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ---- durations, timestamps, JSON snippets ----

// formatDuration renders d briefly: 850ms, 1.25s, 2m05s, 3h04m, 2d05h.
func formatDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// oneLine makes s fit one table cell: whitespace runs become one space and it is cut to max runes with "…".
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max-1]) + "…"
}

// compactJSON returns raw without insignificant whitespace ("null" for nil).
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// indentJSON returns raw indented by two spaces ("null" for nil).
func indentJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "null"
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// ---- the run document (runs show, runs start --json) ----

// runView is a run as the CLI shows it: the client's run snapshot plus the run's tasks and the step types of
// its flow.
type runView struct {
	run       *pgflow.Run
	tasks     []sqlapi.TaskRow // nil when not read
	stepTypes map[string]string
	// echoLimit, when positive, leaves an input longer than this many bytes out of the --json document (runs
	// start: the caller has the input; echoing 50 MB back helps no one). The text view always shows a preview.
	echoLimit int
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

// loadRunView reads a run, its tasks and its flow's step types.
func loadRunView(ctx context.Context, client *pgflow.Client, pool *pgxpool.Pool, runID string) (*runView, error) {
	run, err := getRun(ctx, client, runID)
	if err != nil {
		return nil, err
	}
	return viewOf(ctx, pool, run)
}

// viewOf completes a run snapshot with its tasks and its flow's step types.
func viewOf(ctx context.Context, pool *pgxpool.Pool, run *pgflow.Run) (*runView, error) {
	tasks, err := sqlapi.RunTasks(ctx, pool, run.ID)
	if err != nil {
		return nil, withSchemaHint(err)
	}
	types, err := stepTypesOf(ctx, pool, run.FlowSlug)
	if err != nil {
		return nil, err
	}
	return &runView{run: run, tasks: tasks, stepTypes: types}, nil
}

// stepTypesOf maps the step slugs of a flow to "single" or "map".
func stepTypesOf(ctx context.Context, pool *pgxpool.Pool, flowSlug string) (map[string]string, error) {
	flows, err := sqlapi.ListFlows(ctx, pool, flowSlug)
	if err != nil {
		return nil, withSchemaHint(err)
	}
	types := map[string]string{}
	for _, f := range flows {
		for _, s := range f.Steps {
			types[s.StepSlug] = s.StepType
		}
	}
	return types, nil
}

// getRun reads a run and turns the client's errors into CLI messages.
func getRun(ctx context.Context, client *pgflow.Client, runID string) (*pgflow.Run, error) {
	run, err := client.GetRun(ctx, runID)
	switch {
	case errors.Is(err, pgflow.ErrInvalidRunID):
		return nil, fmt.Errorf("RUN_ID %q is not a run id (a UUID such as 0f8fad5b-d9cb-469f-a165-70867728950e)", runID)
	case errors.Is(err, pgflow.ErrRunNotFound):
		return nil, fmt.Errorf("run %s not found: %w", runID, pgflow.ErrRunNotFound)
	case err != nil:
		return nil, withSchemaHint(err)
	}
	return run, nil
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
	Steps          []stepJSON      `json:"steps"`
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

// summarize counts a step's tasks. The last error is that of the task whose failure is the most recent
// (retried tasks keep their last error while queued again).
func summarize(tasks []sqlapi.TaskRow) taskSummaryJSON {
	var s taskSummaryJSON
	var lastAt time.Time
	for _, t := range tasks {
		s.Total++
		switch t.Status {
		case "queued":
			s.Queued++
		case "started":
			s.Started++
		case "completed":
			s.Completed++
		case "failed":
			s.Failed++
		}
		s.AttemptsTotal += t.AttemptsCount
		s.AttemptsMax = max(s.AttemptsMax, t.AttemptsCount)
		if t.ErrorMessage != nil {
			at := t.QueuedAt
			if t.FailedAt != nil {
				at = *t.FailedAt
			}
			if s.LastError == nil || at.After(lastAt) {
				msg := *t.ErrorMessage
				s.LastError, lastAt = &msg, at
			}
		}
	}
	return s
}

// tasksByStep groups task rows by step slug.
func tasksByStep(tasks []sqlapi.TaskRow) map[string][]sqlapi.TaskRow {
	m := map[string][]sqlapi.TaskRow{}
	for _, t := range tasks {
		m[t.StepSlug] = append(m[t.StepSlug], t)
	}
	return m
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// document renders the --json document of the run; withTasks adds every task of every step.
func (v *runView) document(withTasks bool) runJSON {
	r := v.run
	doc := runJSON{
		RunID: r.ID, FlowSlug: r.FlowSlug, Status: string(r.Status), Input: r.Input, Output: r.Output,
		RemainingSteps: r.RemainingSteps, StartedAt: r.StartedAt, CompletedAt: r.CompletedAt, FailedAt: r.FailedAt,
		Steps: make([]stepJSON, 0, len(r.Steps)),
	}
	if err := r.Err(); err != nil {
		doc.Error = strPtr(err.Error())
	}
	if v.echoLimit > 0 && len(r.Input) > v.echoLimit {
		n := len(r.Input)
		doc.Input, doc.InputBytes = nil, &n
	}
	byStep := tasksByStep(v.tasks)
	for _, s := range r.Steps {
		sj := stepJSON{
			StepSlug: s.StepSlug, StepType: v.stepType(s.StepSlug), Status: string(s.Status),
			RemainingDeps: s.RemainingDeps, InitialTasks: s.InitialTasks, RemainingTasks: s.RemainingTasks,
			Tasks: summarize(byStep[s.StepSlug]), Output: s.Output,
			ErrorMessage: strPtr(s.ErrorMessage), SkipReason: strPtr(s.SkipReason),
			CreatedAt: s.CreatedAt, StartedAt: s.StartedAt, CompletedAt: s.CompletedAt, FailedAt: s.FailedAt,
			SkippedAt: s.SkippedAt,
		}
		if withTasks {
			sj.TaskList = []taskJSON{}
			for _, t := range byStep[s.StepSlug] {
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

func (v *runView) stepType(slug string) string {
	if t := v.stepTypes[slug]; t != "" {
		return t
	}
	return "single"
}

// writeText prints the run as a header, a step table, the full error messages and, with withTasks, a task table.
func (v *runView) writeText(w io.Writer, withTasks bool) {
	r := v.run
	fmt.Fprintf(w, "Run       %s\n", r.ID)
	fmt.Fprintf(w, "Flow      %s\n", r.FlowSlug)
	fmt.Fprintf(w, "Status    %s\n", runStatusText(r))
	fmt.Fprintf(w, "Started   %s\n", formatTime(r.StartedAt))
	fmt.Fprintf(w, "Input     %s\n", inputPreview(r.ID, r.Input))
	if r.Status == pgflow.RunCompleted {
		fmt.Fprintf(w, "Output    %s\n", compactJSON(r.Output))
	}
	fmt.Fprintln(w)

	byStep := tasksByStep(v.tasks)
	tw := newTable(w)
	fmt.Fprintln(tw, "STEP\tTYPE\tSTATUS\tTASKS\tATTEMPTS\tTIME\tDETAIL")
	for _, s := range r.Steps {
		sum := summarize(byStep[s.StepSlug])
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.StepSlug, v.stepType(s.StepSlug), s.Status,
			taskCount(s, sum), attemptsText(sum), stepTime(s), oneLine(stepDetail(s, sum), 60))
	}
	_ = tw.Flush()

	for _, s := range r.Steps {
		if s.ErrorMessage != "" {
			fmt.Fprintf(w, "\nstep %s %s: %s\n", s.StepSlug, s.Status, s.ErrorMessage)
		}
	}

	if withTasks && len(v.tasks) > 0 {
		fmt.Fprintln(w)
		tw := newTable(w)
		fmt.Fprintln(tw, "STEP\tTASK\tSTATUS\tATTEMPTS\tMESSAGE\tWORKER\tERROR")
		for _, t := range v.tasks {
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
func runStatusText(r *pgflow.Run) string {
	switch {
	case r.Status == pgflow.RunCompleted && r.CompletedAt != nil:
		return "completed in " + formatDuration(r.CompletedAt.Sub(r.StartedAt))
	case r.Status == pgflow.RunFailed && r.FailedAt != nil:
		return "failed after " + formatDuration(r.FailedAt.Sub(r.StartedAt))
	default:
		return fmt.Sprintf("%s (%d steps left)", r.Status, r.RemainingSteps)
	}
}

// taskCount is "done/total" from the task rows, or from the step's counters when the tasks were not read.
func taskCount(s pgflow.StepState, sum taskSummaryJSON) string {
	if sum.Total > 0 {
		return fmt.Sprintf("%d/%d", sum.Completed, sum.Total)
	}
	if s.InitialTasks == nil {
		return "-"
	}
	done := *s.InitialTasks
	if s.RemainingTasks != nil {
		done -= *s.RemainingTasks
	} else if s.Status != pgflow.StepCompleted {
		done = 0
	}
	return fmt.Sprintf("%d/%d", done, *s.InitialTasks)
}

func attemptsText(sum taskSummaryJSON) string {
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
func stepTime(s pgflow.StepState) string {
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
func stepDetail(s pgflow.StepState, sum taskSummaryJSON) string {
	switch s.Status {
	case pgflow.StepCompleted:
		return compactJSON(s.Output)
	case pgflow.StepSkipped:
		if s.ErrorMessage != "" {
			return s.SkipReason + ": " + s.ErrorMessage
		}
		return s.SkipReason
	case pgflow.StepFailed:
		return s.ErrorMessage
	case pgflow.StepStarted:
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

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ---- live progress (runs watch, demo) ----

// progressView draws a run's progress. On a terminal it redraws a block of lines in place (ANSI cursor
// movement); elsewhere it appends one line per change, so logs and pipes get a readable history.
type progressView struct {
	w         io.Writer
	ansi      bool // redraw in place
	color     bool // ansi, and $NO_COLOR unset
	stepTypes map[string]string

	last      *pgflow.Run
	drawn     int                   // ansi: lines drawn last time
	seen      map[string]*plainStep // plain: what was reported per step
	announced bool
}

// plainStep is what the plain view has reported about one step. A step moves through its states in one
// direction (created → started → completed or failed; created → skipped), so comparing a snapshot with this
// record tells every transition since the last report, even when several happened between two reads.
type plainStep struct {
	started bool   // the "started" line is out
	done    int    // map step: the done count last reported
	ended   string // the terminal status reported: completed, failed or skipped ("" while not ended)
	other   string // a status the view does not know, last reported
}

func newProgressView(w io.Writer, ansi bool, stepTypes map[string]string) *progressView {
	return &progressView{w: w, ansi: ansi, color: ansi && os.Getenv("NO_COLOR") == "", stepTypes: stepTypes,
		seen: map[string]*plainStep{}}
}

// update shows a new snapshot of the run. The plain view prints one line per transition since the previous
// snapshot: a step that went from created to completed between two reads gets its "started" line and then its
// "completed" line.
func (p *progressView) update(run *pgflow.Run) {
	p.last = run
	if p.ansi {
		p.redraw()
		return
	}
	if !p.announced {
		fmt.Fprintf(p.w, "run %s of flow %s: %s\n", run.ID, run.FlowSlug, run.Status)
		p.announced = true
	}
	for _, s := range run.Steps {
		seen := p.seen[s.StepSlug]
		if seen == nil {
			seen = &plainStep{}
			p.seen[s.StepSlug] = seen
		}
		for _, line := range p.plainLines(s, seen) {
			fmt.Fprintf(p.w, "  %s\n", line)
		}
	}
}

// plainLines returns the lines that report what happened to step s since seen, oldest first, and records them
// in seen.
func (p *progressView) plainLines(s pgflow.StepState, seen *plainStep) []string {
	var lines []string
	isMap := p.stepTypes[s.StepSlug] == "map"
	known := true
	switch s.Status {
	case pgflow.StepCreated, pgflow.StepStarted, pgflow.StepCompleted, pgflow.StepFailed, pgflow.StepSkipped:
	default:
		known = false
	}
	if !known {
		if string(s.Status) != seen.other {
			seen.other = string(s.Status)
			lines = append(lines, fmt.Sprintf("%s %s", s.StepSlug, s.Status))
		}
		return lines
	}
	if seen.ended != "" {
		return nil // a terminal state is final
	}
	// Started: the step is started now, or it has a start time (it started and ended since the last read).
	if !seen.started && (s.Status == pgflow.StepStarted || (s.StartedAt != nil && s.Status != pgflow.StepCreated)) {
		seen.started = true
		if isMap && s.InitialTasks != nil {
			lines = append(lines, fmt.Sprintf("%s started (%d tasks)", s.StepSlug, *s.InitialTasks))
		} else {
			lines = append(lines, s.StepSlug+" started")
		}
	}
	switch s.Status {
	case pgflow.StepStarted:
		if isMap && s.InitialTasks != nil && s.RemainingTasks != nil {
			if done := *s.InitialTasks - *s.RemainingTasks; done > seen.done {
				seen.done = done
				lines = append(lines, fmt.Sprintf("%s %d/%d tasks done", s.StepSlug, done, *s.InitialTasks))
			}
		}
	case pgflow.StepCompleted:
		seen.ended = "completed"
		lines = append(lines, fmt.Sprintf("%s completed in %s", s.StepSlug, stepTime(s)))
	case pgflow.StepSkipped:
		seen.ended = "skipped"
		lines = append(lines, fmt.Sprintf("%s skipped (%s)", s.StepSlug, s.SkipReason))
	case pgflow.StepFailed:
		seen.ended = "failed"
		lines = append(lines, fmt.Sprintf("%s failed: %s", s.StepSlug, oneLine(s.ErrorMessage, 200)))
	}
	return lines
}

// tick refreshes the running times on a terminal; the plain view ignores it.
func (p *progressView) tick() {
	if p.ansi && p.last != nil {
		p.redraw()
	}
}

const (
	ansiGreen  = "\x1b[32m"
	ansiRed    = "\x1b[31m"
	ansiYellow = "\x1b[33m"
	ansiDim    = "\x1b[2m"
	ansiBold   = "\x1b[1m"
	ansiReset  = "\x1b[0m"
)

// c returns the ANSI color sequence code, or "" without colors.
func (p *progressView) c(code string) string {
	if !p.color {
		return ""
	}
	return code
}

func (p *progressView) redraw() {
	run := p.last
	var b strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", p.drawn) // back to the first line of the block
	}
	lines := []string{fmt.Sprintf("%srun %s%s · flow %s · %s", p.c(ansiBold), run.ID, p.c(ansiReset), run.FlowSlug, p.runLine(run))}
	width := 0
	for _, s := range run.Steps {
		width = max(width, utf8.RuneCountInString(s.StepSlug))
	}
	for _, s := range run.Steps {
		icon, color := "·", ansiDim
		switch s.Status {
		case pgflow.StepStarted:
			icon, color = "▶", ansiYellow
		case pgflow.StepCompleted:
			icon, color = "✔", ansiGreen
		case pgflow.StepFailed:
			icon, color = "✘", ansiRed
		case pgflow.StepSkipped:
			icon, color = "↷", ansiDim
		}
		detail := ""
		switch s.Status {
		case pgflow.StepStarted:
			detail = stepTime(s)
			if p.stepTypes[s.StepSlug] == "map" {
				detail = taskCount(s, taskSummaryJSON{}) + " tasks  " + detail
			}
		case pgflow.StepCompleted:
			detail = stepTime(s)
			if p.stepTypes[s.StepSlug] == "map" && s.InitialTasks != nil {
				detail = fmt.Sprintf("%d tasks  %s", *s.InitialTasks, detail)
			}
		case pgflow.StepSkipped:
			detail = s.SkipReason
		case pgflow.StepFailed:
			detail = oneLine(s.ErrorMessage, 70)
		default:
			detail = stepDetail(s, taskSummaryJSON{})
		}
		lines = append(lines, fmt.Sprintf("  %s%s %-*s  %-9s%s  %s", p.c(color), icon, width, s.StepSlug, s.Status, p.c(ansiReset), detail))
	}
	for _, l := range lines {
		b.WriteString("\x1b[2K") // clear the line
		b.WriteString(l)
		b.WriteString("\n")
	}
	p.drawn = len(lines)
	_, _ = io.WriteString(p.w, b.String())
}

func (p *progressView) runLine(run *pgflow.Run) string {
	switch run.Status {
	case pgflow.RunCompleted:
		return p.c(ansiGreen) + runStatusText(run) + p.c(ansiReset)
	case pgflow.RunFailed:
		return p.c(ansiRed) + runStatusText(run) + p.c(ansiReset)
	default:
		return fmt.Sprintf("%s%s%s %s", p.c(ansiYellow), run.Status, p.c(ansiReset), formatDuration(time.Since(run.StartedAt)))
	}
}

// finish reports the end of the run: its duration and its output (or its error).
func (p *progressView) finish(run *pgflow.Run) {
	if !p.ansi {
		fmt.Fprintf(p.w, "run %s\n", runStatusText(run))
	}
	switch run.Status {
	case pgflow.RunCompleted:
		fmt.Fprintf(p.w, "output:\n%s\n", indentJSON(run.Output))
	case pgflow.RunFailed:
		for _, s := range run.Steps {
			if s.Status == pgflow.StepFailed {
				fmt.Fprintf(p.w, "step %s failed: %s\n", s.StepSlug, s.ErrorMessage)
			}
		}
	}
}

// watchRun follows a run until it is completed or failed, drawing each change on view, and returns its final
// state. It listens for the run's events and re-reads the run on each burst of them, and also every poll
// interval, so it ends even if events cannot be delivered. Until the listener is ready (or if it never becomes
// ready, e.g. when no extra connection can be opened) it relies on the poll alone.
func watchRun(ctx context.Context, client *pgflow.Client, runID string, view *progressView, poll time.Duration) (*pgflow.Run, error) {
	if _, err := getRun(ctx, client, runID); err != nil { // a clear error for unknown ids before subscribing
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx) // ends the subscription when the watch ends
	defer cancel()
	subscribed := make(chan (<-chan pgflow.Event), 1)
	go func() {
		if events, err := client.Subscribe(ctx, runID); err == nil {
			subscribed <- events
		}
	}()
	var events <-chan pgflow.Event

	pollTicker := time.NewTicker(poll)
	defer pollTicker.Stop()
	var redraw <-chan time.Time
	if view.ansi {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		redraw = t.C
	}
	for {
		run, err := getRun(ctx, client, runID)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		view.update(run)
		if run.Status.Terminal() {
			return run, nil
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case events = <-subscribed:
				subscribed = nil
				break wait // re-read: a transition may have happened before the listener was ready
			case _, ok := <-events:
				if !ok {
					events = nil // ended (terminal event, or the client is closing): the poll takes over
				}
				drainEvents(events)
				break wait
			case <-pollTicker.C:
				break wait
			case <-redraw:
				view.tick()
			}
		}
	}
}

// drainEvents discards the events already waiting, so one re-read covers a burst of them.
func drainEvents(events <-chan pgflow.Event) {
	for events != nil {
		select {
		case _, ok := <-events:
			if !ok {
				return
			}
		default:
			return
		}
	}
}
