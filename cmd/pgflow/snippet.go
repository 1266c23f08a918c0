package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pgflow-go/pgflow/schema"
)

// snippetAliases maps short names to optional snippet files.
var snippetAliases = map[string]string{"prune": "prune_data_older_than"}

func newSnippetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snippet",
		Short: "Print optional SQL snippets that are installed by hand",
		Long: `Optional SQL snippets are not part of any migration. Install one by running its text (psql -f, or your
migration runner); replace an installed copy by running the new text again. If you customised an installed copy,
merge your changes into the new text yourself.`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "list",
		Short:   "List the optional snippets",
		Example: `  pgflow snippet list`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			names, err := schema.OptionalNames()
			if err != nil {
				return err
			}
			for _, n := range names {
				alias := ""
				for a, target := range snippetAliases {
					if target == n {
						alias = " (alias: " + a + ")"
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s%s\n", n, alias)
			}
			return nil
		},
	}, &cobra.Command{
		Use:   "print NAME",
		Short: "Print a snippet's SQL",
		Example: `  pgflow snippet print prune > prune_data_older_than.sql
  pgflow snippet print prune | psql "$DATABASE_URL" -v ON_ERROR_STOP=1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if target, ok := snippetAliases[name]; ok {
				name = target
			}
			sql, err := schema.OptionalSQL(name)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprint(out, sql)
			if !strings.HasSuffix(sql, "\n") {
				fmt.Fprintln(out)
			}
			return nil
		},
	})
	return cmd
}
