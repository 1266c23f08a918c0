package dashboard

// The worker list (/workers).

import (
	"net/http"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

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
		s.failRead(w, r, "the workers", err)
		return
	}
	flows, err := sqlapi.ListFlows(ctx, s.cfg.Pool, sqlapi.ListFlowsParams{})
	if err != nil {
		s.failRead(w, r, "the flows", err)
		return
	}
	// The flow of a worker is the flow whose tasks go to the worker's queue (compared in lower case).
	byQueue := make(map[string]string, len(flows))
	for _, f := range flows {
		sq := make([]*string, len(f.Steps))
		for i := range f.Steps {
			sq[i] = f.Steps[i].QueueName
		}
		for _, q := range flowQueueNames(f.FlowSlug, f.QueueMode, sq) {
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
