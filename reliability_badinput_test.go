package pgflow_test

// Bad input (issue 6): every case gets a clear error naming the bad value, and the database is unchanged — every
// table of pgflow, pgmq and the capture schemas has the same content before and after (reliability.Snapshot).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/reliability"
)

// hostileSlugs are slugs no flow or step may have: SQL and identifier injection, unicode, too long, empty,
// reserved.
var hostileSlugs = []string{
	`x'; drop table pgflow.runs; --`,
	`x"; drop schema pgflow cascade; --`,
	`$1`,
	`$$ language sql $$`,
	`a;b`,
	`--`,
	`/* c */`,
	`ünïcödé`,
	`流れ`,
	"tab\there",
	"new\nline",
	`back\slash`,
	`a b`,
	`a-b`,
	`a.b`,
	`1abc`,
	`run`,
	``,
	strings.Repeat("s", 129),
	strings.Repeat("é", 70),
}

// errText is everything an error says: for a server error also its detail and hint.
func errText(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return err.Error() + " | " + pgErr.Detail + " | " + pgErr.Hint
	}
	return err.Error()
}

// requireNamed fails unless the error text names value, raw or quoted (Go %q or SQL-style).
func requireNamed(t *testing.T, err error, value string) {
	t.Helper()
	require.Error(t, err)
	text := errText(err)
	if value == "" {
		// Go errors say `""` or "empty"; the server shows an empty field of the failing row: "(, " or ", )".
		require.True(t, strings.Contains(text, `""`) || strings.Contains(text, "empty") ||
			strings.Contains(text, "(, ") || strings.Contains(text, ", )") || strings.Contains(text, ", ,") ||
			strings.Contains(text, "=()"),
			"error should name the empty value: %s", text)
		return
	}
	if strings.Contains(text, value) || strings.Contains(text, strconv.Quote(value)) ||
		strings.Contains(text, strings.Trim(strconv.Quote(value), `"`)) {
		return
	}
	// The server clips each value of a "Failing row contains (...)" detail to 64 bytes: a long value is named by
	// its beginning.
	if len(value) > 64 && strings.Contains(text, "Failing row contains") {
		clipped := value[:48]
		for !utf8.ValidString(clipped) {
			clipped = clipped[:len(clipped)-1]
		}
		if strings.Contains(text, clipped) {
			return
		}
	}
	t.Fatalf("error does not name %q:\n%s", value, text)
}

type badCase struct {
	name  string
	value string                        // the bad value the error must name ("-" when the error has nothing to name)
	act   func(context.Context) error   // must fail
	want  []string                      // further fragments the error must contain
	check func(t *testing.T, err error) // optional extra check
}

// runBadCases runs each case in its own subtest: error required, value named, database unchanged.
func runBadCases(t *testing.T, pool *pgxpool.Pool, cases []badCase, ignore ...string) {
	t.Helper()
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, err := reliability.Snapshot(ctx, pool, ignore...)
			require.NoError(t, err)
			actErr := c.act(ctx)
			require.Error(t, actErr, "bad input must be refused")
			if c.value != "-" {
				requireNamed(t, actErr, c.value)
			}
			for _, w := range c.want {
				require.Contains(t, errText(actErr), w)
			}
			if c.check != nil {
				c.check(t, actErr)
			}
			after, err := reliability.Snapshot(ctx, pool, ignore...)
			require.NoError(t, err)
			require.Equal(t, before, after, "the database changed")
		})
	}
}

// badInputDB is a database with the reliability flows compiled, a root-map flow, and one run of each flow in
// progress (no worker), so that refusals have state to leave alone.
func badInputDB(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	db := relDB(t)
	compileRelFlow(t, db.Pool, reliability.OneStepFlow)
	compileRelFlow(t, db.Pool, reliability.MapFlow)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `select pgflow.create_flow('rel_rootmap');
		select pgflow.add_step('rel_rootmap', 'each', step_type => 'map')`)
	require.NoError(t, err)
	run := startRelRuns(t, db.Pool, reliability.OneStepFlow, reliability.Input{}, 1)[0]
	startRelRuns(t, db.Pool, reliability.MapFlow, reliability.Input{Items: 3}, 1)
	_, err = db.Pool.Exec(ctx, `select pgflow.start_flow('rel_rootmap', '[1, 2]'::jsonb)`)
	require.NoError(t, err)
	return db.Pool, run
}

func TestReliabilityBadInputSlugs(t *testing.T) {
	t.Parallel()
	pool, _ := badInputDB(t)
	client := newClient(t, pool, nil)
	defer client.Close()
	exec := func(sql string, args ...any) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := pool.Exec(ctx, sql, args...)
			return err
		}
	}
	var cases []badCase
	for _, slug := range hostileSlugs {
		q := fmt.Sprintf("%.20q", slug)
		cases = append(cases,
			badCase{name: "create_flow " + q, value: slug, act: exec(`select pgflow.create_flow($1)`, slug)},
			badCase{name: "add_step new flow step " + q, value: slug, act: exec(`select pgflow.add_step('rel_one', $1)`, slug)},
			badCase{name: "add_step unknown flow " + q, value: slug, act: exec(`select pgflow.add_step($1, 'step')`, slug)},
			badCase{name: "add_step dependency " + q, value: slug, act: exec(`select pgflow.add_step('rel_one', 'later', array[$1])`, slug)},
			badCase{name: "start_flow " + q, value: slug, act: exec(`select pgflow.start_flow($1, '{}'::jsonb)`, slug)},
			badCase{name: "client start " + q, value: slug, act: func(ctx context.Context) error {
				_, err := client.StartRunJSON(ctx, slug, json.RawMessage(`{}`), nil)
				return err
			}},
			badCase{name: "ensure_flow_compiled " + q, value: slug, act: exec(
				`select pgflow.ensure_flow_compiled($1, '{"steps":[]}'::jsonb)`, slug)},
		)
	}
	// A flow slug that is a valid slug but too long to name a PGMQ queue.
	long := strings.Repeat("q", 65)
	cases = append(cases, badCase{name: "create_flow 65 characters", value: long, want: []string{"65 characters"},
		act: exec(`select pgflow.create_flow($1)`, long)})
	runBadCases(t, pool, cases)
}

func TestReliabilityBadInputUnknownAndMalformed(t *testing.T) {
	t.Parallel()
	pool, runID := badInputDB(t)
	client := newClient(t, pool, nil)
	defer client.Close()
	exec := func(sql string, args ...any) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := pool.Exec(ctx, sql, args...)
			return err
		}
	}
	unknownRun := reliability.NewUUID()
	cases := []badCase{
		{name: "start unknown flow", value: "no_such_flow", want: []string{"not present"},
			act: exec(`select pgflow.start_flow('no_such_flow', '{}'::jsonb)`)},
		{name: "client start unknown flow", value: "no_such_flow", act: func(ctx context.Context) error {
			_, err := client.StartRunJSON(ctx, "no_such_flow", json.RawMessage(`{}`), nil)
			return err
		}, check: func(t *testing.T, err error) { require.ErrorIs(t, err, pgflow.ErrFlowNotFound) }},
		{name: "client get unknown run", value: unknownRun, act: func(ctx context.Context) error {
			_, err := client.GetRun(ctx, unknownRun)
			return err
		}, check: func(t *testing.T, err error) { require.ErrorIs(t, err, pgflow.ErrRunNotFound) }},
		{name: "client wait unknown run", value: unknownRun, act: func(ctx context.Context) error {
			_, err := client.WaitRun(ctx, unknownRun)
			return err
		}, check: func(t *testing.T, err error) { require.ErrorIs(t, err, pgflow.ErrRunNotFound) }},
		{name: "client run id not a uuid", value: "1'; delete from pgflow.runs; --", act: func(ctx context.Context) error {
			_, err := client.StartRunJSON(ctx, reliability.OneStepFlow, json.RawMessage(`{}`), &pgflow.StartOpts{RunID: "1'; delete from pgflow.runs; --"})
			return err
		}, check: func(t *testing.T, err error) { require.ErrorIs(t, err, pgflow.ErrInvalidRunID) }},
		{name: "client run id of another flow", value: runID, act: func(ctx context.Context) error {
			_, err := client.StartRunJSON(ctx, reliability.MapFlow, json.RawMessage(`{}`), &pgflow.StartOpts{RunID: runID})
			return err
		}, check: func(t *testing.T, err error) { require.ErrorIs(t, err, pgflow.ErrRunIDConflict) }},
		{name: "start_flow existing run id", value: runID, want: []string{"runs_pkey"},
			act: exec(`select pgflow.start_flow('rel_one', '{}'::jsonb, $1::uuid)`, runID)},

		// Inputs.
		{name: "client input not JSON", value: "{not json", act: func(ctx context.Context) error {
			_, err := client.StartRunJSON(ctx, reliability.OneStepFlow, json.RawMessage(`{not json`), nil)
			return err
		}},
		{name: "start_flow input not JSON", value: "not", want: []string{"json"},
			act: exec(`select pgflow.start_flow('rel_one', $1::jsonb)`, "not json")},
		{name: "root map input object", value: "rel_rootmap", want: []string{"not an array (got object)"},
			act: exec(`select pgflow.start_flow('rel_rootmap', '{"a": 1}'::jsonb)`)},
		{name: "root map input string", value: "rel_rootmap", want: []string{"not an array (got string)"},
			act: exec(`select pgflow.start_flow('rel_rootmap', '"[1,2]"'::jsonb)`)},
		{name: "root map input JSON null", value: "rel_rootmap", want: []string{"not an array (got null)"},
			act: exec(`select pgflow.start_flow('rel_rootmap', 'null'::jsonb)`)},
		{name: "root map input SQL NULL", value: "rel_rootmap", want: []string{"input is NULL"},
			act: exec(`select pgflow.start_flow('rel_rootmap', null)`)},
		{name: "client root map input object", value: "rel_rootmap", want: []string{"not an array (got object)"},
			act: func(ctx context.Context) error {
				_, err := client.StartRunJSON(ctx, "rel_rootmap", json.RawMessage(`{"items": [1]}`), nil)
				return err
			}},

		// Outputs.
		{name: "complete_task output not JSON", value: "nope", want: []string{"json"},
			act: exec(`select pgflow.complete_task($1::uuid, 'work', 0, $2::jsonb)`, runID, "nope")},
		{name: "complete_task output with NUL", value: "-", want: []string{"\\u0000"},
			act: exec(`select pgflow.complete_task($1::uuid, 'work', 0, $2::jsonb)`, runID, `{"a": "x\u0000y"}`)},

		// Options.
		{name: "create_flow negative max_attempts", value: "-1", want: []string{"opt_max_attempts"},
			act: exec(`select pgflow.create_flow('opts_bad', max_attempts => -1)`)},
		{name: "create_flow zero timeout", value: "0", want: []string{"opt_timeout"},
			act: exec(`select pgflow.create_flow('opts_bad', timeout => 0)`)},
		{name: "create_flow negative base_delay", value: "-5", want: []string{"opt_base_delay"},
			act: exec(`select pgflow.create_flow('opts_bad', base_delay => -5)`)},
		{name: "add_step negative start_delay", value: "-1", want: []string{"opt_start_delay"},
			act: exec(`select pgflow.add_step('rel_one', 'later', start_delay => -1)`)},
		{name: "add_step negative timeout", value: "-30", want: []string{"opt_timeout"},
			act: exec(`select pgflow.add_step('rel_one', 'later', timeout => -30)`)},
		{name: "add_step unknown step type", value: "loop", want: []string{"steps_step_type_check"},
			act: exec(`select pgflow.add_step('rel_one', 'later', step_type => 'loop')`)},
		{name: "add_step unknown when_exhausted", value: "explode", want: []string{"when_exhausted"},
			act: exec(`select pgflow.add_step('rel_one', 'later', when_exhausted => 'explode')`)},
		{name: "add_step pattern not an object", value: "[1]", want: []string{"required_input_pattern"},
			act: exec(`select pgflow.add_step('rel_one', 'later', required_input_pattern => '[1]'::jsonb)`)},
		{name: "add_step map with two dependencies", value: "later", want: []string{"at most one dependency"},
			act: exec(`select pgflow.add_step('rel_map', 'later', array['list', 'each'], step_type => 'map')`)},
		{name: "add_step changes dependencies", value: "each", want: []string{"cannot change them"},
			act: exec(`select pgflow.add_step('rel_map', 'each', array['nothing'])`)},
		{name: "int option out of range", value: "9999999999",
			act: exec(`select pgflow.create_flow('opts_bad', timeout => $1::integer)`, int64(9999999999))},
		{name: "int option out of range in SQL", value: "9999999999", want: []string{"out of range"},
			act: exec(`select pgflow.create_flow('opts_bad', timeout => '9999999999'::text::integer)`)},
	}
	runBadCases(t, pool, cases)

	// Unknown runs, steps and tasks given to the callbacks are no-ops: no row, nothing changed.
	ctx := context.Background()
	before, err := reliability.Snapshot(ctx, pool)
	require.NoError(t, err)
	for _, sql := range []string{
		`select * from pgflow.complete_task($1::uuid, 'work', 0, '{}'::jsonb)`,
		`select * from pgflow.fail_task($1::uuid, 'work', 0, 'boom')`,
	} {
		for _, args := range [][]any{{unknownRun}} {
			rows, err := pool.Query(ctx, sql, args...)
			require.NoError(t, err)
			require.False(t, rows.Next(), sql)
			rows.Close()
		}
	}
	for _, sql := range []string{
		`select * from pgflow.complete_task($1::uuid, 'no_such_step', 0, '{}'::jsonb)`,
		`select * from pgflow.complete_task($1::uuid, 'work', 7, '{}'::jsonb)`,
		`select * from pgflow.fail_task($1::uuid, 'no_such_step', 0, 'boom')`,
		`select * from pgflow.fail_task($1::uuid, 'work', -1, 'boom')`,
	} {
		rows, err := pool.Query(ctx, sql, runID)
		require.NoError(t, err)
		require.False(t, rows.Next(), sql)
		rows.Close()
	}
	// A not-yet-started task ignores a completion and a failure.
	for _, sql := range []string{
		`select status from pgflow.complete_task($1::uuid, 'work', 0, '{"forged": true}'::jsonb)`,
		`select status from pgflow.fail_task($1::uuid, 'work', 0, 'forged')`,
	} {
		var status string
		require.NoError(t, pool.QueryRow(ctx, sql, runID).Scan(&status), sql)
		require.Equal(t, "queued", status, sql)
	}
	after, err := reliability.Snapshot(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// Definition mistakes are refused by the DSL and NewWorker before any database is touched, naming the value.
func TestReliabilityBadInputDSLAndConfig(t *testing.T) {
	t.Parallel()
	for _, slug := range append(hostileSlugs, strings.Repeat("f", 48), "a\x00b") {
		f := pgflow.NewFlow[any](slug)
		err := f.Err()
		require.ErrorIs(t, err, pgflow.ErrInvalidSlug, "flow slug %q", slug)
		requireNamed(t, err, slug)
		_, err = f.CompileSQL()
		require.Error(t, err)

		g := pgflow.NewFlow[any]("ok")
		pgflow.Step(g, slug, func(context.Context, *pgflow.Task[any]) (int, error) { return 0, nil })
		if len(slug) > 47 && len(slug) <= 128 && !strings.ContainsFunc(slug, func(r rune) bool { return r > 127 }) {
			continue // a valid step slug (step slugs may be longer than flow slugs)
		}
		require.ErrorIs(t, g.Err(), pgflow.ErrInvalidSlug, "step slug %q", slug)
		requireNamed(t, g.Err(), slug)
	}
	options := map[string]pgflow.StepOption{
		"MaxAttempts(0)":           pgflow.MaxAttempts(0),
		"MaxAttempts(-3)":          pgflow.MaxAttempts(-3),
		"MaxAttempts(4294967296)":  pgflow.MaxAttempts(1 << 32),
		"Timeout(-1s)":             pgflow.Timeout(-time.Second),
		"Timeout(2s)":              pgflow.Timeout(2 * time.Second),
		"Timeout(1.5s)":            pgflow.Timeout(1500 * time.Millisecond),
		"Timeout(2562047h47m16.8":  pgflow.Timeout(1<<63 - 1),
		"BaseDelay(0s)":            pgflow.BaseDelay(0),
		"StartDelay(-1s)":          pgflow.StartDelay(-time.Second),
		`WhenExhausted("explode")`: pgflow.WhenExhausted("explode"),
		"If(42)":                   pgflow.If(42),
	}
	for named, opt := range options {
		f := pgflow.NewFlow[any]("opts")
		pgflow.Step(f, "s", func(context.Context, *pgflow.Task[any]) (int, error) { return 0, nil }, opt)
		require.Error(t, f.Err(), named)
		require.Contains(t, f.Err().Error(), named, "the error names the option and its value")
	}
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none") // never connected
	require.NoError(t, err)
	defer pool.Close()
	good := pgflow.NewFlow[any]("good")
	pgflow.Step(good, "s", func(context.Context, *pgflow.Task[any]) (int, error) { return 0, nil })
	for field, cfg := range map[string]pgflow.WorkerConfig{
		"MaxConcurrent = -1":       {MaxConcurrent: -1},
		"BatchSize = -5":           {BatchSize: -5},
		"VisibilityTimeout = -1s":  {VisibilityTimeout: -time.Second},
		"PollInterval = -1ms":      {PollInterval: -time.Millisecond},
		"HeartbeatInterval = -1h":  {HeartbeatInterval: -time.Hour},
		`WorkerID = "'; drop --"`:  {WorkerID: "'; drop --"},
		"MaxConcurrent = 99999999": {MaxConcurrent: 1 << 40},
	} {
		_, err := newFlowWorker(t, pool, good, cfg)
		require.Error(t, err, field)
		if field != "MaxConcurrent = 99999999" {
			require.Contains(t, err.Error(), field)
		} else {
			require.Contains(t, err.Error(), "MaxConcurrent = 1099511627776")
		}
	}
}

// Absurd but accepted options stay harmless: a flow whose timeout is at or near the integer limit (68 years)
// can have its tasks claimed, and while they run, stalled-task recovery keeps working for every other flow.
// (Schema v0.17.0 overflowed here: start_tasks raised "integer out of range" for a timeout above 2147483645 s,
// and requeue_stalled_tasks raised it for the whole database while a task with a timeout above 2147483617 s ran.)
func TestReliabilityAbsurdTimeoutsAreHarmless(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := relDB(t)
	compileRelFlow(t, db.Pool, reliability.OneStepFlow)
	worker := reliability.NewUUID()
	_, err := db.Pool.Exec(ctx, `
		select pgflow.create_flow('forever', timeout => 2147483647);
		select pgflow.add_step('forever', 's');
		select pgflow.create_flow('almost_forever', timeout => 2147483640);
		select pgflow.add_step('almost_forever', 's', timeout => 2147483630)`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `select pgflow.register_worker($1::uuid, 'rel_one', 'test')`, worker)
	require.NoError(t, err)
	for _, flow := range []string{"forever", "almost_forever", reliability.OneStepFlow} {
		_, err := db.Pool.Exec(ctx, `select pgflow.start_flow($1, '{}'::jsonb)`, flow)
		require.NoError(t, err)
		var claimed int
		require.NoError(t, db.Pool.QueryRow(ctx,
			`select count(*) from pgflow.start_tasks($1, array[1::bigint], $2::uuid)`, flow, worker).Scan(&claimed), flow)
		require.Equal(t, 1, claimed, flow)
	}
	var vt time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, `select vt from pgmq.q_forever where msg_id = 1`).Scan(&vt))
	require.Greater(t, vt.Year(), time.Now().Year()+60, "the claim hides the message for the whole (absurd) timeout")

	// The ordinary flow's task stalls; recovery requeues it although absurd-timeout tasks are running.
	_, err = db.Pool.Exec(ctx, `update pgflow.step_tasks set queued_at = now() - interval '2 hours',
		started_at = now() - interval '1 hour' where flow_slug = 'rel_one'`)
	require.NoError(t, err)
	var requeued int
	require.NoError(t, db.Pool.QueryRow(ctx, `select pgflow.requeue_stalled_tasks()`).Scan(&requeued))
	require.Equal(t, 1, requeued)
	require.EqualValues(t, 2, queryInt(t, db.Pool, `select count(*) from pgflow.step_tasks where status = 'started'`))
}

// Malformed messages and messages of another flow in a flow's queue are never claimed and never touched: the
// worker logs each once per delivery with its id (never its body) and leaves it as it is; no handler runs, no
// row changes. Real tasks in the same queue still run.
func TestReliabilityForeignAndMalformedMessages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := relDB(t)
	compileRelFlow(t, db.Pool, reliability.OneStepFlow)
	compileRelFlow(t, db.Pool, reliability.MapFlow)
	// Misroute rel_map's steps into rel_one's queue: its tasks' messages land there.
	_, err := db.Pool.Exec(ctx, `update pgflow.steps set queue_name = 'rel_one' where flow_slug = 'rel_map'`)
	require.NoError(t, err)
	mapRun := startRelRuns(t, db.Pool, reliability.MapFlow, reliability.Input{Items: 2}, 1)[0]
	var foreignMsg int64
	require.NoError(t, db.Pool.QueryRow(ctx,
		`select message_id from pgflow.step_tasks where run_id = $1::uuid and queue_name = 'rel_one'`, mapRun).Scan(&foreignMsg))

	bodies := []string{
		`"garbage"`,
		`null`,
		`[]`,
		`{"flow_slug": "rel_one", "run_id": "not-a-uuid", "step_slug": "work", "task_index": 0}`,
		`{"flow_slug": "rel_one", "run_id": "` + mapRun + `", "step_slug": "list", "task_index": 0}`,
		`{"flow_slug": "rel_one'; delete from pgflow.runs; --", "run_id": "` + reliability.NewUUID() + `"}`,
	}
	var junk []int64
	for _, b := range bodies {
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `select pgmq.send('rel_one', $1::jsonb)`, b).Scan(&id))
		junk = append(junk, id)
	}
	before, err := reliability.Snapshot(ctx, db.Pool, "pgflow.workers")
	require.NoError(t, err)

	logger, logs := newRelLogger(t, "worker")
	flow := relFlow(t, reliability.OneStepFlow, reliability.Handlers{Recorder: reliability.DBRecorder{DB: db.Pool}})
	w := runInProc(t, db.Pool, flow, relWorkerConfig(logger))
	eventually(t, relWait, "the worker to explain every foreign and malformed message", func() bool {
		text := logs.String()
		for _, id := range junk {
			if !strings.Contains(text, fmt.Sprintf(`msg="message has no matching task; left in the queue untouched (it reappears after its visibility timeout until an operator archives or deletes it)" flow=rel_one worker_id=%s queue=rel_one msg_id=%d`, w.w.ID(), id)) {
				return false
			}
		}
		return strings.Contains(text, fmt.Sprintf("msg_id=%d task_flow=rel_map", foreignMsg))
	})
	require.NoError(t, w.stop())
	for _, b := range bodies {
		require.NotContains(t, logs.String(), b, "message bodies are never logged")
	}
	after, err := reliability.Snapshot(ctx, db.Pool, "pgflow.workers")
	require.NoError(t, err)
	require.Equal(t, before, after, "foreign and malformed messages changed the database")

	// With the junk still in the queue, a real run of the flow completes.
	w2 := runInProc(t, db.Pool, flow, relWorkerConfig(logger))
	runID := startRelRuns(t, db.Pool, reliability.OneStepFlow, reliability.Input{}, 1)[0]
	eventually(t, relWait, "the real run to complete", func() bool {
		return queryInt(t, db.Pool, `select count(*) from pgflow.runs where run_id = $1::uuid and status = 'completed'`, runID) == 1
	})
	require.NoError(t, w2.stop())
	require.EqualValues(t, len(junk)+1, queryInt(t, db.Pool, `select count(*) from pgmq.q_rel_one`), "the junk and the foreign task's message are still there")
	require.EqualValues(t, 1, queryInt(t, db.Pool, `select count(*) from reliability.invocations`))
}
