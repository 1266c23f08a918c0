// Package sqlapi is the one place that holds the SQL text pgflow-go sends to the database: calls of the pgflow.*
// and pgmq.* functions and the few direct reads the Go side needs. Every object is schema-qualified, so the
// package works with an empty search_path and behind PgBouncer in transaction mode. Callers above this package
// never write SQL; this package knows nothing about flows' Go types.
package sqlapi

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgflow-go/pgflow/internal/pgerr"
)

// DBTX is what every function here needs: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Batcher sends several statements in one round trip; *pgxpool.Pool and *pgx.Conn implement it. The statements
// of one batch run in one implicit transaction.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// TxBeginner starts transactions; *pgxpool.Pool and *pgx.Conn implement it.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ErrSchemaTooOld is wrapped by SchemaVersion's error when the database's pgflow schema is older than the Go code
// needs (or missing).
var ErrSchemaTooOld = fmt.Errorf("the pgflow schema is older than this pgflow-go%w", finalMark{})

// finalMark makes ErrSchemaTooOld match pgerr.ErrFinal (retrying cannot fix it) without changing its text.
type finalMark struct{}

func (finalMark) Error() string        { return "" }
func (finalMark) Is(target error) bool { return target == pgerr.ErrFinal }

// MinSchemaVersion is the oldest schema version the Go code works with.
const MinSchemaVersion = "0.20.0"

// SchemaVersion returns the installed pgflow schema version (pgflow.schema_version(), since v0.20.0). A database
// without that function, or with an older version, yields an error wrapping ErrSchemaTooOld that says to run
// `pgflow migrate up`.
func SchemaVersion(ctx context.Context, db DBTX) (string, error) {
	// Two statements: a call of a function that does not exist fails the whole statement that names it.
	var present *bool
	err := db.QueryRow(ctx, `select case when to_regnamespace('pgflow') is null then null
	                                    else to_regprocedure('pgflow.schema_version()') is not null end`).Scan(&present)
	if err != nil {
		return "", fmt.Errorf("read the pgflow schema version: %w", err)
	}
	if present == nil {
		return "", fmt.Errorf("%w: schema pgflow is missing; run `pgflow migrate up`", ErrSchemaTooOld)
	}
	if !*present {
		return "", fmt.Errorf("%w: the installed schema is older than %s; run `pgflow migrate up`", ErrSchemaTooOld, MinSchemaVersion)
	}
	var v *string
	if err := db.QueryRow(ctx, `select pgflow.schema_version()`).Scan(&v); err != nil {
		return "", fmt.Errorf("read the pgflow schema version: %w", err)
	}
	if v == nil {
		return "", fmt.Errorf("%w: pgflow.schema_version() returned NULL; run `pgflow migrate up`", ErrSchemaTooOld)
	}
	if compareVersions(*v, MinSchemaVersion) < 0 {
		return *v, fmt.Errorf("%w: the installed schema is %s, this code needs %s or newer; run `pgflow migrate up`",
			ErrSchemaTooOld, *v, MinSchemaVersion)
	}
	return *v, nil
}

// compareVersions compares dotted numeric versions ("0.20.0").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return cmp.Compare(x, y)
		}
	}
	return 0
}
