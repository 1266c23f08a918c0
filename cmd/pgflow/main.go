// Command pgflow is pgflow-go's command-line tool: migrations, runs, workers, the demo and the benchmark.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	// The first SIGINT or SIGTERM cancels the command's context; a second one cuts a worker's graceful stop
	// short (signals.go).
	ctx, stop := signalContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	if err := root.ExecuteContext(ctx); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// exitError carries a process exit code for failures that were already reported.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// globalOptions are the flags every command shares.
type globalOptions struct {
	databaseURL string
}

func newRootCmd() *cobra.Command {
	opts := &globalOptions{}
	root := &cobra.Command{
		Use:   "pgflow",
		Short: "Postgres-native workflow engine for Go",
		Long: `pgflow runs DAG workflows whose state lives in PostgreSQL and whose work travels through PGMQ queues.

Start with 'pgflow demo' to see a flow run on a throwaway database.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// The flag's default is not $DATABASE_URL's value, which would print the password in every --help; the
	// environment variable is read when a command runs.
	root.PersistentFlags().StringVar(&opts.databaseURL, "database-url", "",
		"PostgreSQL connection URL (default: $DATABASE_URL)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if f := cmd.Flag("database-url"); f != nil && !f.Changed {
			opts.databaseURL = os.Getenv("DATABASE_URL")
		}
		return nil
	}
	root.AddCommand(
		newMigrateCmd(opts),
		newSnippetCmd(),
		newFlowsCmd(opts),
		newRunsCmd(opts),
		newWorkersCmd(opts),
		newSchedulesCmd(opts),
		newDemoCmd(opts),
		newDashboardCmd(opts),
		newBenchCmd(opts),
		newVersionCmd(opts),
	)
	return root
}

func (o *globalOptions) requireURL() (string, error) {
	if o.databaseURL == "" {
		return "", errors.New("no database: pass --database-url postgres://user@host/db or set DATABASE_URL")
	}
	return o.databaseURL, nil
}
