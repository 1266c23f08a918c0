package sqlapi

// Schedules (schema v0.20.0): the workers' upsert at startup, the scheduler's read of the timetables and its
// firing pass under an advisory lock, and the operators' list, pause and resume.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgflow-go/pgflow/internal/pgerr"
)

// SchedulerLockKey is the transaction-level advisory lock (single bigint form) a firing pass takes with
// pg_try_advisory_xact_lock, so that one worker of a database fires due ticks at a time: "pgflowsc" in ASCII.
// It differs from MaintenanceLockKey and from the migrator's and the PGMQ installer's keys.
const SchedulerLockKey int64 = 0x7067666c6f777363

// ErrScheduleNotFound is wrapped by PauseSchedule's and ResumeSchedule's errors for an unknown schedule name.
var ErrScheduleNotFound = errors.New("schedule not found")

// ScheduleDef is the definition of a schedule as the code states it.
type ScheduleDef struct {
	Name       string
	Flow       string
	Cron       string
	TimeZone   string
	Input      json.RawMessage
	Missed     string // skip | catch_up
	MaxCatchUp int
}

// UpsertSchedule calls pgflow.upsert_schedule and returns its status: created, updated or unchanged. since is the
// horizon of a new schedule (or of a changed timetable); next is the informational next tick.
func UpsertSchedule(ctx context.Context, db DBTX, d ScheduleDef, since time.Time, next *time.Time) (string, error) {
	var status string
	err := db.QueryRow(ctx, `select pgflow.upsert_schedule(schedule_name => $1::text, flow_slug => $2::text,
		cron => $3::text, time_zone => $4::text, input => $5::jsonb, missed => $6::text, max_catch_up => $7::int,
		since => $8::timestamptz, next_tick => $9::timestamptz)`,
		d.Name, d.Flow, d.Cron, d.TimeZone, string(d.Input), d.Missed, d.MaxCatchUp, since, next).Scan(&status)
	if err != nil {
		return "", fmt.Errorf("pgflow.upsert_schedule(%q): %w", d.Name, err)
	}
	return status, nil
}

// Timetable is what the scheduler needs of a schedule to compute its due ticks.
type Timetable struct {
	Name       string
	Cron       string
	TimeZone   string
	Missed     string
	MaxCatchUp int
	Paused     bool
	LastTick   time.Time
}

// ScheduleTimetables reads every schedule's timetable (one statement; inputs are not read).
func ScheduleTimetables(ctx context.Context, db DBTX) ([]Timetable, error) {
	rows, err := db.Query(ctx, `select s.schedule_name, s.cron, s.time_zone, s.missed, s.max_catch_up, s.paused, s.last_tick
		from pgflow.schedules as s order by s.schedule_name`)
	if err != nil {
		return nil, fmt.Errorf("read pgflow.schedules: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Timetable, error) {
		var t Timetable
		err := r.Scan(&t.Name, &t.Cron, &t.TimeZone, &t.Missed, &t.MaxCatchUp, &t.Paused, &t.LastTick)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("read pgflow.schedules: %w", err)
	}
	return out, nil
}

// Tick is one tick to fire.
type Tick struct {
	Schedule string
	At       time.Time
	Next     *time.Time // informational next tick stored with it
}

// Fired is the outcome of one tick of a firing pass.
type Fired struct {
	Tick
	RunID string // the run started; "" when the tick had fired already or the schedule is paused
	Err   error  // the tick stays due
}

// FireTicks fires ticks in order in one transaction that first takes SchedulerLockKey with
// pg_try_advisory_xact_lock. When another session holds the lock it fires nothing and returns locked = false.
// Each tick runs in its own savepoint: an error (e.g. the flow refuses the input) is reported in its Fired and
// leaves the tick due, without undoing the others.
func FireTicks(ctx context.Context, db TxBeginner, ticks []Tick) (locked bool, fired []Fired, err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, nil, fmt.Errorf("fire schedule ticks: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := tx.QueryRow(ctx, `select pg_try_advisory_xact_lock($1::bigint)`, SchedulerLockKey).Scan(&locked); err != nil {
		return false, nil, fmt.Errorf("fire schedule ticks: advisory lock %d: %w", SchedulerLockKey, err)
	}
	if !locked {
		return false, nil, nil
	}
	for _, t := range ticks {
		f := Fired{Tick: t}
		f.RunID, f.Err = fireTick(ctx, tx, t)
		fired = append(fired, f)
	}
	if err := tx.Commit(ctx); err != nil {
		return true, nil, fmt.Errorf("fire schedule ticks: commit: %w", err)
	}
	return true, fired, nil
}

// fireTick calls pgflow.fire_schedule_tick in a savepoint of tx.
func fireTick(ctx context.Context, tx pgx.Tx, t Tick) (string, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return "", fmt.Errorf("fire tick %s of schedule %q: savepoint: %w", t.At.UTC().Format(time.RFC3339Nano), t.Schedule, err)
	}
	var id *string
	err = sp.QueryRow(ctx, `select pgflow.fire_schedule_tick(schedule_name => $1::text, tick => $2::timestamptz,
		next_tick => $3::timestamptz)::text`, t.Schedule, t.At, t.Next).Scan(&id)
	if err != nil {
		_ = sp.Rollback(ctx)
		return "", fmt.Errorf("pgflow.fire_schedule_tick(%q, %s): %w", t.Schedule, t.At.UTC().Format(time.RFC3339Nano), err)
	}
	if err := sp.Commit(ctx); err != nil {
		return "", fmt.Errorf("fire tick %s of schedule %q: release savepoint: %w", t.At.UTC().Format(time.RFC3339Nano), t.Schedule, err)
	}
	if id == nil {
		return "", nil
	}
	return *id, nil
}

// ScheduleRow is a pgflow.schedules row.
type ScheduleRow struct {
	Name       string
	Flow       string
	Cron       string
	TimeZone   string
	Input      json.RawMessage
	Missed     string
	MaxCatchUp int
	Paused     bool
	LastTick   time.Time
	LastRunID  *string
	NextTick   *time.Time
	CreatedAt  time.Time
	UpdatedAt  time.Time
	PausedAt   *time.Time
}

const scheduleColumns = `s.schedule_name, s.flow_slug, s.cron, s.time_zone, s.input::text, s.missed, s.max_catch_up,
	s.paused, s.last_tick, s.last_run_id::text, s.next_tick, s.created_at, s.updated_at, s.paused_at`

func scanSchedule(r pgx.Row) (ScheduleRow, error) {
	var s ScheduleRow
	var input string
	err := r.Scan(&s.Name, &s.Flow, &s.Cron, &s.TimeZone, &input, &s.Missed, &s.MaxCatchUp, &s.Paused, &s.LastTick,
		&s.LastRunID, &s.NextTick, &s.CreatedAt, &s.UpdatedAt, &s.PausedAt)
	s.Input = json.RawMessage(input)
	return s, err
}

// ListSchedules reads every schedule, by name.
func ListSchedules(ctx context.Context, db DBTX) ([]ScheduleRow, error) {
	rows, err := db.Query(ctx, `select `+scheduleColumns+` from pgflow.schedules as s order by s.schedule_name`)
	if err != nil {
		return nil, fmt.Errorf("list pgflow.schedules: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ScheduleRow, error) { return scanSchedule(r) })
	if err != nil {
		return nil, fmt.Errorf("list pgflow.schedules: %w", err)
	}
	return out, nil
}

// PauseSchedule calls pgflow.pause_schedule(name). An unknown name yields an error wrapping ErrScheduleNotFound.
func PauseSchedule(ctx context.Context, db DBTX, name string) (ScheduleRow, error) {
	return scheduleCall(ctx, db, "pause_schedule", name)
}

// ResumeSchedule calls pgflow.resume_schedule(name). An unknown name yields an error wrapping ErrScheduleNotFound.
func ResumeSchedule(ctx context.Context, db DBTX, name string) (ScheduleRow, error) {
	return scheduleCall(ctx, db, "resume_schedule", name)
}

func scheduleCall(ctx context.Context, db DBTX, fn, name string) (ScheduleRow, error) {
	row, err := scanSchedule(db.QueryRow(ctx, `select `+scheduleColumns+` from pgflow.`+fn+`($1::text) as s`, name))
	if err != nil {
		if pgerr.Code(err) == "P0002" {
			return ScheduleRow{}, fmt.Errorf("pgflow.%s(%q): %w: %w", fn, name, ErrScheduleNotFound, err)
		}
		return ScheduleRow{}, fmt.Errorf("pgflow.%s(%q): %w", fn, name, err)
	}
	return row, nil
}
