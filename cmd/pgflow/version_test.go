package main

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/schema"
)

func TestVersionWithoutDatabase(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	out := mustCLI(t, "version")
	require.Contains(t, out, "pgflow    ")
	require.Contains(t, out, "schema    "+schema.LatestVersion()+" (installed by 'pgflow migrate up')")
	require.NotContains(t, out, "database")

	doc := decodeJSON[versionJSON](t, mustCLI(t, "version", "--json"))
	require.NotEmpty(t, doc.CLIVersion)
	require.Equal(t, schema.LatestVersion(), doc.SchemaVersion)
	require.Nil(t, doc.DatabaseVersion)
}

func TestVersionOfTheDatabase(t *testing.T) {
	t.Parallel()
	latest := schema.LatestVersion()

	current := pgtest.New(t)
	out := mustCLI(t, "--database-url", current.URL, "version")
	require.Contains(t, out, "database  "+latest+"\n")
	doc := decodeJSON[versionJSON](t, mustCLI(t, "--database-url", current.URL, "version", "--json"))
	require.Equal(t, latest, *doc.DatabaseVersion)
	require.Nil(t, doc.DatabaseNote)

	// A database older than v0.20.0 has no pgflow.schema_version(): its version comes from the migrations table.
	old := pgtest.NewWithPGMQ(t)
	conn, err := pgx.Connect(context.Background(), old.URL)
	require.NoError(t, err)
	_, err = schema.NewMigrator(conn, nil).Up(context.Background(), "v0.19.0")
	require.NoError(t, err)
	require.NoError(t, conn.Close(context.Background()))
	out = mustCLI(t, "--database-url", old.URL, "version")
	require.Contains(t, out, "database  v0.19.0 (older than v0.20.0")
	require.Contains(t, out, "run `pgflow migrate up`")

	empty := pgtest.NewEmpty(t)
	out = mustCLI(t, "--database-url", empty.URL, "version")
	require.Contains(t, out, "database  none (the pgflow schema is not installed: run `pgflow migrate up`)")

	r := runCLI(t, "", "--database-url", "postgres://nobody@127.0.0.1:1/app?connect_timeout=5", "version")
	require.ErrorContains(t, r.err, "127.0.0.1:1/app")
	require.Contains(t, r.stdout, "schema    "+latest, "the local versions are printed before the database is asked")
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	require.Equal(t, -1, compareVersions("v0.19.0", "v0.20.0"))
	require.Equal(t, -1, compareVersions("v0.9.0", "v0.10.0"))
	require.Equal(t, 1, compareVersions("v1.0.0", "v0.20.0"))
	require.Equal(t, 0, compareVersions("v0.20.0", "v0.20.0"))
	require.Equal(t, 0, compareVersions("bogus", "v0.20.0"))
}
