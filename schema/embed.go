// Package schema holds pgflow-go's SQL — the PGMQ-compatible layer, the declarative pgflow schema and its
// released migrations — and the migrator that installs them.
package schema

import "embed"

// sqlFiles holds every SQL file the package ships: sql/pgmq (bundled PGMQ layer), sql/core (the declarative
// schema, the source of truth), sql/migrations (released migrations) and sql/optional (snippets installed by hand).
//
//go:embed sql
var sqlFiles embed.FS

//go:generate go run ./internal/genmigration
