package runtime_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// newDB returns a fresh, fully migrated database of the test's own.
func newDB(t *testing.T) *pgtest.DB {
	t.Helper()
	return pgtest.New(t)
}

// requirePgError asserts that err is a PostgreSQL error with the given SQLSTATE (when not empty) and exact message.
func requirePgError(t *testing.T, err error, code, message string) *pgconn.PgError {
	t.Helper()
	require.Error(t, err)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "expected a PostgreSQL error, got %v", err)
	if code != "" {
		require.Equal(t, code, pgErr.Code, "SQLSTATE of %q", pgErr.Message)
	}
	require.Equal(t, message, pgErr.Message)
	return pgErr
}

func ptr[T any](v T) *T { return &v }
