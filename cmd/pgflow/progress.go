package main

// The live progress view of a run (runs watch, demo) and the loop that feeds it.

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

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

// progressView draws a run's progress. On a terminal it redraws a block of lines in place (ANSI cursor
// movement); elsewhere it appends one line per change, so logs and pipes get a readable history.
type progressView struct {
	w     io.Writer
	ansi  bool // redraw in place
	color bool // ansi, and $NO_COLOR unset

	last      *sqlapi.RunDetail
	drawn     int                   // ansi: lines drawn last time
	seen      map[string]*plainStep // plain: what was reported per step
	announced bool
	warnings  []healthNote    // ansi: the warnings drawn under the steps
	warned    map[string]bool // plain: the warnings printed and still current
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

func newProgressView(w io.Writer, ansi bool) *progressView {
	return &progressView{w: w, ansi: ansi, color: ansi && os.Getenv("NO_COLOR") == "", seen: map[string]*plainStep{},
		warned: map[string]bool{}}
}

// update shows a new snapshot of the run. The plain view prints one line per transition since the previous
// snapshot: a step that went from created to completed between two reads gets its "started" line and then its
// "completed" line.
func (p *progressView) update(run *sqlapi.RunDetail) {
	p.last = run
	if p.ansi {
		p.redraw()
		return
	}
	if !p.announced {
		fmt.Fprintf(p.w, "run %s of flow %s: %s\n", run.Run.RunID, run.Run.FlowSlug, run.Run.Status)
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
func (p *progressView) plainLines(s sqlapi.StepDetail, seen *plainStep) []string {
	var lines []string
	isMap := s.Definition.StepType == "map"
	known := true
	switch s.Status {
	case "created", "started", "completed", "failed", "skipped":
	default:
		known = false
	}
	if !known {
		if s.Status != seen.other {
			seen.other = s.Status
			lines = append(lines, fmt.Sprintf("%s %s", s.StepSlug, s.Status))
		}
		return lines
	}
	if seen.ended != "" {
		return nil // a terminal state is final
	}
	// Started: the step is started now, or it has a start time (it started and ended since the last read).
	if !seen.started && (s.Status == "started" || (s.StartedAt != nil && s.Status != "created")) {
		seen.started = true
		if isMap && s.InitialTasks != nil {
			lines = append(lines, fmt.Sprintf("%s started (%d tasks)", s.StepSlug, *s.InitialTasks))
		} else {
			lines = append(lines, s.StepSlug+" started")
		}
	}
	switch s.Status {
	case "started":
		if isMap && s.InitialTasks != nil && s.RemainingTasks != nil {
			if done := *s.InitialTasks - *s.RemainingTasks; done > seen.done {
				seen.done = done
				lines = append(lines, fmt.Sprintf("%s %d/%d tasks done", s.StepSlug, done, *s.InitialTasks))
			}
		}
	case "completed":
		seen.ended = "completed"
		lines = append(lines, fmt.Sprintf("%s completed in %s", s.StepSlug, stepTime(s)))
	case "skipped":
		seen.ended = "skipped"
		if nr := notRun(s); nr != "" {
			lines = append(lines, s.StepSlug+" "+nr)
		} else {
			lines = append(lines, fmt.Sprintf("%s skipped (%s)", s.StepSlug, deref(s.SkipReason)))
		}
	case "failed":
		seen.ended = "failed"
		lines = append(lines, fmt.Sprintf("%s failed: %s", s.StepSlug, oneLine(deref(s.ErrorMessage), 200)))
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
	lines := []string{fmt.Sprintf("%srun %s%s · flow %s · %s", p.c(ansiBold), run.Run.RunID, p.c(ansiReset), run.Run.FlowSlug, p.runLine(run.Run))}
	width := 0
	for _, s := range run.Steps {
		width = max(width, utf8.RuneCountInString(s.StepSlug))
	}
	for _, s := range run.Steps {
		icon, color := "·", ansiDim
		switch s.Status {
		case "started":
			icon, color = "▶", ansiYellow
		case "completed":
			icon, color = "✔", ansiGreen
		case "failed":
			icon, color = "✘", ansiRed
		case "skipped":
			icon, color = "↷", ansiDim
		}
		detail := ""
		switch s.Status {
		case "started":
			detail = stepTime(s)
			if s.Definition.StepType == "map" {
				// The step's own counters, which move with every completed task, not the task summary.
				detail = taskCount(s, sqlapi.TaskSummary{}) + " tasks  " + detail
			}
		case "completed":
			detail = stepTime(s)
			if s.Definition.StepType == "map" && s.InitialTasks != nil {
				detail = fmt.Sprintf("%d tasks  %s", *s.InitialTasks, detail)
			}
		case "skipped":
			detail = deref(s.SkipReason)
			if nr := notRun(s); nr != "" {
				detail = nr
			}
		case "failed":
			detail = oneLine(deref(s.ErrorMessage), 70)
		default:
			detail = stepDetail(s, sqlapi.TaskSummary{})
		}
		lines = append(lines, fmt.Sprintf("  %s%s %-*s  %-9s%s  %s", p.c(color), icon, width, s.StepSlug, s.Status, p.c(ansiReset), detail))
	}
	for _, n := range p.warnings {
		lines = append(lines, fmt.Sprintf("  %s! %s%s", p.c(ansiYellow), n.Text, p.c(ansiReset)))
	}
	for _, l := range lines {
		b.WriteString("\x1b[2K") // clear the line
		b.WriteString(l)
		b.WriteString("\n")
	}
	p.drawn = len(lines)
	_, _ = io.WriteString(p.w, b.String())
}

func (p *progressView) runLine(run sqlapi.RunRow) string {
	switch run.Status {
	case "completed":
		return p.c(ansiGreen) + runStatusText(run) + p.c(ansiReset)
	case "failed", "cancelled":
		return p.c(ansiRed) + runStatusText(run) + p.c(ansiReset)
	default:
		return fmt.Sprintf("%s%s%s %s", p.c(ansiYellow), run.Status, p.c(ansiReset), formatDuration(time.Since(run.StartedAt)))
	}
}

// finish reports the end of the run: its duration and its output (or its error).
func (p *progressView) finish(run *sqlapi.RunDetail) {
	if !p.ansi {
		fmt.Fprintf(p.w, "run %s\n", runStatusText(run.Run))
	}
	switch run.Run.Status {
	case "completed":
		fmt.Fprintf(p.w, "output:\n%s\n", indentJSON(completedOutput(run.Run.Status, run.Run.Output)))
	case "failed":
		for _, s := range run.Steps {
			if s.Status == "failed" {
				fmt.Fprintf(p.w, "step %s failed: %s\n", s.StepSlug, deref(s.ErrorMessage))
			}
		}
	case "cancelled":
		fmt.Fprintln(p.w, runError(run))
	}
}

// warn shows what the run waits on that needs attention. The plain view prints each warning once, when it
// appears, and says when the warnings are gone; the terminal view shows the current ones under the steps.
func (p *progressView) warn(notes []healthNote) {
	if p.ansi {
		p.warnings = notes
		if p.last != nil {
			p.redraw()
		}
		return
	}
	now := map[string]bool{}
	for _, n := range notes {
		now[n.Text] = true
		if !p.warned[n.Text] {
			fmt.Fprintf(p.w, "  warning: %s\n", n.Text)
		}
	}
	if len(notes) == 0 && len(p.warned) > 0 {
		fmt.Fprintln(p.w, "  (the run no longer waits on anything unattended)")
	}
	p.warned = now
}

// watchRun follows a run until it is completed or failed, drawing each change on view, and returns its final
// state. It listens for the run's events (client) and re-reads the run (db) on each burst of them, and also every
// poll interval, so it ends even if events cannot be delivered. Until the listener is ready (or if it never becomes
// ready, e.g. when no extra connection can be opened) it relies on the poll alone.
//
// Each read also checks (at most once per poll interval) what the run waits on that will not come by itself — no
// alive worker on a queue, a task waiting for stalled-task recovery — and shows it on view (view.warn).
func watchRun(ctx context.Context, client *pgflow.Client, db sqlapi.DBTX, runID string, view *progressView, poll time.Duration) (*sqlapi.RunDetail, error) {
	if _, err := readRun(ctx, db, runID, false); err != nil { // a clear error for unknown ids before subscribing
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

	var lastHealth time.Time
	pollTicker := time.NewTicker(poll)
	defer pollTicker.Stop()
	var redraw <-chan time.Time
	if view.ansi {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		redraw = t.C
	}
	for {
		run, err := readRun(ctx, db, runID, false)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		view.update(run)
		if runTerminal(run.Run.Status) {
			return run, nil
		}
		if time.Since(lastHealth) >= poll {
			lastHealth = time.Now()
			notes, err := runHealth(ctx, client, run)
			if err != nil && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err == nil { // a failed check only costs the warning
				view.warn(notes)
			}
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
