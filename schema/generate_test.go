package schema_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/schema/internal/migrationgen"
)

// unreleasedMigrations lists the migration files RELEASED does not pin.
func unreleasedMigrations(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("sql", "migrations", "RELEASED"))
	require.NoError(t, err)
	defer f.Close()
	released := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			released[strings.Fields(line)[0]] = true
		}
	}
	require.NoError(t, sc.Err())
	all, err := filepath.Glob(filepath.Join("sql", "migrations", "*.sql"))
	require.NoError(t, err)
	var out []string
	for _, m := range all {
		if !released[filepath.Base(m)] {
			out = append(out, m)
		}
	}
	return out
}

// An unreleased migration's generated sections are exactly what sql/core says: nobody edits them by hand, and
// nobody forgets to regenerate after changing core.
func TestUnreleasedMigrationsAreGeneratedFromCore(t *testing.T) {
	t.Parallel()
	for _, m := range unreleasedMigrations(t) {
		b, err := os.ReadFile(m)
		require.NoError(t, err)
		gen, err := migrationgen.Generate(string(b), os.DirFS(filepath.Join("sql", "core")))
		require.NoError(t, err)
		require.Equal(t, string(b), gen, "%s is out of date with sql/core: run `go generate ./schema`", m)
	}
}

// The generator rewrites a stale section and only that, and refuses an unterminated one.
func TestMigrationGeneratorRewritesSections(t *testing.T) {
	t.Parallel()
	core := os.DirFS(filepath.Join("sql", "core"))
	stale := "-- before\n-- generated from sql/core: 0100_function_is_local.sql\nstale text\n-- end generated\n-- after\n"
	gen, err := migrationgen.Generate(stale, core)
	require.NoError(t, err)
	want, err := os.ReadFile(filepath.Join("sql", "core", "0100_function_is_local.sql"))
	require.NoError(t, err)
	require.Equal(t, "-- before\n-- generated from sql/core: 0100_function_is_local.sql\n"+strings.TrimRight(string(want), "\n")+
		"\n-- end generated\n-- after\n", gen)

	_, err = migrationgen.Generate("-- generated from sql/core: 0100_function_is_local.sql\nx\n", core)
	require.ErrorContains(t, err, `has no "-- end generated" line`)
	_, err = migrationgen.Generate("-- generated from sql/core: 0100_function_nope.sql\n-- end generated\n", core)
	require.ErrorContains(t, err, "0100_function_nope.sql")
}

// pgflow.schema_version() reports the newest migration's version, and every function carries its guarantee as a
// comment on the function.
func TestSchemaVersionAndFunctionComments(t *testing.T) {
	t.Parallel()
	all, err := filepath.Glob(filepath.Join("sql", "migrations", "*.sql"))
	require.NoError(t, err)
	newest := filepath.Base(all[len(all)-1])
	m := regexp.MustCompile(`^\d{4}_v(\d+\.\d+\.\d+)\.sql$`).FindStringSubmatch(newest)
	require.NotNil(t, m, newest)

	db := pgtest.New(t)
	var version string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `select pgflow.schema_version()`).Scan(&version))
	require.Equal(t, m[1], version, "schema_version() must return the newest migration's version")

	rows, err := db.Pool.Query(context.Background(), `
		select p.oid::regprocedure::text from pg_proc p
		 where p.pronamespace = 'pgflow'::regnamespace
		   and coalesce(length(obj_description(p.oid, 'pg_proc')), 0) < 40
		 order by 1`)
	require.NoError(t, err)
	var bare []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		bare = append(bare, s)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, bare, "functions without a guarantee comment")
}
