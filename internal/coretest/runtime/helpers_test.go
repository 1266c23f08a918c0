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

// claimAndComplete claims up to qty tasks of flow as worker with pgflow.read_and_start_tasks (queue "" is the
// flow's own) and completes every one it claimed with pgflow.complete_tasks, in one statement; it returns how many
// it completed.
func claimAndComplete(t *testing.T, db fx.DB, flow, queue, worker string, qty int) int {
	t.Helper()
	return fx.Val[int](t, db, `
		with claimed as (
		  select * from pgflow.read_and_start_tasks($1, nullif($2, ''), $3::uuid, $4, 60) where claimed)
		select count(*)::int from pgflow.complete_tasks(
		  array(select run_id from claimed), array(select step_slug from claimed),
		  array(select task_index from claimed), array(select '1'::jsonb from claimed),
		  array(select attempt from claimed))`, flow, queue, worker, qty)
}
