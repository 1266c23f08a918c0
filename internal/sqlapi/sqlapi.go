// Package sqlapi is the one place that holds the SQL text pgflow-go sends to the database: calls of the pgflow.*
// and pgmq.* functions and the few direct reads the Go side needs. Every object is schema-qualified, so the
// package works with an empty search_path and behind PgBouncer in transaction mode. Callers above this package
// never write SQL; this package knows nothing about flows' Go types.
package sqlapi

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what every function here needs: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
