package runtime_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// scheduleDB is a database with flow "sequential" and schedule "nightly" on it whose horizon (last_tick) is
// 2024-01-01 00:00 UTC.
func scheduleDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db := newDB(t)
	fx.SetupFlow(t, db.Pool, "sequential")
	require.Equal(t, "created", fx.Val[string](t, db.Pool, `select pgflow.upsert_schedule('nightly', 'sequential',
		'0 3 * * *', 'Europe/Berlin', '{"k": 1}', since => '2024-01-01T00:00:00Z')`))
	return db.Pool
}

func fire(t *testing.T, db fx.DB, tick string) *string {
	t.Helper()
	return fx.Val[*string](t, db, `select pgflow.fire_schedule_tick('nightly', $1::timestamptz)::text`, tick)
}

func runsOf(t *testing.T, db fx.DB) int {
	t.Helper()
	return fx.Val[int](t, db, `select count(*)::int from pgflow.runs where flow_slug = 'sequential'`)
}

func TestScheduleRunIDIsDerivedFromNameAndTick(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	a := fx.Val[string](t, db, `select pgflow.schedule_run_id('nightly', '2024-03-01T02:00:00Z')::text`)
	// The same instant written in another zone, read in a session with another TimeZone: the same id.
	fx.Exec(t, db, `set timezone = 'America/New_York'`)
	b := fx.Val[string](t, db, `select pgflow.schedule_run_id('nightly', '2024-03-01T03:00:00+01:00')::text`)
	require.Equal(t, a, b)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, a)
	require.NotEqual(t, a, fx.Val[string](t, db, `select pgflow.schedule_run_id('nightly', '2024-03-01T02:00:00.000001Z')::text`))
	require.NotEqual(t, a, fx.Val[string](t, db, `select pgflow.schedule_run_id('daily', '2024-03-01T02:00:00Z')::text`))
	require.Nil(t, fx.Val[*string](t, db, `select pgflow.schedule_run_id(null, now())::text`))
}

func TestFireScheduleTickStartsOneRunPerTick(t *testing.T) {
	t.Parallel()
	db := scheduleDB(t)

	id := fx.Val[*string](t, db, `select pgflow.fire_schedule_tick('nightly', '2024-01-02T02:00:00Z',
		next_tick => '2024-01-03T02:00:00Z')::text`)
	require.NotNil(t, id)
	require.Equal(t, *id, fx.Val[string](t, db, `select pgflow.schedule_run_id('nightly', '2024-01-02T02:00:00Z')::text`))
	require.Equal(t, `{"k": 1}`, fx.Val[string](t, db, `select input::text from pgflow.runs where run_id = $1::uuid`, *id))
	require.Equal(t, "2024-01-02 02:00:00|"+*id+"|2024-01-03 02:00:00", fx.Val[string](t, db,
		`select concat_ws('|', (last_tick at time zone 'UTC')::text, last_run_id, (next_tick at time zone 'UTC')::text)
		   from pgflow.schedules`))

	// The same tick again, an older tick, the horizon itself: nothing starts.
	require.Nil(t, fire(t, db, "2024-01-02T02:00:00Z"))
	require.Nil(t, fire(t, db, "2024-01-01T12:00:00Z"))
	require.Equal(t, 1, runsOf(t, db))

	// The next tick starts the next run.
	require.NotNil(t, fire(t, db, "2024-01-03T02:00:00Z"))
	require.Equal(t, 2, runsOf(t, db))
}

func TestFireScheduleTickNeverCreatedBeforeTheHorizon(t *testing.T) {
	t.Parallel()
	db := scheduleDB(t)
	require.Nil(t, fire(t, db, "2024-01-01T00:00:00Z"), "the moment of creation is not a tick to fire")
	require.Nil(t, fire(t, db, "2023-12-31T02:00:00Z"))
	require.Equal(t, 0, runsOf(t, db))
}

// A tick fired from two sessions at once starts one run: the second waits for the row lock and then sees the
// advanced last_tick.
func TestFireScheduleTickConcurrentSessions(t *testing.T) {
	t.Parallel()
	db := scheduleDB(t)
	ctx := fx.Ctx(t)
	for round := range 5 {
		tick := time.Date(2024, 1, 2+round, 2, 0, 0, 0, time.UTC)
		var wg sync.WaitGroup
		ids := make([]*string, 4)
		errs := make([]error, 4)
		for i := range ids {
			wg.Go(func() {
				errs[i] = db.QueryRow(ctx, `select pgflow.fire_schedule_tick('nightly', $1)::text`, tick).Scan(&ids[i])
			})
		}
		wg.Wait()
		started := 0
		for i := range ids {
			require.NoError(t, errs[i])
			if ids[i] != nil {
				started++
			}
		}
		require.Equal(t, 1, started, "round %d", round)
	}
	require.Equal(t, 5, runsOf(t, db))
}

// A transaction that fired a tick and rolled back leaves the tick due: the next attempt starts its one run. A tick
// whose run exists although last_tick was moved back (a row written again) does not start a second one.
func TestFireScheduleTickAfterRollbackAndReplay(t *testing.T) {
	t.Parallel()
	db := scheduleDB(t)
	ctx := fx.Ctx(t)

	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	var id *string
	require.NoError(t, tx.QueryRow(ctx, `select pgflow.fire_schedule_tick('nightly', '2024-01-02T02:00:00Z')::text`).Scan(&id))
	require.NotNil(t, id)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 0, runsOf(t, db))

	again := fire(t, db, "2024-01-02T02:00:00Z")
	require.NotNil(t, again)
	require.Equal(t, *id, *again, "the run id depends on the tick only")

	fx.Exec(t, db, `update pgflow.schedules set last_tick = '2024-01-01T00:00:00Z'`)
	require.Nil(t, fire(t, db, "2024-01-02T02:00:00Z"))
	require.Equal(t, 1, runsOf(t, db))
	require.Equal(t, "2024-01-02 02:00:00", fx.Val[string](t, db,
		`select (last_tick at time zone 'UTC')::text from pgflow.schedules`), "the tick counts as fired")
}

func TestFireScheduleTickGuards(t *testing.T) {
	t.Parallel()
	db := scheduleDB(t)
	_, err := db.Exec(fx.Ctx(t), `select pgflow.fire_schedule_tick('nope', now())`)
	requirePgError(t, err, "P0002", `schedule 'nope' does not exist`)
	_, err = db.Exec(fx.Ctx(t), `select pgflow.fire_schedule_tick('nightly', null)`)
	requirePgError(t, err, "22004", `schedule 'nightly': tick is NULL`)

	// A caller whose clock runs more than a minute ahead of the database cannot fire early.
	_, err = db.Exec(fx.Ctx(t), `select pgflow.fire_schedule_tick('nightly', now() + interval '2 minutes')`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "22023", pgErr.Code)
	require.Regexp(t, `^schedule 'nightly': tick .+ is in the future by the database clock \(now .+\); check the clock of the calling worker$`, pgErr.Message)
	require.NotNil(t, fx.Val[*string](t, db, `select pgflow.fire_schedule_tick('nightly', now() + interval '50 seconds')::text`),
		"within the tolerance")
	require.Equal(t, 1, runsOf(t, db))

	// A start_flow error propagates and leaves the tick due.
	fx.Exec(t, db, `select pgflow.create_flow('mapper'); select pgflow.add_step('mapper', 'm', step_type => 'map')`)
	fx.Exec(t, db, `select pgflow.upsert_schedule('bad_input', 'mapper', '@hourly', 'UTC', '{}', since => '2024-01-01Z')`)
	_, err = db.Exec(fx.Ctx(t), `select pgflow.fire_schedule_tick('bad_input', '2024-01-01T01:00:00Z')`)
	requirePgError(t, err, "P0001", `Flow mapper has root map steps but input is not an array (got object)`)
	require.Equal(t, "2024-01-01 00:00:00", fx.Val[string](t, db,
		`select (last_tick at time zone 'UTC')::text from pgflow.schedules where schedule_name = 'bad_input'`))
}

func TestPauseAndResumeSchedule(t *testing.T) {
	t.Parallel()
	db := scheduleDB(t)
	ctx := fx.Ctx(t)

	require.True(t, fx.Val[bool](t, db, `select paused from pgflow.pause_schedule('nightly')`))
	pausedAt := fx.Val[time.Time](t, db, `select paused_at from pgflow.schedules`)
	require.True(t, fx.Val[bool](t, db, `select paused from pgflow.pause_schedule('nightly')`))
	require.Equal(t, pausedAt, fx.Val[time.Time](t, db, `select paused_at from pgflow.schedules`), "pausing again keeps the first time")

	require.Nil(t, fire(t, db, "2024-01-02T02:00:00Z"), "a paused schedule fires nothing")
	require.Equal(t, 0, runsOf(t, db))

	// A worker startup with the same or a changed definition keeps it paused.
	require.Equal(t, "unchanged", fx.Val[string](t, db, `select pgflow.upsert_schedule('nightly', 'sequential',
		'0 3 * * *', 'Europe/Berlin', '{"k": 1}')`))
	require.Equal(t, "updated", fx.Val[string](t, db, `select pgflow.upsert_schedule('nightly', 'sequential',
		'0 3 * * *', 'Europe/Berlin', '{"k": 2}')`))
	require.True(t, fx.Val[bool](t, db, `select paused from pgflow.schedules`))

	// Resume: the ticks that passed while paused never fire, also with catch_up.
	fx.Exec(t, db, `update pgflow.schedules set missed = 'catch_up'`)
	row := fx.Val[string](t, db, `select (not paused and paused_at is null and next_tick is null
		and last_tick >= now() - interval '1 minute')::text from pgflow.resume_schedule('nightly')`)
	require.Equal(t, "true", row)
	require.Nil(t, fire(t, db, "2024-01-02T02:00:00Z"))
	require.Equal(t, 0, runsOf(t, db))
	var id *string
	require.NoError(t, db.QueryRow(ctx, `select pgflow.fire_schedule_tick('nightly', now() + interval '30 seconds')::text`).Scan(&id))
	require.NotNil(t, id, "the next tick after the resume fires")

	// Resuming an active schedule changes nothing.
	before := fx.Val[string](t, db, `select to_jsonb(s)::text from pgflow.schedules s`)
	fx.Exec(t, db, `select pgflow.resume_schedule('nightly')`)
	require.Equal(t, before, fx.Val[string](t, db, `select to_jsonb(s)::text from pgflow.schedules s`))

	for _, fn := range []string{"pause_schedule", "resume_schedule"} {
		_, err := db.Exec(ctx, `select pgflow.`+fn+`('nope')`)
		requirePgError(t, err, "P0002", `schedule 'nope' does not exist`)
		_, err = db.Exec(ctx, `select pgflow.`+fn+`(null)`)
		requirePgError(t, err, "P0002", `schedule NULL does not exist`)
	}
}

func TestUpsertScheduleChangedTimetableStartsAtSince(t *testing.T) {
	t.Parallel()
	db := scheduleDB(t)
	require.NotNil(t, fire(t, db, "2024-01-02T02:00:00Z"))

	// Same timetable, other input: the horizon stays (a missed tick may still fire).
	require.Equal(t, "updated", fx.Val[string](t, db, `select pgflow.upsert_schedule('nightly', 'sequential',
		'0 3 * * *', 'Europe/Berlin', '{"k": 2}', since => '2024-02-01T00:00:00Z')`))
	require.Equal(t, "2024-01-02 02:00:00", fx.Val[string](t, db, `select (last_tick at time zone 'UTC')::text from pgflow.schedules`))

	// A new cron: ticks before since never fire.
	require.Equal(t, "updated", fx.Val[string](t, db, `select pgflow.upsert_schedule('nightly', 'sequential',
		'0 4 * * *', 'Europe/Berlin', '{"k": 2}', since => '2024-02-01T00:00:00Z',
		next_tick => '2024-02-01T03:00:00Z')`))
	require.Equal(t, "2024-02-01 00:00:00|2024-02-01 03:00:00|0 4 * * *|{\"k\": 2}", fx.Val[string](t, db,
		`select concat_ws('|', (last_tick at time zone 'UTC')::text, (next_tick at time zone 'UTC')::text, cron, input::text)
		   from pgflow.schedules`))
	require.Nil(t, fire(t, db, "2024-01-15T03:00:00Z"))

	// A new zone moves the horizon too, and never backwards.
	require.Equal(t, "updated", fx.Val[string](t, db, `select pgflow.upsert_schedule('nightly', 'sequential',
		'0 4 * * *', 'UTC', '{"k": 2}', since => '2024-01-20T00:00:00Z')`))
	require.Equal(t, "2024-02-01 00:00:00", fx.Val[string](t, db, `select (last_tick at time zone 'UTC')::text from pgflow.schedules`))
	require.Equal(t, 1, runsOf(t, db))
}

func TestUpsertScheduleRefusesBadArguments(t *testing.T) {
	t.Parallel()
	db := scheduleDB(t)
	before := fx.Val[string](t, db, `select coalesce(jsonb_agg(to_jsonb(s) order by schedule_name)::text, '') from pgflow.schedules s`)
	cases := []struct{ args, code, msg string }{
		{`'1bad', 'sequential', '* * * * *', 'UTC', '{}'`, "22023", `invalid schedule name '1bad': use 1 to 128 ASCII letters, digits or _, not starting with a digit`},
		{`null, 'sequential', '* * * * *', 'UTC', '{}'`, "22023", `invalid schedule name NULL: use 1 to 128 ASCII letters, digits or _, not starting with a digit`},
		{`'nightly', 'sequential', '  ', 'UTC', '{}'`, "22023", `schedule nightly: the cron expression is empty`},
		{`'nightly', 'sequential', '* * * * *', 'Mars/Olympus', '{}'`, "22023", `schedule nightly: unknown time zone 'Mars/Olympus'`},
		{`'nightly', 'sequential', '* * * * *', 'UTC', null`, "22023", `schedule nightly: input is NULL; use the JSON value null ('null'::jsonb) for no input`},
		{`'nightly', 'sequential', '* * * * *', 'UTC', '{}', missed => 'later'`, "22023", `schedule nightly: missed must be 'skip' or 'catch_up', got 'later'`},
		{`'nightly', 'sequential', '* * * * *', 'UTC', '{}', max_catch_up => 0`, "22023", `schedule nightly: max_catch_up must be between 1 and 1000, got 0`},
		{`'nightly', 'nope', '* * * * *', 'UTC', '{}'`, "23503", `schedule nightly: flow 'nope' does not exist; compile it first (serve it in a worker or run ensure_flow_compiled)`},
	}
	for _, c := range cases {
		_, err := db.Exec(context.Background(), `select pgflow.upsert_schedule(`+c.args+`)`)
		requirePgError(t, err, c.code, c.msg)
	}
	require.Equal(t, before, fx.Val[string](t, db, `select coalesce(jsonb_agg(to_jsonb(s) order by schedule_name)::text, '') from pgflow.schedules s`))
}

// Two startups creating the same schedule at once: one creates it, the other finds it unchanged.
func TestUpsertScheduleConcurrentCreate(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	ctx := fx.Ctx(t)
	statuses := make([]string, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() {
			errs[i] = db.QueryRow(ctx, `select pgflow.upsert_schedule('s', 'sequential', '* * * * *', 'UTC', '{}')`).Scan(&statuses[i])
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.ElementsMatch(t, []string{"created", "unchanged", "unchanged", "unchanged"}, statuses)
}

func TestScheduleFunctionSignatures(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	got := fx.Val[[]string](t, db, `
		select array_agg(p.proname || '(' || pg_get_function_arguments(p.oid) || ') ' || pg_get_function_result(p.oid)
		         || case when p.prosecdef then ' definer' else ' invoker' end order by p.proname collate "C")
		  from pg_proc p
		 where p.pronamespace = 'pgflow'::regnamespace and p.proname like '%schedule%'`)
	require.Equal(t, []string{
		"fire_schedule_tick(schedule_name text, tick timestamp with time zone, next_tick timestamp with time zone DEFAULT NULL::timestamp with time zone) uuid invoker",
		"pause_schedule(schedule_name text) pgflow.schedules definer",
		"resume_schedule(schedule_name text) pgflow.schedules definer",
		"schedule_run_id(schedule_name text, tick timestamp with time zone) uuid invoker",
		"upsert_schedule(schedule_name text, flow_slug text, cron text, time_zone text, input jsonb, missed text DEFAULT 'skip'::text, " +
			"max_catch_up integer DEFAULT 10, since timestamp with time zone DEFAULT now(), next_tick timestamp with time zone DEFAULT NULL::timestamp with time zone) text invoker",
	}, got)
}

// Deleting a flow deletes its schedules (a recompile with data loss too), so the flow can always be deleted.
func TestDeletingAFlowDeletesItsSchedules(t *testing.T) {
	t.Parallel()
	db := scheduleDB(t)
	require.NotNil(t, fire(t, db, "2024-01-02T02:00:00Z"))
	fx.Exec(t, db, `select pgflow.delete_flow_and_data('sequential')`)
	require.Equal(t, 0, fx.Val[int](t, db, `select count(*)::int from pgflow.schedules`))
	require.Equal(t, 0, runsOf(t, db))
}
