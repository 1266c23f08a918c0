package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/schema"
)

// The demo's invoice for demoInput: the items' prices are the sums of their letters' code points.
const demoInvoiceJSON = `{"invoice": {
	"customer": "Ada",
	"lines": [{"item": "apples", "cents": 645}, {"item": "bread", "cents": 510},
	          {"item": "cheese", "cents": 621}, {"item": "dates", "cents": 529}],
	"subtotal_cents": 2305, "discount_cents": 230, "total_cents": 2075,
	"gift": "a jar of honey"}}`

// latestVersion is the schema version the migrator installs.
func latestVersion(t *testing.T) string {
	t.Helper()
	migs, err := schema.Migrations()
	require.NoError(t, err)
	require.NotEmpty(t, migs)
	return migs[len(migs)-1].Version
}

// outputOf returns the indented JSON the demo printed after "output:".
func outputOf(t *testing.T, out string) string {
	t.Helper()
	_, after, ok := strings.Cut(out, "output:\n")
	require.True(t, ok, "no output in:\n%s", out)
	end := strings.Index(after, "\n}\n")
	require.GreaterOrEqual(t, end, 0, "unterminated output in:\n%s", out)
	return after[:end+2]
}

func TestDemoWithDatabaseURL(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	out := mustCLI(t, "--database-url", db.URL, "demo", "--pause", "20ms")
	require.Contains(t, out, "pgflow schema "+latestVersion(t)+" already installed") // pgtest migrated it
	require.NotContains(t, out, "throwaway")
	require.Contains(t, out, "  price started (4 tasks)\n")
	require.Contains(t, out, "  gift completed in ")
	require.Contains(t, out, "  invoice completed in ")
	require.Contains(t, out, "run completed in ")
	require.JSONEq(t, demoInvoiceJSON, outputOf(t, out))
	require.Contains(t, out, "==> worker stopped\n")

	// The database holds the completed run, and the worker is recorded as stopped.
	ctx := context.Background()
	var status, stopped string
	require.NoError(t, db.Pool.QueryRow(ctx,
		`select r.status, (select count(*) filter (where w.stopped_at is not null) || '/' || count(*) from pgflow.workers w)
		   from pgflow.runs r where r.flow_slug = 'pgflow_demo'`).Scan(&status, &stopped))
	require.Equal(t, "completed", status)
	require.Equal(t, "1/1", stopped)

	// A second demo in the same database reuses the compiled flow.
	out = mustCLI(t, "--database-url", db.URL, "demo", "--pause", "0s")
	require.JSONEq(t, demoInvoiceJSON, outputOf(t, out))
	var runs int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where status = 'completed'`).Scan(&runs))
	require.Equal(t, 2, runs)
}

func TestDemoInstallsTheSchemaIntoAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)

	out := mustCLI(t, "--database-url", db.URL, "demo", "--pause", "0s")
	require.Contains(t, out, "installed the pgflow schema "+latestVersion(t)+" (")
	require.JSONEq(t, demoInvoiceJSON, outputOf(t, out))
}

// The whole demo as a user runs it: a throwaway cluster of its own, started and removed by the demo.
func TestDemoOnAThrowawayCluster(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://nobody@127.0.0.1:1/ignored") // the demo ignores $DATABASE_URL
	out := mustCLI(t, "demo", "--pause", "20ms")
	require.Contains(t, out, "==> starting a throwaway PostgreSQL server\n")
	require.Contains(t, out, "installed the pgflow schema "+latestVersion(t)+" (")
	require.Contains(t, out, "run completed in ")
	require.JSONEq(t, demoInvoiceJSON, outputOf(t, out))
	require.True(t, strings.HasSuffix(out, "==> removed the throwaway server\n"), out)
}

func TestDemoWithoutServerBinariesNamesTheDebianPackage(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := runDemo(context.Background(), &out, &out, demoConfig{
		findServer: func() (string, error) { return "", errors.New("not found") },
	})
	require.ErrorContains(t, err, "install the Debian package 'postgresql'")
	require.ErrorContains(t, err, "--database-url")
	require.Empty(t, out.String())
}

func TestDemoRejectsAnEmptyDatabaseURL(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "--database-url", "", "demo")
	require.ErrorContains(t, r.err, "--database-url is empty")
}

func TestDemoFlowDefinition(t *testing.T) {
	t.Parallel()
	f := demoFlow(0)
	require.NoError(t, f.Err())
	require.Equal(t, demoFlowSlug, f.Slug())
	_, err := f.Shape()
	require.NoError(t, err)
	var _ pgflow.AnyFlow = f
}
