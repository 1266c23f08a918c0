package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// Page sizes and limits.
const (
	defaultPageSize = 50
	maxPageSize     = 500
	recentRuns      = 20
	tasksPerStep    = 200
)

var runStatuses = []string{"started", "completed", "failed"}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// canonicalUUID returns id in PostgreSQL's lower-case text form, or false when it is not a UUID.
func canonicalUUID(id string) (string, bool) {
	if !uuidRE.MatchString(id) {
		return "", false
	}
	return strings.ToLower(id), true
}

// base is what every page's layout needs.
type base struct {
	Title string
	Nav   string // flows | runs | workers
	Now   time.Time
}

type errorPage struct {
	base
	Status  int
	Message string
}

// fail renders an error page. Server errors are logged with the request.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, msg string, err error) {
	if err != nil {
		s.log.Error("dashboard: request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		msg = msg + ": " + err.Error()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = s.pages.render(w, "error", false, errorPage{
		base:    base{Title: http.StatusText(status), Now: time.Now()},
		Status:  status,
		Message: msg,
	})
}

func (s *Server) show(w http.ResponseWriter, r *http.Request, name string, data any) {
	fragment := r.URL.Query().Get("fragment") == "1"
	var buf strings.Builder
	if err := s.pages.render(&buf, name, fragment, data); err != nil {
		s.fail(w, r, http.StatusInternalServerError, "cannot render the page", err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(buf.String()))
}

// ---- flows ----

type flowRow struct {
	sqlapi.DashFlow
	Queues []queueView
}

// queueView is one queue of a flow: its depth, or that it is missing.
type queueView struct {
	Name     string
	Missing  bool
	ShowName bool // the queue is not named like the flow
	sqlapi.DashQueue
}

type flowsPage struct {
	base
	Flows    []flowRow
	QueueErr string
}

// flowQueueNames returns the queues a flow's tasks go to: its default queue, lower(flow_slug), and every
// queue a step routes to (steps.queue_name, schema v0.17.0+), without repeats.
func flowQueueNames(flowSlug string, stepQueues []*string) []string {
	names := []string{strings.ToLower(flowSlug)}
	for _, q := range stepQueues {
		if q != nil && !contains(names, strings.ToLower(*q)) {
			names = append(names, strings.ToLower(*q))
		}
	}
	return names
}

// flowQueues looks a flow's queues up in the metrics read with DashQueues. Queue names are matched without
// regard to letter case, because a queue created before schema v0.17.0 may be listed in the flow slug's
// spelling.
func flowQueues(queues map[string]sqlapi.DashQueue, flowSlug string, stepQueues []*string) []queueView {
	byLower := make(map[string]sqlapi.DashQueue, len(queues))
	for name, q := range queues {
		byLower[strings.ToLower(name)] = q
	}
	var out []queueView
	for _, name := range flowQueueNames(flowSlug, stepQueues) {
		if q, ok := byLower[name]; ok {
			out = append(out, queueView{Name: q.Name, DashQueue: q, ShowName: q.Name != flowSlug})
		} else {
			out = append(out, queueView{Name: name, Missing: true, ShowName: name != flowSlug})
		}
	}
	return out
}

func (s *Server) handleFlows(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	flows, err := sqlapi.DashFlows(ctx, s.cfg.Pool)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "cannot read the flows", err)
		return
	}
	page := flowsPage{base: base{Title: "Flows", Nav: "flows", Now: time.Now()}}
	queues, err := sqlapi.DashQueues(ctx, s.cfg.Pool)
	if err != nil {
		page.QueueErr = err.Error()
	}
	for _, f := range flows {
		row := flowRow{DashFlow: f}
		if err == nil {
			sq := make([]*string, len(f.Steps))
			for i := range f.Steps {
				sq[i] = f.Steps[i].QueueName
			}
			row.Queues = flowQueues(queues, f.FlowSlug, sq)
		}
		page.Flows = append(page.Flows, row)
	}
	s.show(w, r, "flows", page)
}

// ---- flow ----

// optValue is a step option with where it comes from.
type optValue struct {
	Value     int
	Inherited bool // from the flow (or the built-in default for start_delay)
}

type stepOptions struct {
	sqlapi.DashStep
	MaxAttempts, BaseDelay, Timeout, StartDelay optValue
	Required, Forbidden                         string // compact JSON, "" when unset
}

type flowPage struct {
	base
	Flow   *sqlapi.DashFlowDetail
	DAG    dagView
	Steps  []stepOptions
	Runs   []sqlapi.DashRun
	Total  int64
	Queues []queueView
}

func effective(own *int, inherited int) optValue {
	if own == nil {
		return optValue{Value: inherited, Inherited: true}
	}
	return optValue{Value: *own}
}

func (s *Server) handleFlow(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	slug := r.PathValue("slug")
	def, err := sqlapi.DashFlowDefinition(ctx, s.cfg.Pool, slug)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "cannot read flow "+strconv.Quote(slug), err)
		return
	}
	if def == nil {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("there is no flow %q", slug), nil)
		return
	}
	dag, err := buildDAG(def.Steps, nil, "")
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "cannot lay out flow "+strconv.Quote(slug), err)
		return
	}
	runs, total, err := sqlapi.DashRuns(ctx, s.cfg.Pool, sqlapi.RunFilter{FlowSlug: slug, Limit: recentRuns})
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "cannot read the runs of flow "+strconv.Quote(slug), err)
		return
	}
	page := flowPage{
		base: base{Title: "Flow " + slug, Nav: "flows", Now: time.Now()},
		Flow: def, DAG: dag, Runs: runs, Total: total,
	}
	if queues, err := sqlapi.DashQueues(ctx, s.cfg.Pool); err == nil {
		sq := make([]*string, len(def.Steps))
		for i := range def.Steps {
			sq[i] = def.Steps[i].QueueName
		}
		page.Queues = flowQueues(queues, slug, sq)
	}
	zero := 0
	for _, st := range def.Steps {
		so := stepOptions{
			DashStep:    st,
			MaxAttempts: effective(st.MaxAttempts, def.MaxAttempts),
			BaseDelay:   effective(st.BaseDelay, def.BaseDelay),
			Timeout:     effective(st.Timeout, def.Timeout),
			StartDelay:  effective(st.StartDelay, zero),
		}
		so.Required = string(st.RequiredInputPattern)
		so.Forbidden = string(st.ForbiddenInputPattern)
		page.Steps = append(page.Steps, so)
	}
	s.show(w, r, "flow", page)
}

// ---- runs ----

type runsPage struct {
	base
	Flow, Status string
	Flows        []string
	Statuses     []string
	Runs         []sqlapi.DashRun
	Total        int64
	Page, Pages  int
	PageSize     int
	First, Last  int64 // 1-based positions of the rows shown
	PrevURL      string
	NextURL      string
	EventsURL    string
	FragmentURL  string
}

func (s *Server) handleRuns(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	flow, status := q.Get("flow"), q.Get("status")
	if status != "" && !contains(runStatuses, status) {
		s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("unknown run status %q (use started, completed or failed)", status), nil)
		return
	}
	pageNo, err := intParam(q, "page", 1, 1, maxPage)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err.Error(), nil)
		return
	}
	size, err := intParam(q, "limit", defaultPageSize, 1, maxPageSize)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err.Error(), nil)
		return
	}
	// The database takes the offset as a 32-bit integer: a page beyond that is a bad request, not a 500.
	if offset := int64(pageNo-1) * int64(size); offset > math.MaxInt32 {
		s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("page %d with limit %d starts at row %d, beyond the last "+
			"row the run list can show (%d)", pageNo, size, offset+1, int64(math.MaxInt32)+1), nil)
		return
	}
	runs, total, err := sqlapi.DashRuns(ctx, s.cfg.Pool, sqlapi.RunFilter{
		FlowSlug: flow, Status: status, Limit: size, Offset: (pageNo - 1) * size,
	})
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "cannot read the runs", err)
		return
	}
	flows, err := sqlapi.DashFlows(ctx, s.cfg.Pool)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "cannot read the flows", err)
		return
	}
	page := runsPage{
		base: base{Title: "Runs", Nav: "runs", Now: time.Now()},
		Flow: flow, Status: status, Statuses: runStatuses,
		Runs: runs, Total: total, Page: pageNo, PageSize: size,
		Pages: int((total + int64(size) - 1) / int64(size)),
	}
	for _, f := range flows {
		page.Flows = append(page.Flows, f.FlowSlug)
	}
	if len(runs) > 0 {
		page.First = int64((pageNo-1)*size) + 1
		page.Last = page.First + int64(len(runs)) - 1
	}
	link := func(p int) string {
		v := url.Values{}
		if flow != "" {
			v.Set("flow", flow)
		}
		if status != "" {
			v.Set("status", status)
		}
		if size != defaultPageSize {
			v.Set("limit", strconv.Itoa(size))
		}
		if p > 1 {
			v.Set("page", strconv.Itoa(p))
		}
		if len(v) == 0 {
			return "/runs"
		}
		return "/runs?" + v.Encode()
	}
	if pageNo > 1 {
		page.PrevURL = link(min(pageNo-1, max(page.Pages, 1)))
	}
	if int64(pageNo*size) < total {
		page.NextURL = link(pageNo + 1)
	}
	cur := link(pageNo)
	if strings.Contains(cur, "?") {
		page.FragmentURL = cur + "&fragment=1"
	} else {
		page.FragmentURL = cur + "?fragment=1"
	}
	page.EventsURL = "/events" + queryString("flow", flow)
	s.show(w, r, "runs", page)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// maxPage is the highest page number the run list accepts.
const maxPage = math.MaxInt32

// intParam reads the numeric query parameter name: def when it is absent, an error naming the parameter and
// the bad value when it is not a whole number from lo to hi (also when it repeats with different values, or
// does not fit an int).
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	vals := q[name]
	if len(vals) == 0 {
		return def, nil
	}
	raw := vals[0]
	for _, v := range vals[1:] {
		if v != raw {
			return 0, fmt.Errorf("%s is given more than once with different values (%q and %q)", name, raw, v)
		}
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < int64(lo) || n > int64(hi) {
		return 0, fmt.Errorf("%s must be a whole number from %d to %d (got %s=%q)", name, lo, hi, name, raw)
	}
	return int(n), nil
}

// ---- run ----

type taskView struct {
	sqlapi.DashTask
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
}

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, ok := canonicalUUID(r.PathValue("id"))
	if !ok {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("%q is not a run id (a UUID)", r.PathValue("id")), nil)
		return
	}
	run, err := sqlapi.GetRunWithStates(ctx, s.cfg.Pool, id)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "cannot read run "+id, err)
		return
	}
	if run == nil {
		s.fail(w, r, http.StatusNotFound, "there is no run "+id, nil)
		return
	}
	def, err := sqlapi.DashFlowDefinition(ctx, s.cfg.Pool, run.Run.FlowSlug)
	if err != nil || def == nil {
		if err == nil {
			err = fmt.Errorf("flow %q is gone", run.Run.FlowSlug)
		}
		s.fail(w, r, http.StatusInternalServerError, "cannot read the flow of run "+id, err)
		return
	}
	tasks, err := sqlapi.DashRunTasks(ctx, s.cfg.Pool, id, tasksPerStep, s.cfg.MaxInlineJSON)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "cannot read the tasks of run "+id, err)
		return
	}
	page, err := s.buildRunPage(run, def, tasks, time.Now())
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "cannot show run "+id, err)
		return
	}
	s.show(w, r, "run", page)
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

func (s *Server) buildRunPage(run *sqlapi.RunWithStates, def *sqlapi.DashFlowDetail, tasks []sqlapi.DashTask, now time.Time) (*runPage, error) {
	id := run.Run.RunID
	limit := s.cfg.MaxInlineJSON
	page := &runPage{
		base:   base{Title: "Run " + shortID(id) + " of " + run.Run.FlowSlug, Nav: "runs", Now: now},
		Run:    run.Run,
		Live:   run.Run.Status == "started",
		Input:  prettyJSON(nullRaw(run.Run.Input), limit, jsonLink(id, sqlapi.JSONPart{Kind: "input"})),
		APIURL: "/api/runs/" + id,
	}
	if run.Run.Status == "completed" {
		page.Output = prettyJSON(nullRaw(run.Run.Output), limit, jsonLink(id, sqlapi.JSONPart{Kind: "output"}))
	}
	page.EndedAt = run.Run.CompletedAt
	if page.EndedAt == nil {
		page.EndedAt = run.Run.FailedAt
	}
	end := now
	if page.EndedAt != nil {
		end = *page.EndedAt
	}
	page.Duration = formatDur(end.Sub(run.Run.StartedAt))
	page.FragmentURL = "/runs/" + id + "?fragment=1"
	if page.Live {
		page.EventsURL = "/events?run=" + id
	}

	defs := make(map[string]sqlapi.DashStep, len(def.Steps))
	for _, st := range def.Steps {
		defs[st.StepSlug] = st
	}
	states := make(map[string]sqlapi.StepStateRow, len(run.Steps))
	status := make(map[string]string, len(run.Steps))
	for _, st := range run.Steps {
		states[st.StepSlug] = st
		status[st.StepSlug] = st.Status
	}
	byStep := make(map[string][]sqlapi.DashTask)
	for _, t := range tasks {
		byStep[t.StepSlug] = append(byStep[t.StepSlug], t)
	}

	for _, d := range def.Steps {
		st, ok := states[d.StepSlug]
		if !ok {
			continue // a step added to the flow after this run started
		}
		v := stepView{
			Slug: d.StepSlug, Type: d.StepType, Status: st.Status, Index: d.StepIndex, Deps: d.Deps,
			MaxAttempts:  effective(d.MaxAttempts, def.MaxAttempts).Value,
			ErrorMessage: st.ErrorMessage, SkipReason: st.SkipReason,
			InitialTasks: st.InitialTasks, RemainingTasks: st.RemainingTasks,
			CreatedAt: st.CreatedAt, StartedAt: st.StartedAt, EndedAt: stepEnd(st),
		}
		if st.Status == "completed" {
			v.Output = prettyJSON(nullRaw(st.Output), limit, jsonLink(id, sqlapi.JSONPart{Kind: "step", StepSlug: d.StepSlug}))
		}
		if d.StepType == "single" && len(d.Deps) > 0 && st.StartedAt != nil {
			in := make(map[string]json.RawMessage, len(d.Deps))
			for _, dep := range d.Deps {
				if ds, ok := states[dep]; ok && ds.Status == "completed" {
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
		if d.StepType == "map" {
			src := run.Run.Input
			if len(d.Deps) == 1 {
				src = states[d.Deps[0]].Output
			}
			_ = json.Unmarshal(src, &elems) // not an array (yet): no task inputs to show
		}
		ts := byStep[d.StepSlug]
		v.TasksShown = len(ts)
		v.TasksTotal = len(ts)
		if st.InitialTasks != nil && *st.InitialTasks > v.TasksTotal {
			v.TasksTotal = *st.InitialTasks
		}
		if st.InitialTasks != nil && st.RemainingTasks != nil {
			v.TasksDone = *st.InitialTasks - *st.RemainingTasks
		}
		for _, t := range ts {
			v.Attempts += t.AttemptsCount
			if t.AttemptsCount > 1 {
				v.Retries += t.AttemptsCount - 1
			}
			tv := taskView{DashTask: t, EndedAt: t.CompletedAt}
			if tv.EndedAt == nil {
				tv.EndedAt = t.FailedAt
			}
			if t.MessageID != nil {
				tv.MessageIDText = strconv.FormatInt(*t.MessageID, 10)
			}
			tv.Output = taskOutput(t, limit, jsonLink(id, sqlapi.JSONPart{Kind: "task", StepSlug: d.StepSlug, TaskIndex: t.TaskIndex}))
			if t.TaskIndex < len(elems) {
				tv.Input = prettyJSON(elems[t.TaskIndex], limit, "")
			}
			v.Tasks = append(v.Tasks, tv)
		}
		page.Steps = append(page.Steps, v)
	}

	dag, err := buildDAG(def.Steps, status, "#step-")
	if err != nil {
		return nil, err
	}
	page.DAG = dag
	page.Timeline = buildTimeline(run.Run.StartedAt, end, page.Steps)
	return page, nil
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
func taskOutput(t sqlapi.DashTask, limit int, link string) jsonView {
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
	text, found, err := sqlapi.DashRunJSON(r.Context(), s.cfg.Pool, id, p)
	if err != nil {
		s.log.Error("dashboard: read JSON", "run_id", id, "part", p.Kind, "error", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
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

// apiRun is the JSON the dashboard serves for a run. Every identifier is a string.
type apiRun struct {
	Run   sqlapi.RunRow         `json:"run"`
	Steps []sqlapi.StepStateRow `json:"steps"`
	Tasks []apiTask             `json:"tasks"`
}

type apiTask struct {
	StepSlug      string     `json:"step_slug"`
	TaskIndex     int        `json:"task_index"`
	Status        string     `json:"status"`
	AttemptsCount int        `json:"attempts_count"`
	RequeuedCount int        `json:"requeued_count"`
	QueueName     *string    `json:"queue_name"`
	MessageID     *string    `json:"message_id"`
	LastWorkerID  *string    `json:"last_worker_id"`
	ErrorMessage  *string    `json:"error_message"`
	QueuedAt      time.Time  `json:"queued_at"`
	StartedAt     *time.Time `json:"started_at"`
	CompletedAt   *time.Time `json:"completed_at"`
	FailedAt      *time.Time `json:"failed_at"`
	OutputURL     *string    `json:"output_url"`
}

func (s *Server) handleRunAPI(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, ok := canonicalUUID(r.PathValue("id"))
	if !ok {
		writeJSONError(w, http.StatusNotFound, fmt.Sprintf("%q is not a run id (a UUID)", r.PathValue("id")))
		return
	}
	run, err := sqlapi.GetRunWithStates(ctx, s.cfg.Pool, id)
	if err == nil && run == nil {
		writeJSONError(w, http.StatusNotFound, "there is no run "+id)
		return
	}
	var tasks []sqlapi.DashTask
	if err == nil {
		tasks, err = sqlapi.DashRunTasks(ctx, s.cfg.Pool, id, 1<<30, 0)
	}
	if err != nil {
		s.log.Error("dashboard: run API", "run_id", id, "error", err)
		writeJSONError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := apiRun{Run: run.Run, Steps: run.Steps, Tasks: make([]apiTask, 0, len(tasks))}
	if out.Steps == nil {
		out.Steps = []sqlapi.StepStateRow{}
	}
	for _, t := range tasks {
		at := apiTask{
			StepSlug: t.StepSlug, TaskIndex: t.TaskIndex, Status: t.Status, AttemptsCount: t.AttemptsCount,
			RequeuedCount: t.RequeuedCount, QueueName: t.QueueName, LastWorkerID: t.LastWorkerID, ErrorMessage: t.ErrorMessage,
			QueuedAt: t.QueuedAt, StartedAt: t.StartedAt, CompletedAt: t.CompletedAt, FailedAt: t.FailedAt,
		}
		if t.MessageID != nil {
			m := strconv.FormatInt(*t.MessageID, 10)
			at.MessageID = &m
		}
		if t.OutputChars > 0 {
			u := jsonLink(id, sqlapi.JSONPart{Kind: "task", StepSlug: t.StepSlug, TaskIndex: t.TaskIndex})
			at.OutputURL = &u
		}
		out.Tasks = append(out.Tasks, at)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(out)
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// ---- workers ----

type workerView struct {
	sqlapi.WorkerRow
	Status string // alive | unresponsive | stopping | stopped
	Flow   string // the flow whose queue the worker serves, "" when no flow has that queue
}

type workersPage struct {
	base
	Workers []workerView
	All     bool
	Since   string
	Counts  map[string]int
}

func (s *Server) handleWorkers(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	all := r.URL.Query().Get("all") == "1"
	since := 24 * time.Hour
	if all {
		since = 0
	}
	rows, err := sqlapi.ListWorkers(ctx, s.cfg.Pool, since)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "cannot read the workers", err)
		return
	}
	flows, err := sqlapi.DashFlows(ctx, s.cfg.Pool)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "cannot read the flows", err)
		return
	}
	// The flow of a worker is the flow whose tasks go to the worker's queue (compared in lower case).
	byQueue := make(map[string]string, len(flows))
	for _, f := range flows {
		sq := make([]*string, len(f.Steps))
		for i := range f.Steps {
			sq[i] = f.Steps[i].QueueName
		}
		for _, q := range flowQueueNames(f.FlowSlug, sq) {
			if _, taken := byQueue[q]; !taken {
				byQueue[q] = f.FlowSlug
			}
		}
	}
	page := workersPage{
		base: base{Title: "Workers", Nav: "workers", Now: time.Now()},
		All:  all, Since: "24 hours", Counts: map[string]int{},
	}
	for _, row := range rows {
		v := workerView{WorkerRow: row, Status: row.Status(s.cfg.StaleAfter), Flow: byQueue[strings.ToLower(row.QueueName)]}
		page.Counts[v.Status]++
		page.Workers = append(page.Workers, v)
	}
	s.show(w, r, "workers", page)
}

// ---- DAG ----

type dagNode struct {
	Slug, Label, Type, Status string
	Href                      string
	X, Y, W, H                float64
	TX, TY                    float64 // label anchor
	Title                     string
}

type dagEdge struct {
	From, To, D string
	Status      string // the status of the dependency: an edge lights up when its source completes
}

type dagView struct {
	Width, Height float64
	Nodes         []dagNode
	Edges         []dagEdge
}

// buildDAG lays out the steps. status (optional) colours nodes by step status; hrefPrefix+slug is each node's
// link ("" for no links).
func buildDAG(steps []sqlapi.DashStep, status map[string]string, hrefPrefix string) (dagView, error) {
	in := make([]LayoutNode, len(steps))
	// step_index is a topological order; sort defensively in case the caller did not.
	sorted := append([]sqlapi.DashStep(nil), steps...)
	sort.SliceStable(sorted, func(a, b int) bool { return sorted[a].StepIndex < sorted[b].StepIndex })
	for i, st := range sorted {
		in[i] = LayoutNode{ID: st.StepSlug, Deps: st.Deps}
	}
	lay, err := ComputeLayout(in)
	if err != nil {
		return dagView{}, err
	}
	v := dagView{Width: lay.Width, Height: lay.Height}
	for i, n := range lay.Nodes {
		st := sorted[i]
		node := dagNode{
			Slug: n.ID, Label: ShortLabel(n.ID), Type: st.StepType, Status: "none",
			X: n.X, Y: n.Y, W: n.W, H: n.H, TX: n.X + n.W/2, TY: n.Y + n.H/2,
		}
		title := n.ID + " (" + st.StepType + ")"
		if status != nil {
			if s, ok := status[n.ID]; ok {
				node.Status = s
				title += ": " + s
			}
		}
		if hrefPrefix != "" {
			node.Href = hrefPrefix + n.ID
		}
		node.Title = title
		v.Nodes = append(v.Nodes, node)
	}
	for _, e := range lay.Edges {
		de := dagEdge{From: e.From, To: e.To, D: EdgePath(e.Points), Status: "none"}
		if status != nil {
			if s, ok := status[e.From]; ok {
				de.Status = s
			}
		}
		v.Edges = append(v.Edges, de)
	}
	return v, nil
}

// ---- timeline ----

type timelineBar struct {
	Slug, Status string
	Y            float64
	WaitX, WaitW float64 // created → started (or → skipped/failed when it never started)
	RunX, RunW   float64 // started → ended (or → now)
	Started      bool
	Label        string
	Title        string
}

type timelineTick struct {
	X     float64
	Label string
}

type timelineView struct {
	Width, Height float64
	LabelWidth    float64
	Bars          []timelineBar
	Ticks         []timelineTick
}

const (
	tlWidth      = 760.0
	tlLabelWidth = 170.0
	tlRow        = 26.0
	tlTop        = 22.0
)

// buildTimeline draws each step on a shared time axis from the run's start to its end (or now).
func buildTimeline(start, end time.Time, steps []stepView) timelineView {
	span := end.Sub(start)
	if span <= 0 {
		span = time.Millisecond
	}
	plot := tlWidth - tlLabelWidth - 60
	x := func(t time.Time) float64 {
		f := float64(t.Sub(start)) / float64(span)
		return tlLabelWidth + math.Max(0, math.Min(1, f))*plot
	}
	v := timelineView{Width: tlWidth, LabelWidth: tlLabelWidth, Height: tlTop + float64(len(steps))*tlRow + 8}
	for i := 0; i <= 4; i++ {
		t := start.Add(span * time.Duration(i) / 4)
		v.Ticks = append(v.Ticks, timelineTick{X: x(t), Label: "+" + formatDur(t.Sub(start))})
	}
	for i, st := range steps {
		b := timelineBar{Slug: st.Slug, Status: st.Status, Y: tlTop + float64(i)*tlRow}
		stop := end
		if st.EndedAt != nil {
			stop = *st.EndedAt
		}
		if st.StartedAt != nil {
			b.Started = true
			b.WaitX, b.WaitW = x(st.CreatedAt), math.Max(0, x(*st.StartedAt)-x(st.CreatedAt))
			b.RunX, b.RunW = x(*st.StartedAt), math.Max(2, x(stop)-x(*st.StartedAt))
			b.Label = formatDur(stop.Sub(*st.StartedAt))
		} else if st.EndedAt != nil {
			b.WaitX, b.WaitW = x(st.CreatedAt), math.Max(0, x(stop)-x(st.CreatedAt))
			b.Label = st.Status
		} else {
			b.WaitX, b.WaitW = x(st.CreatedAt), math.Max(0, x(end)-x(st.CreatedAt))
			b.Label = "waiting"
		}
		b.Title = fmt.Sprintf("%s: %s", st.Slug, st.Status)
		if st.StartedAt != nil {
			b.Title += fmt.Sprintf(", started +%s", formatDur(st.StartedAt.Sub(start)))
		}
		if st.EndedAt != nil {
			b.Title += fmt.Sprintf(", ended +%s", formatDur(st.EndedAt.Sub(start)))
		}
		if st.Attempts > 0 {
			b.Title += fmt.Sprintf(", %d attempt(s)", st.Attempts)
		}
		v.Bars = append(v.Bars, b)
	}
	return v
}

var errNotFlusher = errors.New("dashboard: the response writer cannot flush, so it cannot stream events")
