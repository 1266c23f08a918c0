package schema

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// LatestVersion is the version in the name of the newest file in sql/migrations, and the version that the
// migration's pgflow.schema_version() returns.
func TestLatestVersion(t *testing.T) {
	t.Parallel()
	names, err := filepath.Glob(filepath.Join("sql", "migrations", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, names)
	sort.Strings(names)
	newest := names[len(names)-1]
	want := regexp.MustCompile(`_(v\d+\.\d+\.\d+)\.sql$`).FindStringSubmatch(newest)
	require.NotNil(t, want, newest)
	require.Equal(t, want[1], LatestVersion())

	body, err := os.ReadFile(newest)
	require.NoError(t, err)
	require.Contains(t, string(body), "select '"+LatestVersion()[1:]+"'::text",
		"%s: pgflow.schema_version() returns the migration's version", newest)
}
