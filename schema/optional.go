package schema

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// optionalDir holds the snippets that are installed by hand, never by a migration.
const optionalDir = "sql/optional"

// OptionalSQL returns the SQL of one optional snippet from sql/optional, for example "prune_data_older_than" (the
// ".sql" suffix may be given or left out). Snippets are not part of any migration: an operator installs them by hand
// and replaces an installed copy by running the new text again.
func OptionalSQL(name string) (string, error) {
	base := strings.TrimSuffix(name, ".sql")
	if base == "" || base != path.Base(base) || strings.HasPrefix(base, ".") {
		return "", fmt.Errorf("schema: optional snippet name %q is not a plain file name", name)
	}
	body, err := fs.ReadFile(sqlFiles, path.Join(optionalDir, base+".sql"))
	if errors.Is(err, fs.ErrNotExist) {
		names, _ := OptionalNames()
		return "", fmt.Errorf("schema: no optional snippet %q; available: %s", name, strings.Join(names, ", "))
	}
	if err != nil {
		return "", fmt.Errorf("schema: read optional snippet %q: %w", name, err)
	}
	return string(body), nil
}

// OptionalNames lists the optional snippets (file names without ".sql"), sorted.
func OptionalNames() ([]string, error) {
	entries, err := fs.ReadDir(sqlFiles, optionalDir)
	if err != nil {
		return nil, fmt.Errorf("schema: read %s: %w", optionalDir, err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".sql") {
			names = append(names, strings.TrimSuffix(e.Name(), ".sql"))
		}
	}
	sort.Strings(names)
	return names, nil
}
