package pgflowprom_test

import (
	"context"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/pgflowprom"
)

// A worker's metrics and the database's state on one /metrics endpoint.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	metrics := pgflowprom.New(pgflowprom.Options{ConstLabels: prometheus.Labels{"service": "orders"}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, pgflowprom.NewDatabaseCollector(pool, pgflowprom.DatabaseOptions{}))
	http.Handle("/metrics", pgflowprom.Handler(reg))
	go func() { _ = http.ListenAndServe("127.0.0.1:9464", nil) }()

	flow := pgflow.NewFlow[int]("orders")
	pgflow.Step(flow, "charge", func(ctx context.Context, t *pgflow.Task[int]) (int, error) { return 1, nil })
	if err := pgflow.RunWorker(ctx, pool, flow, pgflow.WorkerConfig{Hooks: metrics}); err != nil {
		panic(err)
	}
}
