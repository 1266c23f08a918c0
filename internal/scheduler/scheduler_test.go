package scheduler_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/scheduler"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// fakeClock is a clock the test sets; passes run at the time it shows.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// After never fires: these tests call Pass themselves.
func (c *fakeClock) After(time.Duration) <-chan time.Time { return nil }

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func hours(h float64) time.Time { return t0.Add(time.Duration(h * float64(time.Hour))) }

func setup(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), `select pgflow.create_flow('job'); select pgflow.add_step('job', 'only')`)
	require.NoError(t, err)
	return db.Pool
}

func upsert(t *testing.T, pool *pgxpool.Pool, name, cron, missed string, maxCatchUp int, since time.Time) string {
	t.Helper()
	status, err := sqlapi.UpsertSchedule(context.Background(), pool, sqlapi.ScheduleDef{Name: name, Flow: "job", Cron: cron,
		TimeZone: "UTC", Input: json.RawMessage(`{"from":"` + name + `"}`), Missed: missed, MaxCatchUp: maxCatchUp}, since, nil)
	require.NoError(t, err)
	return status
}

func newScheduler(pool *pgxpool.Pool, clock scheduler.Clock) *scheduler.Scheduler {
	return scheduler.New(scheduler.Config{DB: pool, Clock: clock, Logger: slog.New(slog.DiscardHandler)})
}

// firedTicks lists the ticks whose runs exist, per schedule, as hours after t0: a run's id is derived from its
// schedule and tick, so the test finds each tick's run by recomputing the id.
func firedTicks(t *testing.T, pool *pgxpool.Pool, name string, upTo float64) []float64 {
	t.Helper()
	var out []float64
	for h := 0.0; h <= upTo; h += 0.25 {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), `select count(*)::int from pgflow.runs
			where run_id = pgflow.schedule_run_id($1, $2)`, name, hours(h)).Scan(&n))
		if n > 0 {
			out = append(out, h)
		}
	}
	return out
}

func runCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `select count(*)::int from pgflow.runs`).Scan(&n))
	return n
}

func TestPassFiresDueTicksAndWakesAtTheNext(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	clock := &fakeClock{now: hours(1).Add(-10 * time.Second)}
	upsert(t, pool, "hourly", "0 * * * *", "skip", 10, t0)
	s := newScheduler(pool, clock)

	wake, err := s.Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, hours(1), wake.UTC(), "nothing due: wake at the next tick")
	require.Equal(t, 0, runCount(t, pool))

	clock.Set(hours(1))
	wake, err = s.Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, hours(1).Add(scheduler.DefaultRefresh), wake.UTC(), "the next tick is an hour away: the refresh comes first")
	require.Equal(t, []float64{1}, firedTicks(t, pool, "hourly", 3))
	rows, err := sqlapi.ListSchedules(context.Background(), pool)
	require.NoError(t, err)
	require.Equal(t, hours(1), rows[0].LastTick.UTC())
	require.Equal(t, hours(2), rows[0].NextTick.UTC(), "the informational next tick")

	// A pass at the same time again fires nothing more.
	_, err = s.Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, runCount(t, pool))
}

func TestPassRefreshBoundsTheWake(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	clock := &fakeClock{now: hours(0.5)}
	upsert(t, pool, "daily", "@daily", "skip", 10, t0)
	wake, err := newScheduler(pool, clock).Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, hours(0.5).Add(scheduler.DefaultRefresh), wake.UTC(), "a tick far away: read the table again after the refresh")
}

// Two workers' schedulers pass at the same moments (as they would, both waking at the tick): every tick starts
// exactly one run, whoever wins the lock.
func TestTwoSchedulersFireEachTickOnce(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	other, err := pgxpool.New(context.Background(), pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(other.Close)
	clock := &fakeClock{}
	upsert(t, pool, "quarter", "*/15 * * * *", "catch_up", 10, t0)
	upsert(t, pool, "hourly", "0 * * * *", "skip", 10, t0)
	a, b := newScheduler(pool, clock), newScheduler(other, clock)

	for step := 1; step <= 12; step++ {
		clock.Set(hours(float64(step) * 0.25))
		var wg sync.WaitGroup
		for _, s := range []*scheduler.Scheduler{a, b} {
			wg.Go(func() {
				_, err := s.Pass(context.Background())
				require.NoError(t, err)
			})
		}
		wg.Wait()
	}
	// A tick may be fired by the loser's later pass (it rechecks soon after losing); passes at the last time
	// again make sure nothing is left due, and still nothing doubles.
	for _, s := range []*scheduler.Scheduler{a, b} {
		_, err := s.Pass(context.Background())
		require.NoError(t, err)
	}
	require.Equal(t, []float64{0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.25, 2.5, 2.75, 3}, firedTicks(t, pool, "quarter", 3))
	require.Equal(t, []float64{1, 2, 3}, firedTicks(t, pool, "hourly", 3))
	require.Equal(t, 15, runCount(t, pool))
}

// While another session holds the firing lock, a pass fires nothing and looks again soon.
func TestPassSkipsWhileAnotherWorkerFires(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	clock := &fakeClock{now: hours(1)}
	upsert(t, pool, "hourly", "0 * * * *", "skip", 10, t0)
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(context.Background(), `select pg_advisory_xact_lock($1::bigint)`, sqlapi.SchedulerLockKey)
	require.NoError(t, err)

	s := newScheduler(pool, clock)
	wake, err := s.Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, 0, runCount(t, pool))
	require.Equal(t, hours(1).Add(2*time.Second), wake.UTC())

	require.NoError(t, tx.Rollback(context.Background()))
	_, err = s.Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, []float64{1}, firedTicks(t, pool, "hourly", 2))
}

// After a downtime (no pass between t0 and 5h30), skip fires the tick of the current period only; catch_up fires
// the missed ticks in order, at most max_catch_up, the most recent ones.
func TestMissedTicksSkipAndCatchUp(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	clock := &fakeClock{now: hours(5.5)}
	upsert(t, pool, "skipper", "0 * * * *", "skip", 10, t0)
	upsert(t, pool, "catcher", "0 * * * *", "catch_up", 3, t0)
	upsert(t, pool, "all", "0 * * * *", "catch_up", 10, t0)
	_, err := newScheduler(pool, clock).Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, []float64{5}, firedTicks(t, pool, "skipper", 6))
	require.Equal(t, []float64{3, 4, 5}, firedTicks(t, pool, "catcher", 6))
	require.Equal(t, []float64{1, 2, 3, 4, 5}, firedTicks(t, pool, "all", 6))

	// The runs started in tick order.
	var ordered bool
	require.NoError(t, pool.QueryRow(context.Background(), `
		select bool_and(a.started_at <= b.started_at) from
		  (select started_at, row_number() over (order by started_at) n from pgflow.runs where input->>'from' = 'all') a
		  join (select started_at, row_number() over (order by started_at) n from pgflow.runs where input->>'from' = 'all') b
		    on b.n = a.n + 1`).Scan(&ordered))
	require.True(t, ordered)
}

// A paused schedule fires nothing; resuming does not fire the ticks missed while paused. resume_schedule moves
// the horizon to the database's now, so this test's clock follows the real time.
func TestPausedScheduleAndResume(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	base := time.Now().UTC().Truncate(time.Hour).Add(-5 * time.Hour)
	clock := &fakeClock{now: base.Add(2*time.Hour + 30*time.Minute)}
	// Every second, catching up: a backfill would be obvious. fire_schedule_tick refuses ticks more than a minute
	// ahead of the database's clock, so the ticks after the resume must be near the real time.
	upsert(t, pool, "secondly", "* * * * * *", "catch_up", 10, base)
	s := newScheduler(pool, clock)
	_, err := sqlapi.PauseSchedule(context.Background(), pool, "secondly")
	require.NoError(t, err)
	wake, err := s.Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, 0, runCount(t, pool))
	require.Equal(t, clock.Now().Add(scheduler.DefaultRefresh).UTC(), wake.UTC(), "a paused schedule does not set the wake")

	resumed, err := sqlapi.ResumeSchedule(context.Background(), pool, "secondly")
	require.NoError(t, err)
	require.True(t, resumed.LastTick.After(base.Add(4*time.Hour)), "the horizon moved to the resume")
	clock.Set(resumed.LastTick)
	_, err = s.Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, 0, runCount(t, pool), "no backfill of the ticks missed while paused")

	next := resumed.LastTick.UTC().Truncate(time.Second).Add(time.Second)
	clock.Set(next)
	_, err = s.Pass(context.Background())
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `select count(*)::int from pgflow.runs
		where run_id = pgflow.schedule_run_id('secondly', $1)`, next).Scan(&n))
	require.Equal(t, 1, n, "the first tick after the resume fires")
	require.Equal(t, 1, runCount(t, pool))
}

// A changed cron starts at the change: the new timetable's ticks before it never fire, the old one's after it
// neither.
func TestChangedScheduleFiresOnTheNewCronOnly(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	clock := &fakeClock{now: hours(1)}
	upsert(t, pool, "s", "0 * * * *", "catch_up", 10, t0)
	s := newScheduler(pool, clock)
	_, err := s.Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, []float64{1}, firedTicks(t, pool, "s", 4))

	// At 1h10 a deploy changes the cron to every 15 minutes at :05, :20, :35, :50.
	require.Equal(t, "updated", upsert(t, pool, "s", "5/15 * * * *", "catch_up", 10, hours(1).Add(10*time.Minute)))
	clock.Set(hours(3))
	_, err = s.Pass(context.Background())
	require.NoError(t, err)
	var ticks []time.Time
	rows, err := pool.Query(context.Background(), `select g from generate_series($1::timestamptz, $2::timestamptz, '5 minutes') g
		where exists (select 1 from pgflow.runs r where r.run_id = pgflow.schedule_run_id('s', g)) order by g`, t0, hours(3))
	require.NoError(t, err)
	for rows.Next() {
		var g time.Time
		require.NoError(t, rows.Scan(&g))
		ticks = append(ticks, g.UTC())
	}
	require.NoError(t, rows.Err())
	// The new cron's ticks after 1h10 (at most 10 of them with catch_up; here 7) and nothing at 2h or 3h.
	want := []time.Time{hours(1)}
	for _, m := range []int{80, 95, 110, 125, 140, 155, 170} {
		want = append(want, t0.Add(time.Duration(m)*time.Minute))
	}
	require.Equal(t, want, ticks)
}

// A tick whose start fails (the flow refuses the input) does not hold the others back, stays due, and is not
// tried again before the refresh interval.
func TestFailingTickDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	_, err := pool.Exec(context.Background(), `select pgflow.create_flow('mapper'); select pgflow.add_step('mapper', 'm', step_type => 'map')`)
	require.NoError(t, err)
	_, err = sqlapi.UpsertSchedule(context.Background(), pool, sqlapi.ScheduleDef{Name: "broken", Flow: "mapper",
		Cron: "0 * * * *", TimeZone: "UTC", Input: json.RawMessage(`{}`), Missed: "skip", MaxCatchUp: 1}, t0, nil)
	require.NoError(t, err)
	upsert(t, pool, "fine", "0 * * * *", "skip", 10, t0)
	clock := &fakeClock{now: hours(1)}
	s := newScheduler(pool, clock)
	wake, err := s.Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, []float64{1}, firedTicks(t, pool, "fine", 2))
	require.Equal(t, 1, runCount(t, pool))
	require.Equal(t, hours(1).Add(scheduler.DefaultRefresh), wake.UTC(), "the failed schedule is retried after the refresh")
	rows, err := sqlapi.ListSchedules(context.Background(), pool)
	require.NoError(t, err)
	require.Equal(t, "broken", rows[0].Name)
	require.Equal(t, t0, rows[0].LastTick.UTC(), "the failed tick stays due")
}

// A cron expression this worker cannot read (written by other code) is skipped; the other schedules fire.
func TestUnreadableScheduleIsSkipped(t *testing.T) {
	t.Parallel()
	pool := setup(t)
	upsert(t, pool, "fine", "0 * * * *", "skip", 10, t0)
	upsert(t, pool, "weird", "0 * * * *", "skip", 10, t0)
	_, err := pool.Exec(context.Background(), `update pgflow.schedules set cron = 'every full moon' where schedule_name = 'weird'`)
	require.NoError(t, err)
	_, err = newScheduler(pool, &fakeClock{now: hours(1)}).Pass(context.Background())
	require.NoError(t, err)
	require.Equal(t, []float64{1}, firedTicks(t, pool, "fine", 2))
	require.Equal(t, 1, runCount(t, pool))
}
