package dashboard

// Run actions: cancel a run, resume it, or retry it as a new run. Only with a token and Config.Actions: the
// run page then offers buttons that lead to a confirmation page, whose form POSTs with a CSRF token.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// csrfField is the form field that carries the CSRF token.
const csrfField = "csrf"

// maxReasonChars bounds a cancel reason typed into the form.
const maxReasonChars = 1000

// actionsEnabled reports whether the run page offers cancel and retry.
func (s *Server) actionsEnabled() bool { return s.cfg.Token != "" && s.cfg.Actions != nil }

// csrfToken is derived from the dashboard token: only someone who holds the token (or a session cookie made
// from it, through a page the dashboard served) can know it, and a page of another site cannot read it.
func csrfToken(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("pgflow dashboard csrf"))
	return hex.EncodeToString(m.Sum(nil))
}

// action is one run action as the confirmation page and the POST handler know it.
type action struct {
	Name    string // cancel | retry | retry-fresh
	Verb    string // the button's words
	Explain string
}

var actions = map[string]action{
	"cancel": {Name: "cancel", Verb: "Cancel run", Explain: "The run becomes cancelled at once: no further step " +
		"starts, its queued tasks are removed from their queues, running handlers are asked to stop and their " +
		"results are ignored. Retry resumes it later."},
	"retry": {Name: "retry", Verb: "Retry run", Explain: "The run returns to started: completed steps keep their " +
		"outputs and are not run again; failed and not-run steps get fresh attempts."},
	"retry-fresh": {Name: "retry-fresh", Verb: "Retry as new run", Explain: "A new run of the same flow starts " +
		"with the same input, linked to this one; this run stays as it is."},
}

// allowedFor reports whether a run in status may get the action (the database decides in the end).
func allowedFor(name, status string) bool {
	switch name {
	case "cancel":
		return status == "started"
	case "retry":
		return status == "failed" || status == "cancelled"
	case "retry-fresh":
		return status == "failed" || status == "cancelled" || status == "completed"
	}
	return false
}

type confirmPage struct {
	base
	RunID, FlowSlug, Status string
	Action                  action
	CSRF                    string
	PostURL                 string
}

// handleConfirm shows the confirmation step: what the action does and a form that POSTs it.
func (s *Server) handleConfirm(w http.ResponseWriter, r *http.Request) {
	if !s.actionsEnabled() {
		s.fail(w, r, http.StatusNotFound, "run actions are off: the dashboard is read-only (it needs a token and a "+
			"writable connection for them)", nil)
		return
	}
	id, ok := canonicalUUID(r.PathValue("id"))
	if !ok {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("%q is not a run id (a UUID)", r.PathValue("id")), nil)
		return
	}
	name := r.URL.Query().Get("action")
	a, ok := actions[name]
	if !ok {
		s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("unknown action %q (use cancel, retry or retry-fresh)", name), nil)
		return
	}
	d, err := sqlapi.GetRunDetail(r.Context(), s.cfg.Pool, sqlapi.GetRunDetailParams{RunID: id})
	if err != nil {
		s.failRead(w, r, "run "+id, err)
		return
	}
	if d == nil {
		s.fail(w, r, http.StatusNotFound, "there is no run "+id, nil)
		return
	}
	if !allowedFor(name, d.Run.Status) {
		s.fail(w, r, http.StatusConflict, fmt.Sprintf("run %s is %s: %q is not possible", id, d.Run.Status, a.Verb), nil)
		return
	}
	s.show(w, r, "confirm", confirmPage{
		base:  base{Title: a.Verb + " " + shortID(id), Nav: "runs", Now: time.Now()},
		RunID: id, FlowSlug: d.Run.FlowSlug, Status: d.Run.Status, Action: a, CSRF: csrfToken(s.cfg.Token),
		PostURL: "/runs/" + id + "/" + a.Name,
	})
}

// checkCSRF refuses a POST without the right CSRF token, or sent by a page of another site, with 403 naming the
// problem.
func (s *Server) checkCSRF(w http.ResponseWriter, r *http.Request) bool {
	if origin := r.Header.Get("Origin"); origin != "" && origin != "null" {
		u, err := url.Parse(origin)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			http.Error(w, fmt.Sprintf("refused: the request comes from another site (Origin %q, this dashboard is %q)",
				origin, r.Host), http.StatusForbidden)
			return false
		}
	}
	got := r.PostFormValue(csrfField)
	switch {
	case got == "":
		http.Error(w, "refused: the CSRF token is missing (form field \"csrf\"); use the buttons of the run page",
			http.StatusForbidden)
		return false
	case !equalSecret(got, csrfToken(s.cfg.Token)):
		http.Error(w, "refused: the CSRF token is wrong (form field \"csrf\"); reload the run page and try again",
			http.StatusForbidden)
		return false
	}
	return true
}

// handleAction performs a confirmed action and redirects to the run it leaves (the new run for retry-fresh).
func (s *Server) handleAction(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.actionsEnabled() {
			http.Error(w, "run actions are off: the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if !s.checkCSRF(w, r) {
			return
		}
		id, ok := canonicalUUID(r.PathValue("id"))
		if !ok {
			s.fail(w, r, http.StatusNotFound, fmt.Sprintf("%q is not a run id (a UUID)", r.PathValue("id")), nil)
			return
		}
		ctx := r.Context()
		target := id
		var err error
		switch name {
		case "cancel":
			reason := strings.TrimSpace(r.PostFormValue("reason"))
			if n := len([]rune(reason)); n > maxReasonChars {
				s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("the reason has %d characters; at most %d", n, maxReasonChars), nil)
				return
			}
			_, err = s.cfg.Actions.CancelRun(ctx, id, &pgflow.CancelRunOpts{Reason: reason})
		case "retry", "retry-fresh":
			var run *pgflow.Run
			run, err = s.cfg.Actions.RetryRun(ctx, id, &pgflow.RetryRunOpts{Fresh: name == "retry-fresh"})
			if err == nil {
				target = run.ID
			}
		}
		switch {
		case errors.Is(err, pgflow.ErrRunNotFound):
			s.fail(w, r, http.StatusNotFound, "there is no run "+id, nil)
			return
		case errors.Is(err, pgflow.ErrRunFinished):
			s.fail(w, r, http.StatusConflict, fmt.Sprintf("%s: run %s: %v (nothing changed)", actions[name].Verb, id, err), nil)
			return
		case err != nil:
			s.log.Error("dashboard: run action failed", "action", name, "run_id", id, "error", err)
			s.fail(w, r, http.StatusInternalServerError, fmt.Sprintf("%s: run %s failed", actions[name].Verb, id), err)
			return
		}
		s.log.Info("dashboard: run action", "action", name, "run_id", id, "result_run_id", target)
		redirect(w, r, "/runs/"+target, url.Values{"done": {name}}.Encode())
	}
}
