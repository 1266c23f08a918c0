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

	client, err := pgflow.NewClient(pool, nil)
	if err != nil {
		panic(err)
	}
	defer client.Close()

	metrics := pgflowprom.New(pgflowprom.Options{ConstLabels: prometheus.Labels{"service": "orders"}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, pgflowprom.NewDatabaseCollector(client, pgflowprom.DatabaseOptions{}))
	http.Handle("/metrics", pgflowprom.Handler(reg))
	go func() { _ = http.ListenAndServe("127.0.0.1:9464", nil) }()

	flow := pgflow.NewFlow[int]("orders")
	pgflow.Step(flow, "charge", func(ctx context.Context, t *pgflow.Task[int]) (int, error) { return 1, nil })
	w, err := pgflow.NewWorker(client, &pgflow.WorkerConfig{Flows: []pgflow.WorkerFlow{{Flow: flow}}, Hooks: metrics})
	if err != nil {
		panic(err)
	}
	if err := w.Run(ctx); err != nil { // until ctx is cancelled (on SIGTERM, say)
		panic(err)
	}
}
