package dashboard

// One run's page (/runs/{id}) and its stored JSON documents (/runs/{id}/json).

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

type taskView struct {
	sqlapi.Task
	MessageIDText string
	Input         jsonView
	Output        jsonView
	EndedAt       *time.Time
}

type stepView struct {
	Slug, Type, Status string
	Index              int
	Deps               []string
	MaxAttempts        int
	Attempts           int // attempts used: the task's for a single step, the sum over tasks for a map
	Retries            int // attempts beyond the first, over all tasks
	ErrorMessage       *string
	SkipReason         *string
	NotRun             string // "not run (run failed)" / "not run (run cancelled)" for a step its run ended before
	InitialTasks       *int
	RemainingTasks     *int
	CreatedAt          time.Time
	StartedAt          *time.Time
	EndedAt            *time.Time
	Input              jsonView // single steps with dependencies: what the handler received
	Output             jsonView
	Tasks              []taskView
	TasksShown         int
	TasksTotal         int
	TasksDone          int
	TaskCounts         sqlapi.TaskSummary
}

type runPage struct {
	base
	Run         sqlapi.RunRow
	EndedAt     *time.Time
	Duration    string
	Live        bool
	DAG         dagView
	Timeline    timelineView
	Steps       []stepView
	Input       jsonView
	Output      jsonView
	EventsURL   string
	FragmentURL string
	APIURL      string
	// Error is the run's error, shown at the top: the failed steps and their messages, or the cancellation.
	Error string
	// Remaining is "1 step remaining", "3 steps remaining".
	Remaining string
	// Waiting says what a started run waits on that will not come by itself: queues no alive worker serves, and
	// tasks waiting for stalled-task recovery.
	Waiting []string
	// Actions: the buttons the run page offers (with a token and Config.Actions), and what was just done.
	Actions                            bool
	CanCancel, CanRetry, CanRetryFresh bool
	Done                               string
}

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	id, ok := canonicalUUID(r.PathValue("id"))
	if !ok {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("%q is not a run id (a UUID)", r.PathValue("id")), nil)
		return
	}
	d, err := sqlapi.GetRunDetail(r.Context(), s.cfg.Pool, sqlapi.GetRunDetailParams{
		RunID: id, TasksPerStep: tasksPerStep, OutputChars: s.cfg.MaxInlineJSON,
	})
	if err != nil {
		s.failRead(w, r, "run "+id, err)
		return
	}
	if d == nil {
		s.fail(w, r, http.StatusNotFound, "there is no run "+id, nil)
		return
	}
	page, err := s.buildRunPage(d, time.Now())
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "cannot show run "+id, err)
		return
	}
	if d.Run.Status == "started" {
		page.Waiting = s.runWaiting(r, id)
	}
	if s.actionsEnabled() {
		page.Actions = true
		page.CanCancel = allowedFor("cancel", d.Run.Status)
		page.CanRetry = allowedFor("retry", d.Run.Status)
		page.CanRetryFresh = allowedFor("retry-fresh", d.Run.Status)
		if a, ok := actions[r.URL.Query().Get("done")]; ok {
			page.Done = a.Verb + ": done."
		}
	}
	s.show(w, r, "run", page)
}

// runWaiting lists, for the run page, the queues a started run waits on that no alive worker serves and its tasks
// that wait for stalled-task recovery (pgflow.Client.RunHealth, with the workers page's notion of a live worker),
// so nothing waits silently. A read error is shown as such.
func (s *Server) runWaiting(r *http.Request, runID string) []string {
	h, err := s.runs.RunHealth(r.Context(), runID, &pgflow.RunHealthOpts{AliveWithin: s.cfg.StaleAfter})
	if err != nil {
		return []string{"cannot tell whether workers serve this run: " + err.Error()}
	}
	var out []string
	for _, q := range h.WaitingWithoutWorkers() {
		seen := "no worker ever registered for it"
		if q.LastHeartbeatAt != nil {
			seen = "the last worker was seen " + q.LastHeartbeatAt.UTC().Format(time.RFC3339)
		}
		out = append(out, fmt.Sprintf("No alive worker serves queue %q (%d queued, %d started task(s)); %s. Start a worker for it.",
			q.Name, q.QueuedTasks, q.StartedTasks, seen))
	}
	for _, t := range h.StalledTasks {
		out = append(out, fmt.Sprintf("Task %d of step %q (attempt %d) is past its %ds timeout: it waits for stalled-task recovery.",
			t.TaskIndex, t.StepSlug, t.Attempt, int(t.Timeout/time.Second)))
	}
	return out
}

func jsonLink(runID string, p sqlapi.JSONPart) string {
	v := url.Values{"part": {p.Kind}}
	if p.StepSlug != "" {
		v.Set("step", p.StepSlug)
	}
	if p.Kind == "task" {
		v.Set("task", strconv.Itoa(p.TaskIndex))
	}
	return "/runs/" + runID + "/json?" + v.Encode()
}

func (s *Server) buildRunPage(d *sqlapi.RunDetail, now time.Time) (*runPage, error) {
	run := d.Run
	id := run.RunID
	limit := s.cfg.MaxInlineJSON
	page := &runPage{
		base:   base{Title: "Run " + shortID(id) + " of " + run.FlowSlug, Nav: "runs", Now: now},
		Run:    run,
		Live:   run.Status == "started",
		Input:  prettyJSON(nullRaw(run.Input), limit, jsonLink(id, sqlapi.JSONPart{Kind: "input"})),
		APIURL: "/api/runs/" + id,
	}
	if run.Status == "completed" {
		page.Output = prettyJSON(nullRaw(run.Output), limit, jsonLink(id, sqlapi.JSONPart{Kind: "output"}))
	}
	page.EndedAt = runEnd(run)
	page.Error = runErrorText(d)
	page.Remaining = fmt.Sprintf("%d %s remaining", run.RemainingSteps, pluralWord(run.RemainingSteps, "step", "steps"))
	page.Live = run.Status == "started"
	end := now
	if page.EndedAt != nil {
		end = *page.EndedAt
	}
	page.Duration = formatDur(end.Sub(run.StartedAt))
	page.FragmentURL = "/runs/" + id + "?fragment=1"
	if page.Live {
		page.EventsURL = "/events?run=" + id
	}

	status := make(map[string]string, len(d.Steps))
	for _, st := range d.Steps {
		status[st.StepSlug] = st.Status
	}
	for _, st := range d.Steps {
		def := st.Definition
		v := stepView{
			Slug: def.StepSlug, Type: def.StepType, Status: st.Status, Index: def.StepIndex, Deps: def.Deps,
			MaxAttempts:  d.Flow.EffectiveMaxAttempts(def),
			Attempts:     st.Tasks.AttemptsTotal,
			Retries:      st.Tasks.Retries,
			ErrorMessage: st.ErrorMessage, SkipReason: st.SkipReason, NotRun: notRun(st.Status, st.SkipReason),
			TaskCounts:   st.Tasks,
			InitialTasks: st.InitialTasks, RemainingTasks: st.RemainingTasks,
			CreatedAt: st.CreatedAt, StartedAt: st.StartedAt, EndedAt: stepEnd(st.StepStateRow),
		}
		if st.Status == "completed" {
			v.Output = prettyJSON(nullRaw(st.Output), limit, jsonLink(id, sqlapi.JSONPart{Kind: "step", StepSlug: def.StepSlug}))
		}
		if def.StepType == "single" && len(def.Deps) > 0 && st.StartedAt != nil {
			in := make(map[string]json.RawMessage, len(def.Deps))
			for _, dep := range def.Deps {
				if ds := d.Step(dep); ds != nil && ds.Status == "completed" {
					in[dep] = nullRaw(ds.Output)
				}
			}
			if raw, err := json.Marshal(in); err == nil {
				v.Input = prettyJSON(raw, limit, "")
				if v.Input.Truncated {
					v.Input.Link = "" // not stored anywhere: the outputs of the dependencies are linked instead
				}
			}
		}
		var elems []json.RawMessage
		if def.StepType == "map" {
			src := run.Input
			if len(def.Deps) == 1 {
				if ds := d.Step(def.Deps[0]); ds != nil {
					src = ds.Output
				}
			}
			_ = json.Unmarshal(src, &elems) // not an array (yet): no task inputs to show
		}
		v.TasksShown = len(st.TaskList)
		v.TasksTotal = max(len(st.TaskList), st.Tasks.Total)
		if st.InitialTasks != nil && *st.InitialTasks > v.TasksTotal {
			v.TasksTotal = *st.InitialTasks
		}
		if st.InitialTasks != nil && st.RemainingTasks != nil {
			v.TasksDone = *st.InitialTasks - *st.RemainingTasks
		}
		for _, t := range st.TaskList {
			tv := taskView{Task: t, EndedAt: t.CompletedAt}
			if tv.EndedAt == nil {
				tv.EndedAt = t.FailedAt
			}
			if t.MessageID != nil {
				tv.MessageIDText = strconv.FormatInt(*t.MessageID, 10)
			}
			tv.Output = taskOutput(t, limit, jsonLink(id, sqlapi.JSONPart{Kind: "task", StepSlug: def.StepSlug, TaskIndex: t.TaskIndex}))
			if t.TaskIndex < len(elems) {
				tv.Input = prettyJSON(elems[t.TaskIndex], limit, "")
			}
			v.Tasks = append(v.Tasks, tv)
		}
		page.Steps = append(page.Steps, v)
	}

	dag, err := buildDAG(d.Flow.Steps, status, "#step-")
	if err != nil {
		return nil, err
	}
	for i := range dag.Nodes {
		n := &dag.Nodes[i]
		if n.Type != "map" {
			continue
		}
		for _, sv := range page.Steps {
			if sv.Slug == n.Slug && sv.InitialTasks != nil {
				n.Counts = mapCounts(sv)
				n.Title += " · " + n.Counts
			}
		}
	}
	page.DAG = dag
	page.Timeline = buildTimeline(run.StartedAt, end, page.Steps)
	return page, nil
}

// mapCounts is a map step's task counts for its DAG node: "3/5 done", with failed or cancelled tasks when
// there are some.
func mapCounts(v stepView) string {
	s := fmt.Sprintf("%d/%d done", v.TasksDone, v.TasksTotal)
	if v.TaskCounts.Failed > 0 {
		s += fmt.Sprintf(", %d failed", v.TaskCounts.Failed)
	}
	if v.TaskCounts.Started > 0 && v.Status == "started" {
		s += fmt.Sprintf(", %d running", v.TaskCounts.Started)
	}
	return s
}

// notRun names a step its run ended before: skipped with reason run_failed or run_cancelled.
func notRun(status string, reason *string) string {
	if status != "skipped" || reason == nil {
		return ""
	}
	switch *reason {
	case "run_failed":
		return "not run (run failed)"
	case "run_cancelled":
		return "not run (run cancelled)"
	}
	return ""
}

// runEnd is when the run ended (completed, failed or cancelled); nil while it is started.
func runEnd(run sqlapi.RunRow) *time.Time {
	switch {
	case run.CompletedAt != nil:
		return run.CompletedAt
	case run.FailedAt != nil:
		return run.FailedAt
	}
	if at, _ := runCancel(run); at != nil {
		return at
	}
	return nil
}

// runCancel returns when and why the run was cancelled (nil when it was not, or no reason was given).
func runCancel(run sqlapi.RunRow) (*time.Time, *string) {
	return run.CancelledAt, run.CancelReason
}

// runErrorText is a failed run's failed steps with their messages, or a cancelled run's reason; "" otherwise.
func runErrorText(d *sqlapi.RunDetail) string {
	switch d.Run.Status {
	case "cancelled":
		msg := "The run was cancelled"
		if _, reason := runCancel(d.Run); reason != nil && *reason != "" {
			msg += ": " + *reason
		}
		return msg + "."
	case "failed":
		var parts []string
		for _, st := range d.Steps {
			if st.Status == "failed" {
				parts = append(parts, fmt.Sprintf("step %s: %s", st.StepSlug, derefStr(st.ErrorMessage)))
			}
		}
		if len(parts) == 0 {
			return "The run failed."
		}
		return "The run failed: " + strings.Join(parts, "; ")
	}
	return ""
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// nullRaw turns an absent document into nil and keeps JSON null as "null".
func nullRaw(raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return nil
	}
	return raw
}

func stepEnd(st sqlapi.StepStateRow) *time.Time {
	switch {
	case st.CompletedAt != nil:
		return st.CompletedAt
	case st.FailedAt != nil:
		return st.FailedAt
	default:
		return st.SkippedAt
	}
}

// taskOutput shows a task's output: pretty when the database sent it whole, the raw beginning when it cut it.
func taskOutput(t sqlapi.Task, limit int, link string) jsonView {
	if t.Output == nil {
		return jsonView{}
	}
	if t.Truncated() {
		return jsonView{Present: true, Text: *t.Output, Truncated: true, Chars: t.OutputChars, Link: link}
	}
	return prettyJSON([]byte(*t.Output), limit, link)
}

func (s *Server) handleRunJSON(w http.ResponseWriter, r *http.Request) {
	id, ok := canonicalUUID(r.PathValue("id"))
	if !ok {
		http.Error(w, fmt.Sprintf("%q is not a run id (a UUID)", r.PathValue("id")), http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	p := sqlapi.JSONPart{Kind: q.Get("part"), StepSlug: q.Get("step")}
	switch p.Kind {
	case "input", "output":
	case "step", "task":
		if p.StepSlug == "" {
			http.Error(w, "part="+p.Kind+" needs step=<step slug>", http.StatusBadRequest)
			return
		}
		if p.Kind == "task" {
			if !q.Has("task") {
				http.Error(w, "part=task needs task=<task index>", http.StatusBadRequest)
				return
			}
			n, err := intParam(q, "task", 0, 0, math.MaxInt32)
			if err != nil {
				http.Error(w, "part=task: "+err.Error(), http.StatusBadRequest)
				return
			}
			p.TaskIndex = n
		}
	default:
		http.Error(w, fmt.Sprintf("unknown part %q (use input, output, step or task)", p.Kind), http.StatusBadRequest)
		return
	}
	text, found, err := sqlapi.GetRunJSON(r.Context(), s.cfg.Pool, id, p)
	if err != nil {
		what := fmt.Sprintf("the %s of run %s", p.Kind, id)
		status, msg := readFailure(what, err)
		s.logReadError(r, what, err)
		http.Error(w, msg, status)
		return
	}
	if !found {
		http.Error(w, fmt.Sprintf("run %s has no %s %s", id, p.Kind, p.StepSlug), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", "inline")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(text))
}
