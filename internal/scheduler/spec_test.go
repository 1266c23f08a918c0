package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

func ticks(t *testing.T, s *Spec, from time.Time, n int) []string {
	t.Helper()
	var out []string
	for range n {
		from = s.Next(from)
		out = append(out, from.UTC().Format(time.RFC3339))
	}
	return out
}

func TestParseRefusesBadExpressions(t *testing.T) {
	for expr, msg := range map[string]string{
		"":                         `cron expression "" is empty`,
		"61 * * * *":               `cron expression "61 * * * *": end of range (61) above maximum (59): 61`,
		"* * *":                    `cron expression "* * *": expected 5 to 6 fields, found 3: [* * *]`,
		"* * * * * * *":            `cron expression "* * * * * * *": expected 5 to 6 fields, found 7`,
		"CRON_TZ=UTC * * * * *":    `cron expression "CRON_TZ=UTC * * * * *": give the time zone as the schedule's time zone, not in the expression`,
		"TZ=Europe/Berlin 0 9 * *": `cron expression "TZ=Europe/Berlin 0 9 * *": give the time zone as the schedule's time zone, not in the expression`,
		"0 0 30 2 *":               `cron expression "0 0 30 2 *" never matches a date`,
		"@fortnightly":             `cron expression "@fortnightly": unrecognized descriptor: @fortnightly`,
	} {
		_, err := Parse(expr, time.UTC)
		require.Error(t, err, expr)
		require.Contains(t, err.Error(), msg, expr)
	}
}

func TestSpecFormats(t *testing.T) {
	from := time.Date(2026, 5, 4, 10, 17, 3, 0, time.UTC) // a Monday
	cases := map[string][]string{
		"*/20 * * * *":     {"2026-05-04T10:20:00Z", "2026-05-04T10:40:00Z", "2026-05-04T11:00:00Z"},
		"*/10 * * * * *":   {"2026-05-04T10:17:10Z", "2026-05-04T10:17:20Z", "2026-05-04T10:17:30Z"},
		"30 9 * * MON-FRI": {"2026-05-05T09:30:00Z", "2026-05-06T09:30:00Z", "2026-05-07T09:30:00Z"},
		"@hourly":          {"2026-05-04T11:00:00Z", "2026-05-04T12:00:00Z", "2026-05-04T13:00:00Z"},
		"@daily":           {"2026-05-05T00:00:00Z", "2026-05-06T00:00:00Z", "2026-05-07T00:00:00Z"},
		// @every counts from the previous tick (the schedule's horizon), not from the clock's hour.
		"@every 90m": {"2026-05-04T11:47:03Z", "2026-05-04T13:17:03Z", "2026-05-04T14:47:03Z"},
	}
	for expr, want := range cases {
		s, err := Parse(expr, time.UTC)
		require.NoError(t, err, expr)
		require.Equal(t, want, ticks(t, s, from, 3), expr)
		require.Equal(t, expr, s.String())
	}
}

// 09:00 in New York is 14:00 UTC in winter and 13:00 UTC from the second Sunday of March (2026-03-08).
func TestSpecTimeZoneNewYork(t *testing.T) {
	s, err := Parse("0 9 * * *", mustZone(t, "America/New_York"))
	require.NoError(t, err)
	require.Equal(t, []string{"2026-03-07T14:00:00Z", "2026-03-08T13:00:00Z", "2026-03-09T13:00:00Z"},
		ticks(t, s, time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC), 3))
	require.Equal(t, "America/New_York", s.Location().String())
}

// Europe/Berlin: clocks go from 02:00 to 03:00 on 2026-03-29 and from 03:00 back to 02:00 on 2026-10-25.
func TestSpecDaylightSavingTimeBerlin(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	daily, err := Parse("30 2 * * *", berlin)
	require.NoError(t, err)
	// Spring forward: 02:30 does not exist on 29 March, so that day has no tick.
	require.Equal(t, []string{"2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"},
		ticks(t, daily, time.Date(2026, 3, 27, 12, 0, 0, 0, berlin), 3))
	// Fall back: 02:30 happens twice on 25 October (CEST, then CET); a fixed hour ticks at the first only.
	require.Equal(t, []string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"},
		ticks(t, daily, time.Date(2026, 10, 23, 12, 0, 0, 0, berlin), 3))
	due, more := daily.Due(time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 25, 3, 0, 0, 0, time.UTC), 10)
	require.Equal(t, []time.Time{time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)}, utc(due))
	require.False(t, more)

	// With '*' in the hour field every real half hour ticks, including both runs through the repeated hour.
	halfHourly, err := Parse("*/30 * * * *", berlin)
	require.NoError(t, err)
	require.Equal(t, []string{"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z",
		"2026-10-25T01:30:00Z", "2026-10-25T02:00:00Z"},
		ticks(t, halfHourly, time.Date(2026, 10, 24, 23, 45, 0, 0, time.UTC), 5))
	// ... and the skipped spring hour has no ticks: 01:30 CET is followed by 03:00 CEST.
	require.Equal(t, []string{"2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z"},
		ticks(t, halfHourly, time.Date(2026, 3, 29, 0, 15, 0, 0, time.UTC), 2))
}

func utc(ts []time.Time) []time.Time {
	out := make([]time.Time, len(ts))
	for i, t := range ts {
		out[i] = t.UTC()
	}
	return out
}

func TestDue(t *testing.T) {
	hourly, err := Parse("0 * * * *", time.UTC)
	require.NoError(t, err)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }

	due, more := hourly.Due(t0, t0.Add(30*time.Minute), 1)
	require.Empty(t, due)
	require.False(t, more)
	due, more = hourly.Due(t0, at(1), 1)
	require.Equal(t, []time.Time{at(1)}, due, "a tick exactly at now is due")
	require.False(t, more)
	due, more = hourly.Due(t0, at(5).Add(30*time.Minute), 1)
	require.Equal(t, []time.Time{at(5)}, due)
	require.True(t, more)
	due, more = hourly.Due(t0, at(5).Add(30*time.Minute), 3)
	require.Equal(t, []time.Time{at(3), at(4), at(5)}, due)
	require.True(t, more)
	due, more = hourly.Due(t0, at(5).Add(30*time.Minute), 5)
	require.Equal(t, []time.Time{at(1), at(2), at(3), at(4), at(5)}, due)
	require.False(t, more)
	due, _ = hourly.Due(at(2), at(2), 5)
	require.Empty(t, due)

	// A year of downtime of an every-second schedule: the most recent ticks, found without a step per tick.
	secondly, err := Parse("* * * * * *", time.UTC)
	require.NoError(t, err)
	now := t0.AddDate(1, 0, 0).Add(500 * time.Millisecond)
	due, more = secondly.Due(t0, now, 2)
	require.Equal(t, []time.Time{t0.AddDate(1, 0, 0).Add(-time.Second), t0.AddDate(1, 0, 0)}, due)
	require.True(t, more)

	// @every is anchored on the horizon.
	every, err := Parse("@every 10m", time.UTC)
	require.NoError(t, err)
	anchor := t0.Add(7 * time.Second)
	due, more = every.Due(anchor, anchor.Add(35*time.Minute), 2)
	require.Equal(t, []time.Time{anchor.Add(20 * time.Minute), anchor.Add(30 * time.Minute)}, due)
	require.True(t, more)
	due, more = every.Due(anchor, anchor.Add(9*time.Minute), 2)
	require.Empty(t, due)
	require.False(t, more)
}
