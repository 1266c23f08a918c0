package sqlapi

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// ClientFlows defines "chain" (first -> second) and "rootmap" (a map over the run input), for the tests of this
// package and of sqlapi_test.
func ClientFlows(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	for _, q := range []string{
		`select pgflow.create_flow('chain')`,
		`select pgflow.add_step('chain', 'first')`,
		`select pgflow.add_step('chain', 'second', array['first'])`,
		`select pgflow.create_flow('rootmap')`,
		`select pgflow.add_step('rootmap', 'each', step_type => 'map')`,
	} {
		_, err := pool.Exec(context.Background(), q)
		require.NoError(t, err, q)
	}
}
