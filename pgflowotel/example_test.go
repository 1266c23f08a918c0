package pgflowotel_test

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/pgflowotel"
)

// Spans and metrics through the global OpenTelemetry providers (set them up with your exporter first).
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	hooks, err := pgflowotel.New(pgflowotel.Options{
		TracerProvider: otel.GetTracerProvider(),
		MeterProvider:  otel.GetMeterProvider(),
	})
	if err != nil {
		panic(err)
	}
	tracer := otel.Tracer("orders")
	flow := pgflow.NewFlow[int]("orders")
	pgflow.Step(flow, "charge", func(ctx context.Context, t *pgflow.Task[int]) (int, error) {
		// ctx holds the task's span: this span is its child.
		_, span := tracer.Start(ctx, "call the payment provider")
		defer span.End()
		return 1, nil
	})
	client, err := pgflow.NewClient(pool, nil)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	w, err := pgflow.NewWorker(client, &pgflow.WorkerConfig{Flows: []pgflow.WorkerFlow{{Flow: flow}}, Hooks: hooks})
	if err != nil {
		panic(err)
	}
	if err := w.Run(ctx); err != nil { // until ctx is cancelled (on SIGTERM, say)
		panic(err)
	}
}
