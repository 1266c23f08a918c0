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
	if err := pgflow.RunWorker(ctx, pool, flow, pgflow.WorkerConfig{Hooks: hooks}); err != nil {
		panic(err)
	}
}
