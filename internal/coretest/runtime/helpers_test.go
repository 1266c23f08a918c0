package runtime_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
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

// freezeStatistics analyzes the tables as they are now and turns autovacuum off on them: the planner's statistics
// stay those of this moment while the test fills the tables, and no analyze invalidates a session's cached plans.
func freezeStatistics(t *testing.T, db fx.DB, tables ...string) {
	t.Helper()
	for _, table := range tables {
		fx.Exec(t, db, "alter table "+table+" set (autovacuum_enabled = off)")
		fx.Exec(t, db, "analyze "+table)
	}
}
