package dashboard

// The run list (/runs): filtered by flow and status, paginated, live through /events.

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

type runsPage struct {
	base
	Flow, Status string
	Flows        []string
	Statuses     []string
	Runs         []sqlapi.RunSummary
	Total        int64
	Page, Pages  int
	PageSize     int
	First, Last  int64  // 1-based positions of the rows shown
	Search       string // the run id searched for
	SearchError  string // why the search found nothing
	PrevURL      string
	NextURL      string
	EventsURL    string
	FragmentURL  string
}

func (s *Server) handleRuns(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	flow, status := q.Get("flow"), q.Get("status")
	search, searchErr := strings.TrimSpace(q.Get("run")), ""
	if search != "" {
		if id, ok := canonicalUUID(search); !ok {
			searchErr = fmt.Sprintf("%q is not a run id (a UUID such as 0f8fad5b-d9cb-469f-a165-70867728950e)", search)
		} else if found, err := sqlapi.GetRunWithStates(ctx, s.cfg.Pool, id); err != nil {
			s.failRead(w, r, "run "+id, err)
			return
		} else if found == nil {
			searchErr = "there is no run " + id
		} else {
			redirect(w, r, "/runs/"+id, "")
			return
		}
	}
	if status != "" && !contains(runStatuses, status) {
		s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("unknown run status %q (use started, completed, failed or cancelled)", status), nil)
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
	runs, total, err := sqlapi.ListRuns(ctx, s.cfg.Pool, sqlapi.ListRunsParams{
		Flow: flow, Status: status, Limit: size, Offset: (pageNo - 1) * size,
	})
	if err != nil {
		s.failRead(w, r, "the runs", err)
		return
	}
	flows, err := sqlapi.ListFlows(ctx, s.cfg.Pool, sqlapi.ListFlowsParams{})
	if err != nil {
		s.failRead(w, r, "the flows", err)
		return
	}
	page := runsPage{
		base: base{Title: "Runs", Nav: "runs", Now: time.Now()},
		Flow: flow, Status: status, Statuses: runStatuses, Search: search, SearchError: searchErr,
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
