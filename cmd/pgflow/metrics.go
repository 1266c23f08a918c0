package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/dashboard"
	"github.com/pgflow-go/pgflow/pgflowprom"
)

// metricsServer serves Prometheus metrics at /metrics on its own address (--metrics-listen): the database's
// state (pgflowprom.DatabaseCollector), extra collectors such as a worker's pgflowprom.Collector, and the
// process's Go runtime and process metrics.
type metricsServer struct {
	srv    *http.Server
	ln     net.Listener
	served chan error
	client *pgflow.Client // the database collector's reads
}

// checkMetricsListen applies the dashboard's rule to the metrics address: anything but loopback needs a token.
func checkMetricsListen(addr, token string) error {
	if addr == "" {
		return nil
	}
	if err := dashboard.CheckListenAddr(addr, token); err != nil {
		return fmt.Errorf("--metrics-listen: %w", err)
	}
	return nil
}

// startMetricsServer listens on addr and serves /metrics. With a token, scrapes must send
// "Authorization: Bearer <token>"; without one, their Host header must be a loopback name or one of
// allowedHosts (normalized with dashboard.NormalizeAllowedHosts), as for the dashboard.
func startMetricsServer(addr, token string, allowedHosts []string, pool *pgxpool.Pool, staleAfter time.Duration, log *slog.Logger,
	extra ...prometheus.Collector) (*metricsServer, error) {
	client, err := pgflow.NewClient(pool, &pgflow.ClientConfig{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		pgflowprom.NewDatabaseCollector(client, pgflowprom.DatabaseOptions{StaleAfter: staleAfter, Logger: log}),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	for _, c := range extra {
		if err := reg.Register(c); err != nil {
			client.Close()
			return nil, fmt.Errorf("metrics: register %T: %w", c, err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", requireBearer(token, pgflowprom.Handler(reg)))
	var handler http.Handler = mux
	if token == "" {
		handler = dashboard.RequireKnownHost(allowedHosts, mux)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	m := &metricsServer{
		srv:    &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second},
		ln:     ln,
		served: make(chan error, 1),
		client: client,
	}
	go func() { m.served <- m.srv.Serve(ln) }()
	return m, nil
}

// Addr is the address the server listens on.
func (m *metricsServer) Addr() string { return m.ln.Addr().String() }

// Close stops the server, waiting a few seconds for scrapes in progress.
func (m *metricsServer) Close() error {
	defer m.client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("metrics server shutdown: %w", err)
	}
	if err := <-m.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics server on %s: %w", m.Addr(), err)
	}
	return nil
}

// requireBearer lets requests through when token is empty, else only those carrying it as a bearer token.
func requireBearer(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pgflow metrics"`)
			http.Error(w, "unauthorized: send the token as Authorization: Bearer <token>", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
