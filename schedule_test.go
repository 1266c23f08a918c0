package pgflow

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

type reportInput struct {
	Kind string `json:"kind"`
}

func reportFlow(slug string) *Flow[reportInput] {
	f := NewFlow[reportInput](slug)
	Step(f, "make", func(ctx context.Context, tk *Task[reportInput]) (string, error) {
		in, err := tk.FlowInput(ctx)
		return in.Kind, err
	})
	return f
}

func TestNewScheduleValidates(t *testing.T) {
	t.Parallel()
	flow := reportFlow("reports")
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)

	s, err := NewSchedule("nightly_report", flow, "30 2 * * *", reportInput{Kind: "daily"},
		&ScheduleOpts{TimeZone: berlin, Missed: CatchUpMissed})
	require.NoError(t, err)
	require.Equal(t, "nightly_report", s.Name())
	require.Equal(t, "reports", s.Flow())
	require.Equal(t, "30 2 * * *", s.Cron())
	require.Equal(t, "Europe/Berlin", s.TimeZone().String())
	require.JSONEq(t, `{"kind":"daily"}`, string(s.Input()))
	require.Equal(t, time.Date(2026, 3, 30, 0, 30, 0, 0, time.UTC), s.Next(time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)).UTC(),
		"no 02:30 on the spring-forward day")
	d := s.def()
	require.Equal(t, "catch_up", d.Missed)
	require.Equal(t, DefaultMaxCatchUp, d.MaxCatchUp)

	s, err = NewSchedule("every_10s", flow, "*/10 * * * * *", reportInput{}, nil)
	require.NoError(t, err)
	require.Equal(t, "UTC", s.def().TimeZone)
	require.Equal(t, "skip", s.def().Missed)

	badFlow := NewFlow[reportInput]("1bad")
	cases := []struct {
		name, cron string
		flow       *Flow[reportInput]
		opts       *ScheduleOpts
		want       string
	}{
		{"9lives", "@daily", flow, nil, `pgflow: NewSchedule: invalid schedule name: "9lives" starts with a digit`},
		{"", "@daily", flow, nil, `pgflow: NewSchedule: invalid schedule name: slug is empty`},
		{"s", "@daily", nil, nil, `pgflow: NewSchedule "s": flow is nil; create it with NewFlow`},
		{"s", "@daily", badFlow, nil, `pgflow: NewSchedule "s": flow "1bad" has definition errors`},
		{"s", "0 25 * * *", flow, nil, `pgflow: NewSchedule "s": cron expression "0 25 * * *": end of range (25) above maximum (23): 25`},
		{"s", "CRON_TZ=Asia/Tokyo 0 9 * * *", flow, nil, `give the time zone as the schedule's time zone`},
		{"s", "@daily", flow, &ScheduleOpts{TimeZone: time.Local}, `pgflow: NewSchedule "s": ScheduleOpts.TimeZone is time.Local; name the zone`},
		{"s", "@daily", flow, &ScheduleOpts{Missed: 7}, `pgflow: NewSchedule "s": ScheduleOpts.Missed = 7: use SkipMissed or CatchUpMissed`},
		{"s", "@daily", flow, &ScheduleOpts{MaxCatchUp: 1001}, `pgflow: NewSchedule "s": ScheduleOpts.MaxCatchUp = 1001: must be between 1 and 1000 (0 means 10)`},
		{"s", "@daily", flow, &ScheduleOpts{MaxCatchUp: -1}, `ScheduleOpts.MaxCatchUp = -1`},
	}
	for _, c := range cases {
		_, err := NewSchedule(c.name, c.flow, c.cron, reportInput{}, c.opts)
		require.Error(t, err, c.name+" "+c.cron)
		require.Contains(t, err.Error(), c.want)
	}

	_, err = NewSchedule("nan", NewFlow[float64]("numbers"), "@daily", math.NaN(), nil)
	require.ErrorContains(t, err, `pgflow: NewSchedule "nan": input of flow "numbers" does not encode to JSON`)
}

func TestWorkerConfigRefusesBadSchedules(t *testing.T) {
	t.Parallel()
	flow := reportFlow("reports")
	s, err := NewSchedule("nightly", flow, "@daily", reportInput{}, nil)
	require.NoError(t, err)
	cfg, _ := testConfig(t)
	cfg.Flows = []WorkerFlow{{Flow: flow}}
	cfg.Schedules = []*Schedule{s, nil, s, {}}
	_, err = cfg.resolve()
	require.ErrorContains(t, err, "pgflow: WorkerConfig.Schedules[1] = nil: create schedules with NewSchedule")
	require.ErrorContains(t, err, `pgflow: WorkerConfig.Schedules[2] = "nightly": is listed more than once`)
	require.ErrorContains(t, err, `pgflow: WorkerConfig.Schedules[3] = a zero Schedule: create schedules with NewSchedule`)
}

// A schedule whose flow is not in the database stops the worker's startup with an error naming both.
func TestWorkerScheduleOfUnknownFlow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	other := reportFlow("not_compiled")
	s, err := NewSchedule("orphan", other, "@daily", reportInput{}, nil)
	require.NoError(t, err)
	cfg, _ := testConfig(t)
	cfg.Schedules = []*Schedule{s}
	w, err := newWorkerFor(t, db.Pool, reportFlow("reports"), cfg)
	require.NoError(t, err)
	err = w.Start(context.Background())
	require.ErrorContains(t, err, `write schedule "orphan"`)
	require.ErrorContains(t, err, `flow 'not_compiled' does not exist`)
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `select count(*)::int from pgflow.schedules`).Scan(&n))
	require.Equal(t, 0, n)
}

// scheduledTicks returns, for every run of flow, the whole-second tick of schedule whose derived run id it has,
// in order; a run that no tick of the span explains fails the test.
func scheduledTicks(t *testing.T, db *pgtest.DB, flow, schedule string, from, to time.Time) []time.Time {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		select r.run_id::text, (select g from generate_series(date_trunc('second', $3::timestamptz),
		                                                     $4::timestamptz, '1 second') g
		                        where pgflow.schedule_run_id($2, g) = r.run_id)
		  from pgflow.runs r where r.flow_slug = $1 order by 2`, flow, schedule, from, to)
	require.NoError(t, err)
	defer rows.Close()
	var out []time.Time
	for rows.Next() {
		var id string
		var tick *time.Time
		require.NoError(t, rows.Scan(&id, &tick))
		require.NotNil(t, tick, "run %s was not started by a tick of %s", id, schedule)
		out = append(out, tick.UTC())
	}
	require.NoError(t, rows.Err())
	return out
}

// Two Workers with the same every-second schedule: each tick starts one run (the runs complete), and a worker that
// restarts mid-way neither repeats nor duplicates ticks.
func TestTwoWorkersFireEachTickOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	begin := time.Now()
	flow := reportFlow("ticking")
	s, err := NewSchedule("every_second", flow, "* * * * * *", reportInput{Kind: "tick"}, nil)
	require.NoError(t, err)
	cfg, _ := testConfig(t)
	cfg.Schedules = []*Schedule{s}
	a := startWorker(t, db.Pool, flow, cfg)
	b := startWorker(t, db.Pool, flow, cfg)

	runs := func() int {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`select count(*)::int from pgflow.runs where flow_slug = 'ticking'`).Scan(&n))
		return n
	}
	waitFor(t, "4 scheduled runs", func() bool { return runs() >= 4 })
	require.NoError(t, a.stop(t)) // restart one worker mid-way
	a = startWorker(t, db.Pool, flow, cfg)
	at := runs()
	waitFor(t, "3 more scheduled runs", func() bool { return runs() >= at+3 })
	require.NoError(t, a.stop(t))
	require.NoError(t, b.stop(t))

	ticks := scheduledTicks(t, db, "ticking", "every_second", begin, time.Now().Add(2*time.Second))
	require.GreaterOrEqual(t, len(ticks), 7)
	for i := 1; i < len(ticks); i++ {
		require.True(t, ticks[i].After(ticks[i-1]), "one run per tick: %v", ticks)
	}
	var last time.Time
	require.NoError(t, db.Pool.QueryRow(context.Background(), `select last_tick from pgflow.schedules`).Scan(&last))
	require.Equal(t, ticks[len(ticks)-1], last.UTC())
	var unfinished int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `select count(*)::int from pgflow.runs
		where flow_slug = 'ticking' and status <> 'completed' and started_at < now() - interval '30 seconds'`).Scan(&unfinished))
	require.Zero(t, unfinished)
}

// startAndStop starts a worker (Start returns once its schedules are written) and stops it.
func startAndStop(t *testing.T, db *pgtest.DB, flow AnyFlow, cfg WorkerConfig) {
	t.Helper()
	w, err := newWorkerFor(t, db.Pool, flow, cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	require.NoError(t, w.Stop(context.Background()))
}

// The Client lists, pauses and resumes schedules; a worker restart keeps a pause; a changed definition in the code
// updates the row.
func TestClientSchedulesAndWorkerUpsert(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	flow := reportFlow("reports")
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	s, err := NewSchedule("morning", flow, "0 9 * * MON-FRI", reportInput{Kind: "morning"}, &ScheduleOpts{TimeZone: ny})
	require.NoError(t, err)
	cfg, _ := testConfig(t)
	cfg.Schedules = []*Schedule{s}
	startAndStop(t, db, flow, cfg)

	c := newClient(t, db.Pool, nil)
	ctx := context.Background()
	list, err := c.ListSchedules(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	got := list[0]
	require.Equal(t, "morning", got.Name)
	require.Equal(t, "reports", got.Flow)
	require.Equal(t, "0 9 * * MON-FRI", got.Cron)
	require.Equal(t, "America/New_York", got.TimeZone)
	require.JSONEq(t, `{"kind":"morning"}`, string(got.Input))
	require.Equal(t, SkipMissed, got.Missed)
	require.False(t, got.Paused)
	require.NotNil(t, got.NextTick)
	require.True(t, s.Next(got.LastTick).Equal(*got.NextTick), "next tick written at startup")
	require.Equal(t, 9, got.NextTick.In(ny).Hour())

	paused, err := c.PauseSchedule(ctx, "morning")
	require.NoError(t, err)
	require.True(t, paused.Paused)
	require.NotNil(t, paused.PausedAt)

	// The code changes the schedule and a worker restarts: the definition is updated, the pause kept.
	s2, err := NewSchedule("morning", flow, "0 8 * * MON-FRI", reportInput{Kind: "morning"},
		&ScheduleOpts{TimeZone: ny, Missed: CatchUpMissed, MaxCatchUp: 3})
	require.NoError(t, err)
	cfg.Schedules = []*Schedule{s2}
	startAndStop(t, db, flow, cfg)
	list, err = c.ListSchedules(ctx)
	require.NoError(t, err)
	require.Equal(t, "0 8 * * MON-FRI", list[0].Cron)
	require.Equal(t, CatchUpMissed, list[0].Missed)
	require.Equal(t, 3, list[0].MaxCatchUp)
	require.True(t, list[0].Paused)

	resumed, err := c.ResumeSchedule(ctx, "morning")
	require.NoError(t, err)
	require.False(t, resumed.Paused)
	require.Nil(t, resumed.PausedAt)

	for _, call := range []func(context.Context, string) (*ScheduleInfo, error){c.PauseSchedule, c.ResumeSchedule} {
		_, err = call(ctx, "nope")
		require.ErrorIs(t, err, ErrScheduleNotFound)
		require.True(t, strings.Contains(err.Error(), `schedule "nope"`), err.Error())
		require.False(t, errors.Is(err, ErrRunNotFound))
	}
}
