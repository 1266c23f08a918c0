package dashboard

// The flow list (/flows) and one flow's page (/flows/{slug}): definition, DAG, options, queues, recent runs.

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow/internal/pgerr"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

type flowRow struct {
	sqlapi.Flow
	Queues []queueView
}

// queueView is one queue of a flow: its depth, or that it is missing.
type queueView struct {
	Name     string
	Missing  bool
	ShowName bool // the queue is not named like the flow
	sqlapi.QueueMetrics
}

type flowsPage struct {
	base
	Flows    []flowRow
	QueueErr string
}

// flowQueueNames returns the queues a flow's tasks go to: its default queue, lower(flow_slug) (not for a flow with
// per-step queues, which has none), and every queue a step routes to (steps.queue_name, schema v0.17.0+), without
// repeats.
func flowQueueNames(flowSlug, queueMode string, stepQueues []*string) []string {
	var names []string
	if queueMode != "step" {
		names = append(names, strings.ToLower(flowSlug))
	}
	for _, q := range stepQueues {
		if q != nil && !contains(names, strings.ToLower(*q)) {
			names = append(names, strings.ToLower(*q))
		}
	}
	return names
}

// flowQueues looks a flow's queues up in the metrics read with ListQueueMetrics. Queue names are matched without
// regard to letter case, because a queue created before schema v0.17.0 may be listed in the flow slug's
// spelling.
func flowQueues(queues map[string]sqlapi.QueueMetrics, flowSlug, queueMode string, stepQueues []*string) []queueView {
	byLower := make(map[string]sqlapi.QueueMetrics, len(queues))
	for name, q := range queues {
		byLower[strings.ToLower(name)] = q
	}
	var out []queueView
	for _, name := range flowQueueNames(flowSlug, queueMode, stepQueues) {
		if q, ok := byLower[name]; ok {
			out = append(out, queueView{Name: q.Name, QueueMetrics: q, ShowName: q.Name != flowSlug})
		} else {
			out = append(out, queueView{Name: name, Missing: true, ShowName: name != flowSlug})
		}
	}
	return out
}

func (s *Server) handleFlows(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	flows, err := sqlapi.ListFlows(ctx, s.cfg.Pool, sqlapi.ListFlowsParams{})
	if err != nil {
		s.failRead(w, r, "the flows", err)
		return
	}
	page := flowsPage{base: base{Title: "Flows", Nav: "flows", Now: time.Now()}}
	queues, err := sqlapi.ListQueueMetrics(ctx, s.cfg.Pool)
	if err != nil {
		page.QueueErr = pgerr.Reason(err) + pgerr.SchemaHint(err)
	}
	for _, f := range flows {
		row := flowRow{Flow: f}
		if err == nil {
			sq := make([]*string, len(f.Steps))
			for i := range f.Steps {
				sq[i] = f.Steps[i].QueueName
			}
			row.Queues = flowQueues(queues, f.FlowSlug, f.QueueMode, sq)
		}
		page.Flows = append(page.Flows, row)
	}
	s.show(w, r, "flows", page)
}

// optValue is a step option with where it comes from.
type optValue struct {
	Value     int
	Inherited bool // from the flow (or the built-in default for start_delay)
}

type stepOptions struct {
	sqlapi.StepDefinition
	Queue                                       *queueView // the step's own queue, with a flow with per-step queues
	MaxAttempts, BaseDelay, Timeout, StartDelay optValue
	Required, Forbidden                         string // compact JSON, "" when unset
}

type flowPage struct {
	base
	Flow   *sqlapi.FlowDefinition
	DAG    dagView
	Steps  []stepOptions
	Runs   []sqlapi.RunSummary
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
	def, err := sqlapi.GetFlowDefinition(ctx, s.cfg.Pool, slug)
	if err != nil {
		s.failRead(w, r, "flow "+strconv.Quote(slug), err)
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
	runs, total, err := sqlapi.ListRuns(ctx, s.cfg.Pool, sqlapi.ListRunsParams{Flow: slug, Limit: recentRuns})
	if err != nil {
		s.failRead(w, r, "the runs of flow "+strconv.Quote(slug), err)
		return
	}
	page := flowPage{
		base: base{Title: "Flow " + slug, Nav: "flows", Now: time.Now()},
		Flow: def, DAG: dag, Runs: runs, Total: total,
	}
	if queues, err := sqlapi.ListQueueMetrics(ctx, s.cfg.Pool); err == nil {
		sq := make([]*string, len(def.Steps))
		for i := range def.Steps {
			sq[i] = def.Steps[i].QueueName
		}
		page.Queues = flowQueues(queues, slug, def.QueueMode, sq)
	}
	byName := map[string]*queueView{}
	for i := range page.Queues {
		byName[strings.ToLower(page.Queues[i].Name)] = &page.Queues[i]
	}
	zero := 0
	for _, st := range def.Steps {
		so := stepOptions{
			StepDefinition: st,
			MaxAttempts:    effective(st.MaxAttempts, def.MaxAttempts),
			BaseDelay:      effective(st.BaseDelay, def.BaseDelay),
			Timeout:        effective(st.Timeout, def.Timeout),
			StartDelay:     effective(st.StartDelay, zero),
		}
		if def.QueueMode == "step" && st.QueueName != nil {
			so.Queue = byName[strings.ToLower(*st.QueueName)]
		}
		so.Required = string(st.RequiredInputPattern)
		so.Forbidden = string(st.ForbiddenInputPattern)
		page.Steps = append(page.Steps, so)
	}
	s.show(w, r, "flow", page)
}
