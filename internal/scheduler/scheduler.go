// Package scheduler fires the ticks of the cron schedules stored in pgflow.schedules: a loop in every worker
// reads the timetables, sleeps until the earliest next tick (or a refresh), and fires the due ticks in a
// transaction under an advisory lock, so one worker of a database fires at a time while the others skip. Each
// tick starts at most one run whatever happens (pgflow.fire_schedule_tick refuses ticks at or before last_tick and
// derives the run id from the schedule and the tick). The clock is injected, so tests drive time. It knows
// packages sqlapi only.
package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// Missed-tick policies (pgflow.schedules.missed).
const (
	// MissedSkip fires only the most recent due tick: the tick of the period the clock is in, late; the ticks
	// before it are dropped.
	MissedSkip = "skip"
	// MissedCatchUp fires every due tick in order, at most max_catch_up of them (the most recent ones).
	MissedCatchUp = "catch_up"
)

// DefaultRefresh is how often the loop reads the timetables when no tick is due earlier: how long a new, changed,
// paused or resumed schedule may take to be noticed.
const DefaultRefresh = 30 * time.Second

// lostLockRecheck is how soon a worker that lost the firing lock looks again: the winner normally fires every due
// tick, and a winner whose pass failed leaves them due.
const lostLockRecheck = 2 * time.Second

// Clock tells the time and sleeps; tests replace it.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// DB is what the scheduler needs: queries and transactions (a *pgxpool.Pool).
type DB interface {
	sqlapi.DBTX
	sqlapi.TxBeginner
}

// Config configures a Scheduler.
type Config struct {
	DB      DB
	Clock   Clock         // default: the system clock
	Refresh time.Duration // default DefaultRefresh
	Logger  *slog.Logger  // default slog.Default()
}

// Scheduler fires due ticks; one per worker.
type Scheduler struct {
	db      DB
	clock   Clock
	refresh time.Duration
	log     *slog.Logger

	specs  map[string]*Spec     // by cron + "\x00" + zone: parsed once
	bad    map[string]string    // schedule -> cron + zone already reported as unusable
	failed map[string]time.Time // schedule -> when to try a tick that failed again
}

// New returns a scheduler.
func New(cfg Config) *Scheduler {
	s := &Scheduler{db: cfg.DB, clock: cfg.Clock, refresh: cfg.Refresh, log: cfg.Logger,
		specs: map[string]*Spec{}, bad: map[string]string{}, failed: map[string]time.Time{}}
	if s.clock == nil {
		s.clock = realClock{}
	}
	if s.refresh <= 0 {
		s.refresh = DefaultRefresh
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s
}

// Run runs passes until ctx ends, sleeping between them until the time the previous pass asked to wake at.
func (s *Scheduler) Run(ctx context.Context) {
	for {
		wake, err := s.Pass(ctx)
		if ctx.Err() != nil {
			return
		}
		now := s.clock.Now()
		if err != nil {
			s.log.Warn("schedules: pass failed; trying again later", "error", err)
			wake = now.Add(min(s.refresh, 5*time.Second))
		}
		select {
		case <-ctx.Done():
			return
		case <-s.clock.After(max(wake.Sub(now), 0)):
		}
	}
}

// Pass reads every schedule, fires the due ticks (when it gets the firing lock) and returns when the next pass
// should run: at the earliest next tick, or after the refresh interval, whichever is first.
func (s *Scheduler) Pass(ctx context.Context) (wake time.Time, err error) {
	now := s.clock.Now()
	wake = now.Add(s.refresh)
	tables, err := sqlapi.ScheduleTimetables(ctx, s.db)
	if err != nil {
		return wake, err
	}
	var ticks []sqlapi.Tick
	dropped := map[string]sqlapi.Timetable{} // schedules whose older due ticks this pass leaves out
	for _, t := range tables {
		if t.Paused {
			continue
		}
		spec := s.spec(t)
		if spec == nil {
			continue
		}
		if retry, ok := s.failed[t.Name]; ok {
			if now.Before(retry) {
				wake = earliest(wake, retry)
				continue
			}
			delete(s.failed, t.Name)
		}
		n := 1
		if t.Missed == MissedCatchUp {
			n = t.MaxCatchUp
		}
		due, more := spec.Due(t.LastTick, now, n)
		if more {
			dropped[t.Name] = t
		}
		for _, d := range due {
			next := spec.Next(d)
			tk := sqlapi.Tick{Schedule: t.Name, At: d}
			if !next.IsZero() {
				tk.Next = &next
			}
			ticks = append(ticks, tk)
		}
		from := t.LastTick
		if len(due) > 0 {
			from = due[len(due)-1]
		}
		if next := spec.Next(from); !next.IsZero() {
			wake = earliest(wake, next)
		}
	}
	if len(ticks) == 0 {
		return wake, nil
	}
	locked, fired, err := sqlapi.FireTicks(ctx, s.db, ticks)
	if err != nil {
		return wake, err
	}
	if !locked {
		s.log.Debug("schedules: another worker is firing due ticks", "due", len(ticks))
		return earliest(wake, now.Add(lostLockRecheck)), nil
	}
	for _, f := range fired {
		if t, ok := dropped[f.Schedule]; ok && f.Err == nil {
			delete(dropped, f.Schedule)
			if t.Missed == MissedCatchUp {
				s.log.Warn("schedules: more missed ticks than max_catch_up; fired the most recent ones only",
					"schedule", t.Name, "max_catch_up", t.MaxCatchUp, "first_fired", f.At)
			} else {
				s.log.Info("schedules: skipped missed ticks; fired the most recent one", "schedule", t.Name, "tick", f.At)
			}
		}
		switch {
		case f.Err != nil:
			s.log.Error("schedules: firing a tick failed; trying again after the refresh interval",
				"schedule", f.Schedule, "tick", f.At, "error", f.Err)
			retry := now.Add(s.refresh)
			s.failed[f.Schedule] = retry
		case f.RunID != "":
			s.log.Info("schedules: tick fired", "schedule", f.Schedule, "tick", f.At, "run_id", f.RunID)
		default:
			s.log.Debug("schedules: tick had fired already or the schedule is paused", "schedule", f.Schedule, "tick", f.At)
		}
	}
	return wake, nil
}

// spec returns the parsed timetable of t, or nil (reported once) when this worker cannot read it.
func (s *Scheduler) spec(t sqlapi.Timetable) *Spec {
	key := t.Cron + "\x00" + t.TimeZone
	if sp, ok := s.specs[key]; ok {
		return sp
	}
	loc, err := time.LoadLocation(t.TimeZone)
	var sp *Spec
	if err == nil {
		sp, err = Parse(t.Cron, loc)
	}
	if err != nil {
		if s.bad[t.Name] != key {
			s.bad[t.Name] = key
			s.log.Error("schedules: cannot read a schedule; it does not fire from this worker",
				"schedule", t.Name, "cron", t.Cron, "time_zone", t.TimeZone, "error", fmt.Errorf("schedule %q: %w", t.Name, err))
		}
		return nil
	}
	s.specs[key] = sp
	return sp
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
