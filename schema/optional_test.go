package schema_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/schema"
)

func TestOptionalSQL(t *testing.T) {
	t.Parallel()
	onDisk, err := os.ReadFile(filepath.Join("sql", "optional", "prune_data_older_than.sql"))
	require.NoError(t, err)

	for _, name := range []string{"prune_data_older_than", "prune_data_older_than.sql"} {
		got, err := schema.OptionalSQL(name)
		require.NoError(t, err, name)
		require.Equal(t, string(onDisk), got, "the embedded snippet is the file in sql/optional")
	}

	names, err := schema.OptionalNames()
	require.NoError(t, err)
	require.Contains(t, names, "prune_data_older_than")

	for _, bad := range []string{"", "../core/0000_schema", "nope", ".sql"} {
		_, err := schema.OptionalSQL(bad)
		require.Error(t, err, "%q", bad)
	}
	_, err = schema.OptionalSQL("nope")
	require.ErrorContains(t, err, `no optional snippet "nope"; available: prune_data_older_than`)
}
