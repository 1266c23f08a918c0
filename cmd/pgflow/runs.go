package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pgflow-go/pgflow"
)

func newRunsCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "Start, list, show, watch, cancel and retry runs of flows",
		Long: `Start a run of a flow, list runs, show a run with the state of each of its steps, follow a run live,
cancel a run, or retry a failed or cancelled one.

A run is one execution of a flow with one JSON input. Workers execute its steps; these commands only start,
read and control runs, so a run started here progresses only while a worker of its flow is running (runs start
--wait, runs watch and runs show say when none is).`,
		Example: `  pgflow runs start greet --input '{"names": ["ada", "linus"]}' --wait
  pgflow runs list --status failed
  pgflow runs show 0f8fad5b-d9cb-469f-a165-70867728950e
  pgflow runs watch 0f8fad5b-d9cb-469f-a165-70867728950e
  pgflow runs cancel 0f8fad5b-d9cb-469f-a165-70867728950e --reason "wrong input"
  pgflow runs retry 0f8fad5b-d9cb-469f-a165-70867728950e`,
	}
	cmd.AddCommand(newRunsStartCmd(g), newRunsListCmd(g), newRunsShowCmd(g), newRunsWatchCmd(g),
		newRunsCancelCmd(g), newRunsRetryCmd(g))
	return cmd
}

// clientSession is what a runs command works with: a small pool and a client on it.
type clientSession struct {
	pool   *pgxpool.Pool
	client *pgflow.Client
}

func openClientSession(ctx context.Context, g *globalOptions) (*clientSession, error) {
	url, err := g.requireURL()
	if err != nil {
		return nil, err
	}
	pool, err := openPool(ctx, url, 4, nil)
	if err != nil {
		return nil, err
	}
	// WaitRun's own warnings are left to the commands, which print them as sentences (waitRunWarning).
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	client, err := pgflow.NewClient(pool, &pgflow.ClientConfig{PollInterval: time.Second, Logger: logger})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &clientSession{pool: pool, client: client}, nil
}

func (s *clientSession) Close() {
	s.client.Close()
	s.pool.Close()
}

func newRunsStartCmd(g *globalOptions) *cobra.Command {
	var input, runID string
	var wait, asJSON bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "start FLOW",
		Short: "Start a run of a flow",
		Long: `Start a run of the flow FLOW with the JSON document given by --input and print the run.

--input takes the JSON text itself, @FILE to read it from a file, or - to read it from standard input. The flow
must exist in the database: a worker compiles its flow when it starts ('pgflow flows' lists them).

With --run-id the start is idempotent: if a run of FLOW with that id exists, it is shown instead of starting
another one. With --wait the command waits until the run completed, failed or was cancelled (at most --timeout,
if set), prints its final state and exits with status 1 if the run failed or was cancelled. While it waits, it
warns on standard error when no alive worker serves a queue the run waits on, or when a task waits for
stalled-task recovery.

--json prints the run as a JSON document (ids as strings; see 'pgflow runs show --help'). The input is not
echoed back whole: the text shows at most its first 200 characters, and --json leaves an input of more than
4 KiB out ("input": null, "input_bytes": its size); 'pgflow runs show RUN_ID --json' prints it.`,
		Example: `  pgflow runs start greet --input '{"names": ["ada", "linus"]}'
  pgflow runs start greet --input @input.json --wait --json
  echo '[1, 2, 3]' | pgflow runs start square_all --input - --wait
  pgflow runs start greet --input '{}' --run-id 0f8fad5b-d9cb-469f-a165-70867728950e`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			flow := args[0]
			raw, err := readInput(input, cmd.InOrStdin())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			s, err := openClientSession(ctx, g)
			if err != nil {
				return err
			}
			defer s.Close()

			run, err := s.client.StartRunJSON(ctx, flow, raw, &pgflow.StartOpts{RunID: runID})
			switch {
			case errors.Is(err, pgflow.ErrFlowNotFound):
				return fmt.Errorf("flow %q not found in the database: a worker compiles its flow when it starts (or run the "+
					"flow's CompileSQL statements); 'pgflow flows' lists the flows that exist", flow)
			case errors.Is(err, pgflow.ErrInvalidRunID):
				return fmt.Errorf("--run-id %q is not a UUID (e.g. 0f8fad5b-d9cb-469f-a165-70867728950e)", runID)
			case errors.Is(err, pgflow.ErrRunIDConflict):
				return fmt.Errorf("--run-id %s: %w", runID, err)
			case err != nil:
				return withSchemaHint(err)
			}

			if wait && !run.Status.Terminal() {
				wctx := ctx
				if timeout > 0 {
					var cancel context.CancelFunc
					wctx, cancel = context.WithTimeout(ctx, timeout)
					defer cancel()
				}
				final, err := waitRunWarning(wctx, s, run.ID, cmd.ErrOrStderr())
				if err != nil {
					if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
						return fmt.Errorf("run %s still running after --timeout %s (follow it with 'pgflow runs watch %s')", run.ID, timeout, run.ID)
					}
					return err
				}
				run = final
			}
			d, err := readRun(ctx, s.pool, run.ID, false)
			if err != nil {
				return err
			}
			view := &runView{run: d, echoLimit: startInputJSONLimit} // the caller has the input: no 50 MB echo
			if err := printRun(cmd.OutOrStdout(), view, asJSON, false); err != nil {
				return err
			}
			if wait && (run.Status == pgflow.RunFailed || run.Status == pgflow.RunCancelled) {
				return exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&input, "input", "{}", "run input: JSON text, @FILE or - (standard input)")
	cmd.Flags().StringVar(&runID, "run-id", "", "start the run with this id (a UUID); an existing run with this id is shown instead")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the run ended; exit status 1 if it failed or was cancelled")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with --wait: give up waiting after this long (0: no limit)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the run as JSON")
	return cmd
}

// readInput returns the JSON document of --input: the text itself, the contents of @FILE, or standard input
// for "-". Invalid JSON is an error naming the flag and the parse error.
func readInput(input string, stdin io.Reader) (json.RawMessage, error) {
	raw := []byte(input)
	source := "--input"
	switch {
	case input == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("--input -: read standard input: %w", err)
		}
		raw, source = b, "--input - (standard input)"
	case strings.HasPrefix(input, "@"):
		b, err := os.ReadFile(input[1:])
		if err != nil {
			return nil, fmt.Errorf("--input %s: %w", input, err)
		}
		raw, source = b, "--input "+input
	}
	if strings.TrimSpace(string(raw)) == "" {
		return nil, fmt.Errorf("%s: empty; give a JSON document such as '{}' or '[1, 2]'", source)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return nil, fmt.Errorf("%s is not valid JSON: %v (at byte %d)", source, err, syn.Offset)
		}
		return nil, fmt.Errorf("%s is not valid JSON: %w", source, err)
	}
	return raw, nil
}

// printRun writes the run as JSON or as text.
func printRun(w io.Writer, view *runView, asJSON, withTasks bool) error {
	if asJSON {
		return writeJSON(w, view.document(withTasks))
	}
	view.writeText(w, withTasks)
	return nil
}

func newRunsShowCmd(g *globalOptions) *cobra.Command {
	var asJSON, withTasks bool
	cmd := &cobra.Command{
		Use:   "show RUN_ID",
		Short: "Show a run and the state of its steps",
		Long: `Show one run: its status, input (at most its first 200 characters; --json has all of it) and output, and
for every step its status, tasks (done/total), attempts, time and a detail (the output of a completed step,
the reason a step was skipped ("not run (run failed)" or "not run (run cancelled)" for a step its run ended
before), the error of a failed one, the last error of a step that is retrying, or what a waiting step waits
for). Full error messages follow the table, then warnings about a started run: a queue it waits on that no alive
worker serves, a task that waits for stalled-task recovery because its worker stopped heartbeating.
--tasks adds one line per task (status, attempts, PGMQ queue/message id, worker, error).

--json prints a document with stable snake_case fields: run_id, flow_slug, status, input, output (null unless
completed), error (failed or cancelled runs), remaining_steps, started_at, completed_at, failed_at,
cancelled_at, cancel_reason, warnings[] {kind, text, ...} (only when there is one) and steps[]: step_slug,
step_type, status, remaining_deps, initial_tasks, remaining_tasks, tasks {total, queued, started, completed,
failed, attempts_total, attempts_max, last_error}, output, error_message, skip_reason, created_at, started_at,
completed_at, failed_at, skipped_at, and with --tasks task_list[] {task_index, status, attempts, queue_name, message_id,
error_message, worker_id, queued_at, started_at, completed_at, failed_at}. Ids (run, worker, message) are strings.`,
		Example: `  pgflow runs show 0f8fad5b-d9cb-469f-a165-70867728950e
  pgflow runs show 0f8fad5b-d9cb-469f-a165-70867728950e --tasks
  pgflow runs show 0f8fad5b-d9cb-469f-a165-70867728950e --json | jq '.steps[] | {step_slug, status}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, err := openClientSession(ctx, g)
			if err != nil {
				return err
			}
			defer s.Close()
			d, err := readRun(ctx, s.pool, args[0], withTasks)
			if err != nil {
				return err
			}
			notes, err := runHealth(ctx, s.client, d)
			if err != nil {
				return err
			}
			return printRun(cmd.OutOrStdout(), &runView{run: d, notes: notes}, asJSON, withTasks)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the run as JSON")
	cmd.Flags().BoolVar(&withTasks, "tasks", false, "also list every task")
	return cmd
}

func newRunsWatchCmd(g *globalOptions) *cobra.Command {
	var plain bool
	var poll time.Duration
	cmd := &cobra.Command{
		Use:   "watch RUN_ID",
		Short: "Follow a run live until it ends",
		Long: `Follow a run step by step until it completed, failed or was cancelled, then print its output (or the
failed steps' errors, or the cancel reason). Exits with status 1 if the run failed or was cancelled. It warns
when no alive worker serves a queue the run waits on, or when a task waits for stalled-task recovery.

On a terminal the view is redrawn in place: one line per step with its status, map progress (done/total tasks)
and time. Otherwise (a pipe, a file, or --plain) one line is appended per change. The command listens for the
run's events (LISTEN/NOTIFY) and also re-reads the run every --poll-interval, so it ends even if events cannot be
delivered. A run that has already ended is printed at once.`,
		Example: `  pgflow runs watch 0f8fad5b-d9cb-469f-a165-70867728950e
  pgflow runs watch 0f8fad5b-d9cb-469f-a165-70867728950e --plain | tee run.log`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if poll <= 0 {
				return fmt.Errorf("--poll-interval %s: must be positive", poll)
			}
			ctx := cmd.Context()
			s, err := openClientSession(ctx, g)
			if err != nil {
				return err
			}
			defer s.Close()
			out := cmd.OutOrStdout()
			view := newProgressView(out, !plain && isTerminal(out))
			final, err := watchRun(ctx, s.client, s.pool, args[0], view, poll)
			if err != nil {
				return err
			}
			view.finish(final)
			if final.Run.Status == "failed" || final.Run.Status == "cancelled" {
				return exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&plain, "plain", false, "append one line per change instead of redrawing, also on a terminal")
	cmd.Flags().DurationVar(&poll, "poll-interval", time.Second, "re-read the run at least this often")
	return cmd
}

// waitRunWarning waits for the run like Client.WaitRun and meanwhile checks what it waits on (runHealth): once
// before waiting, then every healthCheckInterval; each new warning is written to warn once.
func waitRunWarning(ctx context.Context, s *clientSession, runID string, warn io.Writer) (*pgflow.Run, error) {
	warned := map[string]bool{}
	check := func() {
		d, err := readRun(ctx, s.pool, runID, false)
		if err != nil {
			return
		}
		notes, err := runHealth(ctx, s.client, d)
		if err != nil {
			return
		}
		now := map[string]bool{}
		for _, n := range notes {
			now[n.Text] = true
			if !warned[n.Text] {
				fmt.Fprintf(warn, "warning: run %s: %s\n", runID, n.Text)
			}
		}
		warned = now
	}
	check()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	defer func() {
		cancel() // ends the checks
		<-done
	}()
	go func() {
		defer close(done)
		t := time.NewTicker(healthCheckInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				check()
			}
		}
	}()
	return s.client.WaitRun(ctx, runID)
}
