package pgflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/pgflow-go/pgflow/internal/scheduler"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// MissedTicks is a schedule's policy for ticks that passed while no worker was running (or while every worker
// was busy failing to reach the database).
type MissedTicks int

const (
	// SkipMissed (the default) fires only the most recent due tick - the tick of the period the clock is in, late -
	// and drops the older ones. A schedule "0 9 * * *" whose workers were down from 08:00 to 14:00 fires its 09:00
	// tick once at 14:00; down from yesterday 08:00 to today 14:00, it fires today's 09:00 tick only.
	SkipMissed MissedTicks = iota
	// CatchUpMissed fires every due tick in order, one run each, at most ScheduleOpts.MaxCatchUp of them (the most
	// recent ones; older ticks are dropped with a warning).
	CatchUpMissed
)

// String returns the policy as pgflow.schedules.missed stores it: "skip" or "catch_up".
func (m MissedTicks) String() string {
	switch m {
	case SkipMissed:
		return scheduler.MissedSkip
	case CatchUpMissed:
		return scheduler.MissedCatchUp
	}
	return fmt.Sprintf("MissedTicks(%d)", int(m))
}

// DefaultMaxCatchUp is ScheduleOpts.MaxCatchUp's default; MaxMaxCatchUp its largest accepted value.
const (
	DefaultMaxCatchUp = 10
	MaxMaxCatchUp     = 1000
)

// ScheduleOpts are the options of NewSchedule. A nil *ScheduleOpts means the defaults.
type ScheduleOpts struct {
	// TimeZone is the zone the cron expression is read in, e.g. time.LoadLocation("America/New_York"). Default
	// UTC. time.Local is refused: every worker must read the schedule the same way, so name the zone.
	TimeZone *time.Location
	// Missed chooses what happens to ticks that passed while no worker ran. Default SkipMissed.
	Missed MissedTicks
	// MaxCatchUp bounds the ticks fired at once with CatchUpMissed (1 to MaxMaxCatchUp; 0 means
	// DefaultMaxCatchUp). Ignored with SkipMissed.
	MaxCatchUp int
}

// Schedule starts runs of a flow with a fixed input on a cron timetable. Create it with NewSchedule and give it to
// the workers in WorkerConfig.Schedules: each worker writes it to pgflow.schedules at startup, and one worker of
// the database at a time (under an advisory lock) fires its due ticks. Each tick starts exactly one run, whose id
// is derived from the schedule name and the tick (pgflow.schedule_run_id), however many workers run and restart.
// A Schedule is immutable and safe for concurrent use.
type Schedule struct {
	name       string
	flow       string
	cron       string
	spec       *scheduler.Spec
	input      json.RawMessage
	missed     MissedTicks
	maxCatchUp int
}

// NewSchedule defines a schedule named name (a slug: 1 to 128 ASCII letters, digits or '_', not starting with a
// digit) that starts flow with input at every tick of cron, read in opts.TimeZone.
//
// cron is a standard 5-field expression ("min hour day-of-month month day-of-week", e.g. "30 9 * * MON-FRI"), a
// 6-field expression with a leading seconds field ("*/10 * * * * *": every 10 seconds), or a descriptor: @yearly,
// @monthly, @weekly, @daily (@midnight), @hourly, or "@every <duration>" (e.g. "@every 90m", at least 1 s, whole
// seconds; its ticks are counted from the schedule's creation or previous tick, not from the clock's hour).
// Daylight saving time: a wall time that does not exist (clocks go forward) has no tick that day; a wall time that
// occurs twice (clocks go back) ticks once, at its first occurrence, when the hour field names fixed hours, and at
// both occurrences when the hour field is '*' (e.g. every 30 minutes: both real half hours tick).
//
// Errors name the schedule and the bad value: an invalid name, a nil or invalid flow, an expression the parser
// refuses, time.Local, an input that does not encode to JSON, an unknown MissedTicks or MaxCatchUp out of range.
func NewSchedule[I any](name string, flow *Flow[I], cron string, input I, opts *ScheduleOpts) (*Schedule, error) {
	if detail := validateSlug(name, maxStepSlugLen); detail != "" {
		return nil, fmt.Errorf("pgflow: NewSchedule: invalid schedule name: %s", detail)
	}
	if flow == nil || flow.c == nil {
		return nil, fmt.Errorf("pgflow: NewSchedule %q: flow is nil; create it with NewFlow", name)
	}
	if err := flow.Err(); err != nil {
		return nil, fmt.Errorf("pgflow: NewSchedule %q: flow %q has definition errors: %w", name, flow.Slug(), err)
	}
	var o ScheduleOpts
	if opts != nil {
		o = *opts
	}
	loc := o.TimeZone
	switch {
	case loc == nil:
		loc = time.UTC
	case loc == time.Local || loc.String() == "Local":
		return nil, fmt.Errorf("pgflow: NewSchedule %q: ScheduleOpts.TimeZone is time.Local; name the zone, e.g. time.LoadLocation(\"Europe/Berlin\"), so every worker reads the schedule alike", name)
	}
	spec, err := scheduler.Parse(cron, loc)
	if err != nil {
		return nil, fmt.Errorf("pgflow: NewSchedule %q: %w", name, err)
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("pgflow: NewSchedule %q: input of flow %q does not encode to JSON: %w", name, flow.Slug(), err)
	}
	if o.Missed != SkipMissed && o.Missed != CatchUpMissed {
		return nil, fmt.Errorf("pgflow: NewSchedule %q: ScheduleOpts.Missed = %d: use SkipMissed or CatchUpMissed", name, int(o.Missed))
	}
	switch {
	case o.MaxCatchUp == 0:
		o.MaxCatchUp = DefaultMaxCatchUp
	case o.MaxCatchUp < 0 || o.MaxCatchUp > MaxMaxCatchUp:
		return nil, fmt.Errorf("pgflow: NewSchedule %q: ScheduleOpts.MaxCatchUp = %d: must be between 1 and %d (0 means %d)",
			name, o.MaxCatchUp, MaxMaxCatchUp, DefaultMaxCatchUp)
	}
	return &Schedule{name: name, flow: flow.Slug(), cron: cron, spec: spec, input: raw, missed: o.Missed,
		maxCatchUp: o.MaxCatchUp}, nil
}

// Name returns the schedule's name.
func (s *Schedule) Name() string { return s.name }

// Flow returns the slug of the flow the schedule starts.
func (s *Schedule) Flow() string { return s.flow }

// Cron returns the cron expression as given.
func (s *Schedule) Cron() string { return s.cron }

// TimeZone returns the zone the expression is read in.
func (s *Schedule) TimeZone() *time.Location { return s.spec.Location() }

// Input returns the JSON input of every run the schedule starts.
func (s *Schedule) Input() json.RawMessage { return append(json.RawMessage(nil), s.input...) }

// Next returns the schedule's first tick strictly after t (for "@every", t + the interval), or the zero time when
// the expression matches no date within five years of t.
func (s *Schedule) Next(t time.Time) time.Time { return s.spec.Next(t) }

func (s *Schedule) def() sqlapi.ScheduleDef {
	return sqlapi.ScheduleDef{Name: s.name, Flow: s.flow, Cron: s.cron, TimeZone: s.spec.Location().String(),
		Input: s.input, Missed: s.missed.String(), MaxCatchUp: s.maxCatchUp}
}

// ErrScheduleNotFound is wrapped by PauseSchedule's and ResumeSchedule's errors for a name no schedule has.
var ErrScheduleNotFound = errors.New("pgflow: schedule not found")

// ScheduleInfo is one schedule as pgflow.schedules stores it.
type ScheduleInfo struct {
	Name       string
	Flow       string
	Cron       string
	TimeZone   string
	Input      json.RawMessage
	Missed     MissedTicks
	MaxCatchUp int
	Paused     bool
	PausedAt   *time.Time
	// LastTick is the schedule's horizon: only later ticks fire. It is the last fired tick, or the moment the
	// schedule was created, its timetable changed or it was resumed, whichever is latest.
	LastTick time.Time
	// LastRunID is the run the most recent fired tick started ("" before the first).
	LastRunID string
	// NextTick is the next tick as a worker last computed it; nil when unknown (e.g. just resumed).
	NextTick  *time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ListSchedules returns every schedule in the database, by name. A role that may read pgflow.schedules suffices
// (roles.sql grants it to pgflow_client).
func (c *Client) ListSchedules(ctx context.Context) ([]ScheduleInfo, error) {
	if err := c.checkSchema(ctx, c.pool); err != nil {
		return nil, fmt.Errorf("pgflow: list schedules: %w", err)
	}
	rows, err := sqlapi.ListSchedules(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("pgflow: list schedules: %w", err)
	}
	out := make([]ScheduleInfo, len(rows))
	for i, r := range rows {
		out[i] = scheduleInfo(r)
	}
	return out, nil
}

// PauseSchedule pauses the named schedule: it fires no tick from the moment this returns until ResumeSchedule.
// Runs it started before are not touched; worker startups never unpause it. Pausing a paused schedule changes
// nothing. An unknown name gives ErrScheduleNotFound.
func (c *Client) PauseSchedule(ctx context.Context, name string) (*ScheduleInfo, error) {
	return c.scheduleControl(ctx, "pause", name, sqlapi.PauseSchedule)
}

// ResumeSchedule resumes the named schedule. The ticks that passed while it was paused are not fired, whatever
// its MissedTicks policy: its next tick after now fires. Resuming an active schedule changes nothing. An unknown
// name gives ErrScheduleNotFound.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*ScheduleInfo, error) {
	return c.scheduleControl(ctx, "resume", name, sqlapi.ResumeSchedule)
}

func (c *Client) scheduleControl(ctx context.Context, verb, name string,
	call func(context.Context, sqlapi.DBTX, string) (sqlapi.ScheduleRow, error)) (*ScheduleInfo, error) {
	if err := c.checkSchema(ctx, c.pool); err != nil {
		return nil, fmt.Errorf("pgflow: %s schedule %q: %w", verb, name, err)
	}
	row, err := call(ctx, c.pool, name)
	if err != nil {
		if errors.Is(err, sqlapi.ErrScheduleNotFound) {
			return nil, fmt.Errorf("pgflow: %s schedule %q: %w (list them: pgflow schedules list)", verb, name, ErrScheduleNotFound)
		}
		return nil, fmt.Errorf("pgflow: %s schedule %q: %w", verb, name, err)
	}
	info := scheduleInfo(row)
	return &info, nil
}

func scheduleInfo(r sqlapi.ScheduleRow) ScheduleInfo {
	info := ScheduleInfo{Name: r.Name, Flow: r.Flow, Cron: r.Cron, TimeZone: r.TimeZone, Input: r.Input,
		MaxCatchUp: r.MaxCatchUp, Paused: r.Paused, PausedAt: r.PausedAt, LastTick: r.LastTick, NextTick: r.NextTick,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if r.Missed == scheduler.MissedCatchUp {
		info.Missed = CatchUpMissed
	}
	if r.LastRunID != nil {
		info.LastRunID = *r.LastRunID
	}
	return info
}

// upsertSchedules writes the worker's schedules to pgflow.schedules (pgflow.upsert_schedule), after its flows
// were compiled.
func (w *Worker) upsertSchedules(ctx context.Context) error {
	for _, sc := range w.cfg.Schedules {
		var status string
		err := w.retryStartup(ctx, fmt.Sprintf("write schedule %q", sc.name), func(ctx context.Context) (err error) {
			now := time.Now()
			var next *time.Time
			if n := sc.spec.Next(now); !n.IsZero() {
				next = &n
			}
			status, err = sqlapi.UpsertSchedule(ctx, w.pool, sc.def(), now, next)
			return err
		})
		if err != nil {
			return err
		}
		log := w.log.With("schedule", sc.name, "flow", sc.flow, "cron", sc.cron, "time_zone", sc.spec.Location().String())
		switch status {
		case "created":
			log.Info("schedule created")
		case "updated":
			log.Info("schedule definition changed: updated")
		default:
			log.Debug("schedule definition matches the database")
		}
	}
	return nil
}
