package pgcluster

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Restart terminates every session (a connection open across it fails) and brings the same server back on the
// same port with its data.
func TestRestartKeepsDataAndPort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := Start(ctx, Options{})
	require.NoError(t, err)
	t.Cleanup(c.Stop)

	conn, err := pgx.Connect(ctx, c.AdminURL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `create table kept (v int); insert into kept values (42)`)
	require.NoError(t, err)
	var before int
	require.NoError(t, conn.QueryRow(ctx, `select pg_backend_pid()`).Scan(&before))
	oldPID := c.serverPID

	require.NoError(t, c.Restart(ctx))
	require.NotEqual(t, oldPID, c.serverPID, "a new postmaster runs")
	require.True(t, processAlive(c.serverPID))

	_, err = conn.Exec(ctx, `select 1`)
	require.Error(t, err, "sessions do not survive a fast restart")

	again, err := pgx.Connect(ctx, c.AdminURL())
	require.NoError(t, err)
	defer again.Close(ctx)
	var v int
	require.NoError(t, again.QueryRow(ctx, `select v from kept`).Scan(&v))
	require.Equal(t, 42, v)
}
