package main

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/pgflow-go/pgflow/schema"
)

func newMigrateCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Install or upgrade the pgflow schema",
		Long: `Install or upgrade the pgflow schema (and PGMQ, when missing) in a database.

Each migration runs in its own transaction under an advisory lock, so two migrators never race, and waits at
most --lock-timeout for table locks.`,
	}
	cmd.AddCommand(newMigrateUpCmd(g), newMigrateStatusCmd(g), newMigrateExportCmd())
	return cmd
}

func newMigrateUpCmd(g *globalOptions) *cobra.Command {
	var to, pgmq string
	var lockTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Apply pending migrations",
		Example: `  pgflow migrate up --database-url postgres://localhost/app
  pgflow migrate up --to v0.16.0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url, err := g.requireURL()
			if err != nil {
				return err
			}
			conn, err := connect(cmd, url)
			if err != nil {
				return err
			}
			defer conn.Close(cmd.Context())
			out := cmd.OutOrStdout()
			m := schema.NewMigrator(conn, &schema.MigratorConfig{LockTimeout: lockTimeout, PGMQ: pgmq,
				Progress: func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }})
			report, err := m.Up(cmd.Context(), to)
			if err != nil {
				return err
			}
			if len(report.Applied) == 0 {
				fmt.Fprintf(out, "nothing to do; schema version %s\n", orNone(report.Current))
			} else {
				fmt.Fprintf(out, "schema version %s\n", report.Current)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "stop at this version (default: latest)")
	cmd.Flags().StringVar(&pgmq, "pgmq", "auto", "how to provide PGMQ: auto, extension or bundled")
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", schema.DefaultLockTimeout, "longest wait for a table lock per migration")
	return cmd
}

func newMigrateStatusCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "status",
		Short:   "Show which migrations are applied",
		Example: `  pgflow migrate status --database-url postgres://localhost/app`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url, err := g.requireURL()
			if err != nil {
				return err
			}
			conn, err := connect(cmd, url)
			if err != nil {
				return err
			}
			defer conn.Close(cmd.Context())
			st, err := schema.NewMigrator(conn, nil).Status(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, m := range st.Migrations {
				state := "pending"
				if m.Applied {
					state = "applied " + m.AppliedAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(out, "%-9s %-22s %s\n", m.Version, m.File, state)
			}
			for _, v := range st.Unknown {
				fmt.Fprintf(out, "%-9s %-22s applied, unknown to this binary (the database is newer)\n", v, "?")
			}
			fmt.Fprintf(out, "current: %s\n", orNone(st.Current))
			return nil
		},
	}
}

func newMigrateExportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "export DIR",
		Short: "Write the migrations as plain SQL files for another migration runner",
		Long: `Write every migration as a plain SQL file into DIR, for Supabase's or another migration runner.
PGMQ is not included: the database needs the pgmq extension (>= 1.5) or 'pgflow migrate up' once.`,
		Example: `  pgflow migrate export supabase/migrations`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := schema.Export(args[0])
			if err != nil {
				return err
			}
			for _, f := range files {
				fmt.Fprintln(cmd.OutOrStdout(), f)
			}
			return nil
		},
	}
}

func connect(cmd *cobra.Command, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("bad --database-url: %w", err)
	}
	conn, err := pgx.ConnectConfig(cmd.Context(), cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database, err)
	}
	return conn, nil
}

func orNone(v string) string {
	if v == "" {
		return "none"
	}
	return v
}
