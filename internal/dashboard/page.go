package dashboard

// What every page shares: the layout's data, rendering, and the error page.

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow/internal/pgerr"
)

// base is what every page's layout needs.
type base struct {
	Title string
	Nav   string // flows | runs | workers | schedules
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

// readFailure turns a failed database read into what the user sees: an HTTP status and a message that names
// what could not be read and says what to do. A schema that is missing or older than the dashboard is not a
// server bug but a database to migrate (503 with the `pgflow migrate up` hint); a database that cannot be reached
// right now is 503 too; anything else is 500 with the database's own message, without Go call wrapping.
func readFailure(what string, err error) (int, string) {
	switch {
	case pgerr.MissingSchema(err):
		return http.StatusServiceUnavailable, "cannot read " + what + ": the pgflow schema is not installed in this " +
			"database, or is older than this dashboard (" + pgerr.Reason(err) + "); run `pgflow migrate up`"
	case pgerr.Classify(err) == pgerr.KindCanceled:
		return http.StatusServiceUnavailable, "cannot read " + what + ": the request was canceled"
	case pgerr.Transient(err):
		return http.StatusServiceUnavailable, "cannot read " + what + " right now: " + pgerr.Reason(err) +
			" (the database may be restarting or unreachable; reload the page)"
	default:
		return http.StatusInternalServerError, "cannot read " + what + ": " + pgerr.Reason(err)
	}
}

// failRead renders the error page for a failed read of what. Everything but a canceled request is logged.
func (s *Server) failRead(w http.ResponseWriter, r *http.Request, what string, err error) {
	status, msg := readFailure(what, err)
	s.logReadError(r, what, err)
	s.fail(w, r, status, msg, nil)
}

func (s *Server) logReadError(r *http.Request, what string, err error) {
	if pgerr.Classify(err) != pgerr.KindCanceled {
		s.log.Error("dashboard: read failed", "method", r.Method, "path", r.URL.Path, "read", what, "error", err)
	}
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

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
