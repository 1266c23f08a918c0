package scheduler

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// parser accepts standard 5-field expressions, an optional leading seconds field (6 fields) and the descriptors
// (@yearly, @monthly, @weekly, @daily, @hourly, @every <duration>).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed cron expression read in a time zone: it lists a schedule's ticks.
type Spec struct {
	expr  string
	loc   *time.Location
	spec  *cron.SpecSchedule // nil for @every
	every time.Duration      // @every: ticks are last_tick + k*every, anchored on the previous tick
	// onceAtRepeat: the hour field names fixed hours, so a wall time that the clock shows twice when it is set
	// back (end of daylight saving time) ticks only at its first occurrence.
	onceAtRepeat bool
}

// starBit is how robfig/cron marks a field written with '*' (also '*/n').
const starBit = 1 << 63

// Parse parses expr in the time zone loc. The zone comes from the schedule, never from the expression: a TZ= or
// CRON_TZ= prefix is refused. Errors name the expression.
func Parse(expr string, loc *time.Location) (*Spec, error) {
	if loc == nil {
		loc = time.UTC
	}
	trimmed := strings.TrimSpace(expr)
	if trimmed == "" {
		return nil, fmt.Errorf("cron expression %q is empty", expr)
	}
	if strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ=") {
		return nil, fmt.Errorf("cron expression %q: give the time zone as the schedule's time zone, not in the expression", expr)
	}
	sched, err := parser.Parse(trimmed)
	if err != nil {
		return nil, fmt.Errorf("cron expression %q: %w (use 5 fields \"min hour day month weekday\", 6 with leading seconds, or @hourly, @daily, @every 10m ...)", expr, err)
	}
	s := &Spec{expr: expr, loc: loc}
	switch c := sched.(type) {
	case *cron.SpecSchedule:
		c.Location = loc
		s.spec = c
		s.onceAtRepeat = c.Hour&starBit == 0
	case cron.ConstantDelaySchedule:
		s.every = c.Delay
	default:
		return nil, fmt.Errorf("cron expression %q: unsupported schedule type %T", expr, sched)
	}
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() && s.Next(time.Date(2003, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("cron expression %q never matches a date", expr)
	}
	return s, nil
}

// String returns the expression as given.
func (s *Spec) String() string { return s.expr }

// Location returns the time zone the expression is read in.
func (s *Spec) Location() *time.Location { return s.loc }

// Next returns the first tick strictly after t, or the zero time when there is none within five years (e.g. 30
// February). For @every, the tick after t is t + every: t is taken to be the previous tick.
func (s *Spec) Next(t time.Time) time.Time {
	if s.every > 0 {
		return t.Add(s.every)
	}
	for {
		t = s.spec.Next(t)
		if t.IsZero() || !s.onceAtRepeat || !repeatedWallTime(t.In(s.loc)) {
			return t
		}
	}
}

// repeatedWallTime reports whether the wall-clock time of t (in t's location: the schedule's) was already shown at an earlier
// instant: t falls in the hour repeated when clocks go back. Zones shift by 30 minutes, 1 hour or 2 hours.
func repeatedWallTime(t time.Time) bool {
	for _, d := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		u := t.Add(-d)
		if u.Hour() == t.Hour() && u.Minute() == t.Minute() && u.Second() == t.Second() && u.Day() == t.Day() {
			return true
		}
	}
	return false
}

// windows are the look-back spans Due tries before scanning from the horizon, so that a long downtime of a
// frequent schedule does not cost one step per missed tick.
var windows = []time.Duration{time.Minute, time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour}

// Due returns the ticks t with after < t <= now, the n most recent of them in ascending order, and whether there
// were older ones it left out.
func (s *Spec) Due(after, now time.Time, n int) (ticks []time.Time, more bool) {
	if n < 1 || !now.After(after) {
		return nil, false
	}
	if s.every > 0 {
		k := int64(now.Sub(after) / s.every)
		if k == 0 {
			return nil, false
		}
		first := max(1, k-int64(n)+1)
		for i := first; i <= k; i++ {
			ticks = append(ticks, after.Add(time.Duration(i)*s.every))
		}
		return ticks, first > 1
	}
	for _, w := range windows {
		start := now.Add(-w)
		if !start.After(after) {
			break
		}
		ts, count := s.collect(start, now, n)
		if count >= n {
			older := count > n
			if !older {
				if first := s.Next(after); !first.IsZero() && !first.After(start) {
					older = true
				}
			}
			return ts, older
		}
	}
	ts, count := s.collect(after, now, n)
	return ts, count > n
}

// collect returns the last n ticks in (from, to] in ascending order and how many ticks that span holds.
func (s *Spec) collect(from, to time.Time, n int) ([]time.Time, int) {
	ring := make([]time.Time, 0, n)
	count := 0
	for t := s.Next(from); !t.IsZero() && !t.After(to); t = s.Next(t) {
		if len(ring) < n {
			ring = append(ring, t)
		} else {
			copy(ring, ring[1:])
			ring[n-1] = t
		}
		count++
	}
	return ring, count
}
