package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgflow-go/pgflow/internal/reliability"
)

// soakFlags are the knobs of the soak mode.
type soakFlags struct {
	duration   time.Duration
	workers    int
	backlog    int
	faultEvery time.Duration
	events     bool
	drain      time.Duration
}

func (s *soakFlags) register(cmd *cobra.Command, durationFlag string) {
	f := cmd.Flags()
	f.DurationVar(&s.duration, durationFlag, 0, "soak: keep a backlog of runs for this long while injecting faults, then check the reliability invariants")
	f.IntVar(&s.workers, "soak-workers", 4, "soak: in-process workers, split between a one-step and a map flow")
	f.IntVar(&s.backlog, "soak-backlog", 200, "soak: unfinished runs kept in the database")
	f.DurationVar(&s.faultEvery, "soak-fault-every", 15*time.Second, "soak: terminate every worker session this often (0: never)")
	f.BoolVar(&s.events, "soak-events", false, "soak with --database-url: install a realtime.send that records events, to check them too (never replaces an existing one; always on a throwaway cluster)")
	f.DurationVar(&s.drain, "soak-drain", 3*time.Minute, "soak: how long to wait for the backlog once the load stops")
}

// run runs the soak and prints its report; a broken invariant is an error (exit status 1).
func (s *soakFlags) run(cmd *cobra.Command, opts *globalOptions, asJSON, verbose bool) error {
	level := slog.LevelError
	if verbose {
		level = slog.LevelWarn
	}
	faultEvery := s.faultEvery
	if faultEvery == 0 {
		faultEvery = -1
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "soak: %s of load with %d workers, then draining (up to %s)…\n", s.duration, s.workers, s.drain)
	release := announceInterrupt(cmd.Context(), cmd.ErrOrStderr(),
		"soak: interrupted: stopping the workers gracefully (interrupt again to stop them at once)")
	rep, err := reliability.Soak(cmd.Context(), reliability.SoakConfig{
		DatabaseURL:   opts.databaseURL,
		Duration:      s.duration,
		Workers:       s.workers,
		Backlog:       s.backlog,
		FaultEvery:    faultEvery,
		CaptureEvents: s.events,
		DrainTimeout:  s.drain,
		Logger:        slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})),
		StopNow:       stopNowContext(cmd.Context()),
	})
	release()
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		writeSoakReport(out, rep)
	}
	if !rep.OK {
		if asJSON {
			return exitError{code: 1}
		}
		return fmt.Errorf("soak: %d invariants broken", len(rep.Problems))
	}
	return nil
}

func writeSoakReport(w io.Writer, rep reliability.SoakReport) {
	fmt.Fprintf(w, "soak: %s of load, %s in total; %d runs started; %d faults (%d worker sessions terminated)\n",
		rep.Duration, rep.Elapsed.Round(time.Millisecond), rep.RunsStarted, rep.Faults, rep.Terminated)
	for _, inv := range rep.Flows {
		fmt.Fprint(w, inv.String())
	}
	if rep.OK {
		fmt.Fprintln(w, "invariants: all hold (every run completed, every result recorded once and from its own task, no duplicated event, no message left)")
		return
	}
	fmt.Fprintln(w, "invariants BROKEN:")
	for _, p := range rep.Problems {
		fmt.Fprintln(w, "  - "+p)
	}
}

// newSoakCmd returns `pgflow soak`: the soak mode on its own (`pgflow bench --soak DURATION` is the same run).
func newSoakCmd(opts *globalOptions) *cobra.Command {
	var s soakFlags
	var asJSON, verbose bool
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Run a bounded soak test and check the reliability invariants (same as bench --soak)",
		Long: `Soak pgflow-go: in-process workers of a one-step flow and a map flow (reliability test flows rel_one and
rel_map) work a steady backlog of runs for --duration; 10% of the one-step runs fail their first attempt and are
retried, and every --soak-fault-every all worker sessions are terminated with pg_terminate_backend. Then the
load stops, the backlog drains, and the invariants are checked and printed: every run completed, every completed
task holds the result of an invocation of that very task, no run or step completed twice (when events are
captured), no message left in the queues. A broken invariant makes the command fail.

Without --database-url a throwaway cluster is used. With --database-url the schema is installed or migrated,
the flows rel_one and rel_map are deleted and recreated, and a table reliability.invocations is created.`,
		Example: `  pgflow bench --soak 10m
  pgflow soak --duration 2m --soak-workers 6 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if s.duration <= 0 {
				return fmt.Errorf("soak: --duration must be positive, got %s", s.duration)
			}
			return s.run(cmd, opts, asJSON, verbose)
		},
	}
	s.register(cmd, "duration")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "show the workers' warnings")
	return cmd
}

// addSoakMode adds `--soak DURATION` (and the --soak-* knobs) to the bench command: with it, bench runs the soak
// instead of the benchmark scenarios, honouring bench's --json and --verbose.
func addSoakMode(bench *cobra.Command, opts *globalOptions) {
	var s soakFlags
	s.register(bench, "soak")
	runBench := bench.RunE
	bench.RunE = func(cmd *cobra.Command, args []string) error {
		if s.duration <= 0 {
			if cmd.Flags().Changed("soak") {
				return fmt.Errorf("soak: --soak must be a positive duration, got %s", s.duration)
			}
			return runBench(cmd, args)
		}
		asJSON, _ := cmd.Flags().GetBool("json")
		verbose, _ := cmd.Flags().GetBool("verbose")
		return s.run(cmd, opts, asJSON, verbose)
	}
}
