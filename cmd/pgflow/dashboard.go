package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/dashboard"
)

// dashboardTokenEnv is the environment variable that supplies --auth-token.
const dashboardTokenEnv = "PGFLOW_DASHBOARD_TOKEN"

func newDashboardCmd(g *globalOptions) *cobra.Command {
	var listen, token, metricsListen string
	var readOnlyFlag bool
	var allowedHosts []string
	var staleAfter time.Duration
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a web UI of flows, runs and workers (read-only unless a token is set)",
		Long: `Serve the pgflow dashboard: flows with their step graphs, runs (filtered, paginated, live), each run's
graph coloured by step status with a timeline, inputs, outputs and tasks, the workers and the schedules.

The run page and the run list update without reloading, fed by the engine's LISTEN/NOTIFY events. The
pages only read: their database sessions run with default_transaction_read_only on.

With a token (and without --read-only), the run page also offers Cancel, Retry and "Retry as new run": each
button leads to a confirmation page whose form POSTs with a CSRF token derived from the token; the schedules page
offers Pause and Resume (forms that POST with the same CSRF token). The actions run through their own small
writable connection pool. Without a token the dashboard is read-only.

It listens on 127.0.0.1:8080 by default. To listen on any other interface it needs a token (--auth-token or
$` + dashboardTokenEnv + `); with a token, every request must carry it, as "Authorization: Bearer <token>" or
by opening a page once with ?token=<token>, which sets a session cookie.

Without a token, requests must name the server by a loopback name (localhost, a name under .localhost,
127.0.0.1, [::1]) in their Host header; others get 403, which keeps web pages from reading the dashboard
through DNS rebinding. --allowed-host NAME (repeatable) accepts another name, e.g. the one a local reverse
proxy or /etc/hosts entry uses.

--metrics-listen ADDR also serves Prometheus metrics at http://ADDR/metrics: runs by status, queue depth and
workers, read from the database at each scrape (docs/observability.md). The same token rule applies.`,
		Example: `  pgflow dashboard --database-url postgres://localhost/app
  PGFLOW_DASHBOARD_TOKEN=s3cret pgflow dashboard --listen 0.0.0.0:8080
  pgflow dashboard --metrics-listen 127.0.0.1:9464
  pgflow dashboard --allowed-host dash.internal`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url, err := g.requireURL()
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("auth-token") {
				token = os.Getenv(dashboardTokenEnv)
			}
			hosts, err := dashboard.NormalizeAllowedHosts(allowedHosts)
			if err != nil {
				return fmt.Errorf("--allowed-host: %w", err)
			}
			if err := dashboard.CheckListenAddr(listen, token); err != nil {
				return err
			}
			if err := checkMetricsListen(metricsListen, token); err != nil {
				return err
			}
			return runDashboard(cmd.Context(), dashboardOptions{
				url: url, listen: listen, token: token, allowedHosts: hosts, staleAfter: staleAfter,
				actions: token != "" && !readOnlyFlag,
				log:     slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)),
				ready: func(addr string) {
					fmt.Fprintf(cmd.OutOrStdout(), "pgflow dashboard on http://%s/\n", addr)
				},
				metricsListen: metricsListen,
				metricsReady: func(addr string) {
					fmt.Fprintf(cmd.OutOrStdout(), "metrics on http://%s/metrics\n", addr)
				},
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "address to serve on (host:port)")
	// Not os.Getenv as the default: --help would print the token.
	cmd.Flags().StringVar(&token, "auth-token", "",
		"require this token on every request (default: $"+dashboardTokenEnv+")")
	cmd.Flags().StringArrayVar(&allowedHosts, "allowed-host", nil,
		"without a token, also serve requests for this host name besides localhost/127.0.0.1/[::1] (repeatable)")
	cmd.Flags().DurationVar(&staleAfter, "stale-after", 30*time.Second,
		"a running worker without a heartbeat for longer is shown as unresponsive")
	cmd.Flags().BoolVar(&readOnlyFlag, "read-only", false, "no run or schedule actions (cancel, retry, pause, resume), also with a token")
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", "",
		"also serve Prometheus metrics at http://ADDR/metrics (host:port; default: off)")
	return cmd
}

type dashboardOptions struct {
	url, listen, token string
	allowedHosts       []string // normalized with dashboard.NormalizeAllowedHosts
	staleAfter         time.Duration
	actions            bool // offer cancel and retry (needs token)
	log                *slog.Logger
	ready              func(addr string)
	metricsListen      string            // serve /metrics there too (empty: off)
	metricsReady       func(addr string) // called once the metrics server listens
}

// runDashboard serves until ctx is cancelled, then closes the event streams and shuts the server down.
func runDashboard(ctx context.Context, o dashboardOptions) error {
	cfg, err := pgxpool.ParseConfig(o.url)
	if err != nil {
		return fmt.Errorf("bad --database-url: %w", err)
	}
	cfg.MaxConns = 4
	params := cfg.ConnConfig.RuntimeParams
	if params["application_name"] == "" {
		params["application_name"] = "pgflow-dashboard"
	}
	params["default_transaction_read_only"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to %s:%d/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("connect to %s:%d/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}

	dcfg := dashboard.Config{Pool: pool, Token: o.token, AllowedHosts: o.allowedHosts, Logger: o.log,
		StaleAfter: o.staleAfter}
	if o.actions {
		// The actions write: their own pool, without default_transaction_read_only.
		wcfg, err := pgxpool.ParseConfig(o.url)
		if err != nil {
			return fmt.Errorf("bad --database-url: %w", err)
		}
		wcfg.MaxConns = 2
		if wcfg.ConnConfig.RuntimeParams["application_name"] == "" {
			wcfg.ConnConfig.RuntimeParams["application_name"] = "pgflow-dashboard-actions"
		}
		wpool, err := pgxpool.NewWithConfig(ctx, wcfg)
		if err != nil {
			return fmt.Errorf("connect to %s:%d/%s: %w", wcfg.ConnConfig.Host, wcfg.ConnConfig.Port, wcfg.ConnConfig.Database, err)
		}
		defer wpool.Close()
		client, err := pgflow.NewClient(wpool, &pgflow.ClientConfig{Logger: o.log})
		if err != nil {
			return err
		}
		defer client.Close()
		dcfg.Actions = client
	}
	dash, err := dashboard.New(dcfg)
	if err != nil {
		return err
	}
	defer dash.Close()

	if o.metricsListen != "" {
		ms, err := startMetricsServer(o.metricsListen, o.token, o.allowedHosts, pool, o.staleAfter, o.log)
		if err != nil {
			return err
		}
		defer ms.Close()
		if o.metricsReady != nil {
			o.metricsReady(ms.Addr())
		}
	}

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	srv := &http.Server{Handler: dash.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if o.ready != nil {
		o.ready(ln.Addr().String())
	}

	select {
	case err := <-served:
		return fmt.Errorf("dashboard server on %s: %w", o.listen, err)
	case <-ctx.Done():
	}
	dash.Close() // ends the event streams, so Shutdown does not wait for them
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("dashboard shutdown: %w", err)
	}
	return nil
}
