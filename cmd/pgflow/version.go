package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/pgflow-go/pgflow/internal/pgerr"
	"github.com/pgflow-go/pgflow/schema"
)

type versionJSON struct {
	CLIVersion      string  `json:"cli_version"`
	CLICommit       *string `json:"cli_commit"`       // null when the binary was built without VCS information
	SchemaVersion   string  `json:"schema_version"`   // the newest migration this binary installs
	DatabaseVersion *string `json:"database_version"` // null without a database URL, or when none is installed
	DatabaseNote    *string `json:"database_note,omitempty"`
}

func newVersionCmd(g *globalOptions) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the CLI's version, the schema version it installs and the database's",
		Long: `Print the version of this pgflow binary (and the commit it was built from, when known), the schema version it
installs ('pgflow migrate up' applies migrations up to it), and, with --database-url or $DATABASE_URL, the schema
version installed in that database.

The installed version comes from pgflow.schema_version() (schema v0.20.0 and later); an older database is read
from pgflow.schema_migrations and reported as older than v0.20.0. A database behind this binary says to run
'pgflow migrate up'. --json prints {cli_version, cli_commit, schema_version, database_version, database_note}.`,
		Example: `  pgflow version
  pgflow version --database-url postgres://localhost/app
  pgflow version --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			doc := versionJSON{CLIVersion: "(unknown)", SchemaVersion: schema.LatestVersion()}
			if info, ok := debug.ReadBuildInfo(); ok {
				doc.CLIVersion = info.Main.Version
				doc.CLICommit = strPtr(buildCommit(info))
			}
			var dbErr error
			if g.databaseURL != "" {
				v, note, err := databaseVersion(cmd, g.databaseURL)
				doc.DatabaseVersion, doc.DatabaseNote, dbErr = strPtr(v), strPtr(note), err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if dbErr != nil {
					return dbErr
				}
				return writeJSON(out, doc)
			}
			cli := doc.CLIVersion
			if doc.CLICommit != nil {
				cli += ", commit " + *doc.CLICommit
			}
			fmt.Fprintf(out, "pgflow    %s\n", cli)
			fmt.Fprintf(out, "schema    %s (installed by 'pgflow migrate up')\n", doc.SchemaVersion)
			if dbErr != nil {
				return dbErr
			}
			if g.databaseURL != "" {
				line := "none"
				if doc.DatabaseVersion != nil {
					line = *doc.DatabaseVersion
				}
				if doc.DatabaseNote != nil {
					line += " (" + *doc.DatabaseNote + ")"
				}
				fmt.Fprintf(out, "database  %s\n", line)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the versions as JSON")
	return cmd
}

// buildCommit is the VCS revision the binary was built from (12 characters, "+changes" when the tree had local
// changes), or "" when the build recorded none (go install module@version, go run).
func buildCommit(info *debug.BuildInfo) string {
	var rev string
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && modified {
		rev += "+changes"
	}
	return rev
}

// databaseVersion reads the schema version installed in the database at url, and a note when it differs from the
// version this binary installs.
func databaseVersion(cmd *cobra.Command, url string) (version, note string, err error) {
	conn, err := connect(cmd, url)
	if err != nil {
		return "", "", err
	}
	defer conn.Close(context.WithoutCancel(cmd.Context()))
	version, note, err = installedVersion(cmd.Context(), conn)
	if err != nil {
		return "", "", fmt.Errorf("read the schema version of the database: %w", err)
	}
	if note == "" && version != "" {
		switch latest := schema.LatestVersion(); compareVersions(version, latest) {
		case -1:
			note = "older than this binary's " + latest + ": run `pgflow migrate up`"
		case 1:
			note = "newer than this binary's " + latest + ": upgrade pgflow"
		}
	}
	return version, note, nil
}

// installedVersion asks pgflow.schema_version() (v0.20.0+), else the migrator's table, else whether a pgflow
// schema exists at all.
func installedVersion(ctx context.Context, conn *pgx.Conn) (version, note string, err error) {
	var v string
	err = conn.QueryRow(ctx, `select pgflow.schema_version()`).Scan(&v)
	if err == nil {
		return "v" + strings.TrimPrefix(v, "v"), "", nil
	}
	if !pgerr.MissingSchema(err) {
		return "", "", err
	}
	st, err := schema.NewMigrator(conn, nil).Status(ctx)
	if err != nil {
		return "", "", err
	}
	if st.Current != "" {
		return st.Current, "older than v0.20.0, read from pgflow.schema_migrations: run `pgflow migrate up`", nil
	}
	var exists bool
	if err := conn.QueryRow(ctx, `select to_regnamespace('pgflow') is not null`).Scan(&exists); err != nil {
		return "", "", err
	}
	if exists {
		return "", "unknown: a pgflow schema older than v0.20.0 that records no migrations; run `pgflow migrate up`", nil
	}
	return "", "the pgflow schema is not installed: run `pgflow migrate up`", nil
}

// compareVersions compares two "vX.Y.Z" versions: -1, 0 or 1. A version that does not parse compares as 0.
func compareVersions(a, b string) int {
	pa, pb := parseVersion(a), parseVersion(b)
	if pa == nil || pb == nil {
		return 0
	}
	for i := range pa {
		if pa[i] != pb[i] {
			if pa[i] < pb[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

func parseVersion(v string) []int {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) != 3 {
		return nil
	}
	out := make([]int, 3)
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil
		}
		out[i] = n
	}
	return out
}
