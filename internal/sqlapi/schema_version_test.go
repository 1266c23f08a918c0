package sqlapi_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgerr"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/schema"
)

func TestSchemaVersionOfTheLatestSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	v, err := sqlapi.SchemaVersion(context.Background(), db.Pool)
	require.NoError(t, err)
	require.Equal(t, schema.LatestVersion(), "v"+v)
}

// A database without schema pgflow, or at a version older than the code needs, is reported as too old, with the
// command that fixes it.
func TestSchemaVersionTooOld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	empty := pgtest.NewWithPGMQ(t)
	_, err := sqlapi.SchemaVersion(ctx, empty.Pool)
	require.ErrorIs(t, err, sqlapi.ErrSchemaTooOld)
	require.True(t, pgerr.Permanent(err), "retrying cannot install a schema")
	require.ErrorContains(t, err, "run `pgflow migrate up`")

	old := pgtest.NewWithPGMQ(t)
	conn, err := pgx.Connect(ctx, old.URL)
	require.NoError(t, err)
	_, err = schema.NewMigrator(conn, nil).Up(ctx, "v0.19.0")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	_, err = sqlapi.SchemaVersion(ctx, old.Pool)
	require.ErrorIs(t, err, sqlapi.ErrSchemaTooOld)
	require.ErrorContains(t, err, "run `pgflow migrate up`")
}
