package main

// schedules list, pause and resume: the cron schedules workers fire (pgflow.schedules).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgflow-go/pgflow"
)

func newSchedulesCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "List, pause and resume the cron schedules that start runs",
		Long: `List the cron schedules stored in pgflow.schedules, pause one, or resume it.

Schedules are defined in Go (pgflow.NewSchedule, WorkerConfig.Schedules); workers write them to the database
when they start and fire their ticks. Pausing is operator state: a worker restart never unpauses a schedule.
See docs/schedules.md.`,
		Example: `  pgflow schedules list
  pgflow schedules pause nightly_report
  pgflow schedules resume nightly_report`,
	}
	cmd.AddCommand(newSchedulesListCmd(g), newSchedulesPauseCmd(g, true), newSchedulesPauseCmd(g, false))
	return cmd
}

type scheduleJSON struct {
	Name       string          `json:"schedule_name"`
	Flow       string          `json:"flow_slug"`
	Cron       string          `json:"cron"`
	TimeZone   string          `json:"time_zone"`
	Input      json.RawMessage `json:"input"`
	Missed     string          `json:"missed"`
	MaxCatchUp int             `json:"max_catch_up"`
	Paused     bool            `json:"paused"`
	PausedAt   *time.Time      `json:"paused_at"`
	LastTick   time.Time       `json:"last_tick"`
	LastRunID  *string         `json:"last_run_id"`
	NextTick   *time.Time      `json:"next_tick"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
}

func scheduleDocument(s pgflow.ScheduleInfo) scheduleJSON {
	return scheduleJSON{Name: s.Name, Flow: s.Flow, Cron: s.Cron, TimeZone: s.TimeZone, Input: s.Input,
		Missed: s.Missed.String(), MaxCatchUp: s.MaxCatchUp, Paused: s.Paused, PausedAt: s.PausedAt,
		LastTick: s.LastTick, LastRunID: strPtr(s.LastRunID), NextTick: s.NextTick, CreatedAt: s.CreatedAt,
		UpdatedAt: s.UpdatedAt}
}

func newSchedulesListCmd(g *globalOptions) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the schedules: flow, cron, time zone, missed-tick policy, paused, last and next tick",
		Long: `List every schedule by name.

CRON is read in ZONE. MISSED is what happens to ticks that passed while no worker ran: skip (only the most recent
due tick fires) or catch_up (each missed tick fires, at most the number after the slash, the most recent ones).
LAST_TICK is the schedule's horizon: the last fired tick, or when it was created, its timetable changed or it was
resumed - only later ticks fire. NEXT_TICK is the next tick as a worker last computed it ("-" when unknown, e.g.
right after a resume; "paused" while paused). LAST_RUN is the run the last fired tick started.

--json prints an array of documents with the fields schedule_name, flow_slug, cron, time_zone, input, missed,
max_catch_up, paused, paused_at, last_tick, last_run_id, next_tick, created_at and updated_at.`,
		Example: `  pgflow schedules list
  pgflow schedules list --json | jq -r '.[] | select(.paused) | .schedule_name'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, err := openClientSession(ctx, g)
			if err != nil {
				return err
			}
			defer s.Close()
			list, err := s.client.ListSchedules(ctx)
			if err != nil {
				return withSchemaHint(err)
			}
			docs := make([]scheduleJSON, 0, len(list))
			for _, sc := range list {
				docs = append(docs, scheduleDocument(sc))
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), docs)
			}
			writeScheduleTable(cmd.OutOrStdout(), list)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the schedules as JSON")
	return cmd
}

func writeScheduleTable(w io.Writer, list []pgflow.ScheduleInfo) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no schedules (define them with pgflow.NewSchedule and WorkerConfig.Schedules)")
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "SCHEDULE\tFLOW\tCRON\tZONE\tMISSED\tPAUSED\tLAST_TICK\tNEXT_TICK\tLAST_RUN")
	for _, s := range list {
		missed := s.Missed.String()
		if s.Missed == pgflow.CatchUpMissed {
			missed = fmt.Sprintf("%s/%d", missed, s.MaxCatchUp)
		}
		paused, next := "no", "-"
		if s.Paused {
			paused, next = "yes", "paused"
			if s.PausedAt != nil {
				paused = "since " + formatTime(*s.PausedAt)
			}
		} else if s.NextTick != nil {
			next = formatTime(*s.NextTick)
		}
		lastRun := s.LastRunID
		if lastRun == "" {
			lastRun = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Flow, s.Cron, s.TimeZone, missed, paused,
			formatTime(s.LastTick), next, lastRun)
	}
	_ = tw.Flush()
}

func newSchedulesPauseCmd(g *globalOptions, pause bool) *cobra.Command {
	var asJSON bool
	verb, done := "resume", "resumed"
	short := "Resume a paused schedule (the ticks missed while paused are not fired)"
	long := `Resume a paused schedule: its next tick after now fires. The ticks that passed while it was paused are not
fired, whatever its missed-tick policy (no backfill). Resuming an active schedule changes nothing. An unknown
name is an error (exit status 1).`
	if pause {
		verb, done = "pause", "paused"
		short = "Pause a schedule: it fires no tick until resumed"
		long = `Pause a schedule: from now on it fires no tick until 'pgflow schedules resume'. Runs it started before
are not touched. The pause is stored in the database: restarting or redeploying workers keeps it. Pausing a
paused schedule changes nothing. An unknown name is an error (exit status 1).`
	}
	cmd := &cobra.Command{
		Use:     verb + " SCHEDULE",
		Short:   short,
		Long:    long + "\n\n--json prints the schedule afterwards, as 'pgflow schedules list --json' prints one.",
		Example: fmt.Sprintf("  pgflow schedules %s nightly_report\n  pgflow schedules %s nightly_report --json", verb, verb),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, err := openClientSession(ctx, g)
			if err != nil {
				return err
			}
			defer s.Close()
			call := s.client.ResumeSchedule
			if pause {
				call = s.client.PauseSchedule
			}
			info, err := call(ctx, args[0])
			if err != nil {
				if errors.Is(err, pgflow.ErrScheduleNotFound) {
					return fmt.Errorf("schedule %q does not exist (pgflow schedules list shows them)", args[0])
				}
				return withSchemaHint(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), scheduleDocument(*info))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s schedule %s\n\n", done, info.Name)
			writeScheduleTable(cmd.OutOrStdout(), []pgflow.ScheduleInfo{*info})
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the schedule as JSON")
	return cmd
}
