package main

// Connecting to the database for one command, and what its errors say to the user.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow/internal/pgerr"
)

// openPool connects a small pool for one CLI command and checks that the server answers. params are extra
// run-time parameters of every connection (the demo sets pgflow.environment=local).
func openPool(ctx context.Context, url string, maxConns int32, params map[string]string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("bad --database-url: %w", err)
	}
	cfg.MaxConns = maxConns
	cc := cfg.ConnConfig
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "pgflow-cli"
	}
	for k, v := range params {
		cc.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s:%d/%s: %w", cc.Host, cc.Port, cc.Database, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to %s:%d/%s: %w", cc.Host, cc.Port, cc.Database, err)
	}
	return pool, nil
}

// withSchemaHint adds `pgflow migrate up` to an error that says a pgflow or pgmq object is missing: the schema is
// not installed or older than this CLI.
func withSchemaHint(err error) error {
	if pgerr.MissingSchema(err) {
		return fmt.Errorf("%w%s", err, pgerr.SchemaHint(err))
	}
	return err
}
