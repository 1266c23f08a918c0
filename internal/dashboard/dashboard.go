// Package dashboard is pgflow's web UI: server-rendered pages about flows, runs and workers, with the run page
// and the run list kept current through server-sent events fed by the engine's LISTEN/NOTIFY channels.
//
// Everything is in the Go binary: html/template pages, embedded CSS and a small script. The pages read the
// pgflow tables through internal/sqlapi and change nothing. It is read-only unless a token and Config.Actions
// are set: then the run page offers cancel and retry (POST with a CSRF token, after a confirmation page) and the
// schedules page pause and resume (POST with a CSRF token), performed through the public Client.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/notify"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures a Server. Pool is required.
type Config struct {
	// Pool reads the pgflow tables. The dashboard only runs selects.
	Pool *pgxpool.Pool
	// Listen opens the dedicated connection that LISTENs for run events. Default: a connection with the pool's
	// connection settings.
	Listen func(ctx context.Context) (*pgx.Conn, error)
	// Token, when set, is required on every request: "Authorization: Bearer <token>", or "?token=<token>" once,
	// which sets a cookie for the rest of the browser session.
	Token string
	// AllowedHosts are host names (without a port) that requests may use besides the loopback names when no
	// Token is set. Without a token, a request whose Host header is neither localhost, a name under .localhost,
	// a loopback IP address nor one of these is refused with 403, so that a web page cannot read the dashboard
	// through DNS rebinding. With a Token every host is accepted (the token protects the dashboard).
	AllowedHosts []string
	// Logger receives request errors. Default: slog.Default().
	Logger *slog.Logger
	// StaleAfter is how long a running worker may go without a heartbeat before it is shown as unresponsive.
	// Default: 30s.
	StaleAfter time.Duration
	// MaxInlineJSON is how many characters of a JSON document a page shows before it cuts it and links to the
	// whole document. Default: 64 KiB.
	MaxInlineJSON int
	// PingInterval is how often an idle event stream sends a comment to keep proxies from closing it.
	// Default: 15s.
	PingInterval time.Duration
	// Actions, with Token, turns on the run page's Cancel, Retry and "Retry as new run" buttons, which call
	// this client's CancelRun and RetryRun (so its pool must be writable). Without a token the dashboard stays
	// read-only: New refuses Actions without Token.
	Actions *pgflow.Client
}

// Server serves the dashboard. Create it with New, mount Handler, and Close it when done.
type Server struct {
	cfg      Config
	log      *slog.Logger
	pages    *pages
	listener *notify.Listener
	handler  http.Handler
	runs     *pgflow.Client // reads what a run waits on (RunHealth); it never listens
}

// New prepares a Server; nothing connects until the first event stream is opened.
func New(cfg Config) (*Server, error) {
	if cfg.Pool == nil {
		return nil, errors.New("dashboard: Config.Pool is required")
	}
	if cfg.Actions != nil && cfg.Token == "" {
		return nil, errors.New("dashboard: Config.Actions needs Config.Token: without a token the dashboard is read-only")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	hosts, err := NormalizeAllowedHosts(cfg.AllowedHosts)
	if err != nil {
		return nil, err
	}
	cfg.AllowedHosts = hosts
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 30 * time.Second
	}
	if cfg.MaxInlineJSON <= 0 {
		cfg.MaxInlineJSON = 64 << 10
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = 15 * time.Second
	}
	if cfg.Listen == nil {
		connCfg := cfg.Pool.Config().ConnConfig
		cfg.Listen = func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, connCfg.Copy())
		}
	}
	p, err := loadPages()
	if err != nil {
		return nil, err
	}
	runs, err := pgflow.NewClient(cfg.Pool, &pgflow.ClientConfig{Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	s := &Server{
		runs:  runs,
		cfg:   cfg,
		log:   cfg.Logger,
		pages: p,
		listener: notify.New(notify.Config{
			Connect: cfg.Listen,
			Logger:  cfg.Logger,
		}),
	}
	s.handler = s.routes()
	return s, nil
}

// Handler returns the dashboard's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Close ends every open event stream and closes the LISTEN connection. Call it before shutting the HTTP server
// down, so that streaming requests return.
func (s *Server) Close() {
	s.listener.Close()
	s.runs.Close()
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(fmt.Sprintf("dashboard: embedded static files: %v", err)) // cannot happen: the directory is embedded
	}
	mux.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		redirect(w, r, "/flows", "")
	})
	mux.HandleFunc("GET /flows", s.handleFlows)
	mux.HandleFunc("GET /flows/{slug}", s.handleFlow)
	mux.HandleFunc("GET /runs", s.handleRuns)
	mux.HandleFunc("GET /runs/{id}", s.handleRun)
	mux.HandleFunc("GET /runs/{id}/json", s.handleRunJSON)
	mux.HandleFunc("GET /runs/{id}/confirm", s.handleConfirm)
	for name := range actions {
		mux.HandleFunc("POST /runs/{id}/"+name, s.handleAction(name))
	}
	mux.HandleFunc("GET /api/runs/{id}", s.handleRunAPI)
	mux.HandleFunc("GET /workers", s.handleWorkers)
	mux.HandleFunc("GET /schedules", s.handleSchedules)
	for name := range scheduleActions {
		mux.HandleFunc("POST /schedules/{name}/"+name, s.handleScheduleAction(name))
	}
	mux.HandleFunc("GET /events", s.handleEvents)
	h := s.requireToken(sameSiteRedirects(mux))
	if !s.actionsEnabled() {
		h = readOnly(h)
	} else {
		h = onlyActionPosts(h)
	}
	if s.cfg.Token == "" {
		h = RequireKnownHost(s.cfg.AllowedHosts, h)
	}
	return securityHeaders(h)
}

// readOnly answers anything but GET and HEAD with 405: the dashboard changes nothing.
func readOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// onlyActionPosts lets POSTs through to the run actions only (the handlers check the CSRF token); other
// methods but GET and HEAD get 405.
func onlyActionPosts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && isActionPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "only the run and schedule actions (POST /runs/<id>/cancel, retry, retry-fresh; "+
				"POST /schedules/<name>/pause, resume) change anything",
				http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func isActionPath(p string) bool {
	if rest, ok := strings.CutPrefix(p, "/schedules/"); ok {
		_, name, ok := strings.Cut(rest, "/")
		_, known := scheduleActions[name]
		return ok && known
	}
	rest, ok := strings.CutPrefix(p, "/runs/")
	if !ok {
		return false
	}
	_, name, ok := strings.Cut(rest, "/")
	_, known := actions[name]
	return ok && known
}

// securityHeaders forbids inline scripts and styles, framing and referrers (a ?token= URL must not leak).
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy",
			"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "+
				"base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

func cacheStatic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}
