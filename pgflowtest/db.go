package pgflowtest

import (
	"context"
	"crypto/rand"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// DB is the database handle the kit's database functions use: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx (a test's
// transaction, rolled back at its end). A *pgx.Conn or a pgx.Tx is used by one call at a time, as they require.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// isNil reports whether v is nil or a nil pointer in an interface (a nil *pgflow.Flow passed as pgflow.AnyFlow).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// newUUID returns a random (version 4) UUID in canonical text form.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// getRun reads one run; an unknown id is an error wrapping pgflow.ErrRunNotFound.
func getRun(ctx context.Context, db DB, runID string) (*sqlapi.RunWithStates, error) {
	r, err := sqlapi.GetRunWithStates(ctx, db, runID)
	switch {
	case err != nil && sqlapi.IsInvalidRunID(err):
		return nil, fmt.Errorf("run id %q: %w: %w", runID, pgflow.ErrInvalidRunID, err)
	case err != nil:
		return nil, fmt.Errorf("read run %s: %w", runID, err)
	case r == nil:
		return nil, fmt.Errorf("run %s: %w", runID, pgflow.ErrRunNotFound)
	}
	return r, nil
}
