package dashboard

// The schedule list (/schedules) and, with a token and Config.Actions, its Pause and Resume buttons: forms that
// POST /schedules/<name>/pause or /resume with the CSRF token, like the run actions. Pausing and resuming are
// reversible, so they need no confirmation page.

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// scheduleActions are the schedule actions, by the last segment of their POST path.
var scheduleActions = map[string]string{"pause": "Pause", "resume": "Resume"}

type schedulesPage struct {
	base
	Schedules []sqlapi.ScheduleRow
	Count     int64
	Paused    int
	Actions   bool
	CSRF      string
	Done      string // "paused <name>" / "resumed <name>" after an action
}

func (s *Server) handleSchedules(w http.ResponseWriter, r *http.Request) {
	rows, err := sqlapi.ListSchedules(r.Context(), s.cfg.Pool)
	if err != nil {
		s.failRead(w, r, "the schedules", err)
		return
	}
	page := schedulesPage{base: base{Title: "Schedules", Nav: "schedules", Now: time.Now()}, Schedules: rows,
		Count: int64(len(rows)), Actions: s.actionsEnabled()}
	for _, row := range rows {
		if row.Paused {
			page.Paused++
		}
	}
	if page.Actions {
		page.CSRF = csrfToken(s.cfg.Token)
	}
	q := r.URL.Query()
	if name := q.Get("schedule"); name != "" {
		switch q.Get("done") {
		case "pause":
			page.Done = "Paused schedule " + name + "."
		case "resume":
			page.Done = "Resumed schedule " + name + "."
		}
	}
	s.show(w, r, "schedules", page)
}

// handleScheduleAction pauses or resumes a schedule and redirects to the list.
func (s *Server) handleScheduleAction(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.actionsEnabled() {
			http.Error(w, "schedule actions are off: the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if !s.checkCSRF(w, r) {
			return
		}
		schedule := r.PathValue("name")
		call := s.cfg.Actions.PauseSchedule
		if name == "resume" {
			call = s.cfg.Actions.ResumeSchedule
		}
		_, err := call(r.Context(), schedule)
		switch {
		case errors.Is(err, pgflow.ErrScheduleNotFound):
			s.fail(w, r, http.StatusNotFound, fmt.Sprintf("there is no schedule %q", schedule), nil)
			return
		case err != nil:
			s.log.Error("dashboard: schedule action failed", "action", name, "schedule", schedule, "error", err)
			s.fail(w, r, http.StatusInternalServerError, fmt.Sprintf("%s schedule %q failed", scheduleActions[name], schedule), err)
			return
		}
		s.log.Info("dashboard: schedule action", "action", name, "schedule", schedule)
		redirect(w, r, "/schedules", url.Values{"done": {name}, "schedule": {schedule}}.Encode())
	}
}
