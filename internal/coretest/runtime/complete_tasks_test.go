package runtime_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// A completion as a worker reports it.
type completion struct {
	runID  string
	step   string
	index  int
	output string // JSON text; "" means SQL NULL
}

// completeTasks calls pgflow.complete_tasks and returns the status per position ("" for NULL).
func completeTasks(t testing.TB, db fx.DB, cs []completion) []string {
	t.Helper()
	out, err := tryCompleteTasks(fx.Ctx(t), db, cs)
	require.NoError(t, err)
	return out
}

func tryCompleteTasks(ctx context.Context, db fx.DB, cs []completion) ([]string, error) {
	runs, steps, idx, outs := make([]string, len(cs)), make([]string, len(cs)), make([]int32, len(cs)), make([]*string, len(cs))
	for i, c := range cs {
		runs[i], steps[i], idx[i] = c.runID, c.step, int32(c.index)
		if c.output != "" {
			o := c.output
			outs[i] = &o
		}
	}
	rows, err := db.Query(ctx, `select task_position, task_status from pgflow.complete_tasks($1::uuid[], $2::text[], $3::integer[], $4::jsonb[])`,
		runs, steps, idx, outs)
	if err != nil {
		return nil, err
	}
	res := make([]string, len(cs))
	var pos int32
	var status *string
	n := 0
	_, err = pgx.ForEachRow(rows, []any{&pos, &status}, func() error {
		n++
		if int(pos) != n {
			return fmt.Errorf("position %d returned as row %d", pos, n)
		}
		if status != nil {
			res[pos-1] = *status
		}
		return nil
	})
	if err == nil && n != len(cs) {
		err = fmt.Errorf("%d rows for %d completions", n, len(cs))
	}
	return res, err
}

// completeOneByOne calls pgflow.complete_task per completion, in the order complete_tasks promises.
func completeOneByOne(t testing.TB, db fx.DB, cs []completion) []string {
	t.Helper()
	order := make([]int, len(cs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		x, y := cs[order[a]], cs[order[b]]
		if x.runID != y.runID {
			return x.runID < y.runID
		}
		if x.step != y.step {
			return x.step < y.step
		}
		return x.index < y.index
	})
	res := make([]string, len(cs))
	for _, i := range order {
		c := cs[i]
		var out any
		if c.output != "" {
			out = c.output
		}
		var status *string
		err := db.QueryRow(fx.Ctx(t), `select t.status from pgflow.complete_task($1::uuid, $2::text, $3::integer, $4::jsonb) as t`,
			c.runID, c.step, c.index, out).Scan(&status)
		if err == pgx.ErrNoRows {
			continue
		}
		require.NoError(t, err)
		res[i] = *status
	}
	return res
}

// snapshot renders everything complete_task can change, without timestamps and message ids: runs, step states,
// tasks (with where their message is), and the events of each run in order.
func snapshot(t testing.TB, db fx.DB, flows ...string) string {
	t.Helper()
	var b strings.Builder
	q := func(title, sql string) {
		rows, err := db.Query(fx.Ctx(t), sql, flows)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		fmt.Fprintf(&b, "%s:\n  %s\n", title, strings.Join(lines, "\n  "))
	}
	q("runs", `select concat_ws(' ', r.run_id, r.status, r.remaining_steps, r.output, r.completed_at is not null, r.failed_at is not null)
		from pgflow.runs as r where r.flow_slug = any ($1) order by r.run_id`)
	q("steps", `select concat_ws(' ', ss.run_id, ss.step_slug, ss.status, 'tasks=' || ss.remaining_tasks, 'deps=' || ss.remaining_deps,
			'initial=' || ss.initial_tasks, ss.output, ss.error_message, ss.skip_reason,
			ss.started_at is not null, ss.completed_at is not null, ss.failed_at is not null, ss.skipped_at is not null)
		from pgflow.step_states as ss where ss.flow_slug = any ($1) order by ss.run_id, ss.step_slug`)
	q("tasks", `select concat_ws(' ', t.run_id, t.step_slug, t.task_index, t.status, t.attempts_count, t.output, t.error_message,
			t.queue_name, t.completed_at is not null, t.failed_at is not null,
			case
			  when t.message_id is null then 'no-message'
			  when exists (select 1 from pgmq.q_cmp as m where m.msg_id = t.message_id) then 'queued'
			  when exists (select 1 from pgmq.a_cmp as m where m.msg_id = t.message_id) then 'archived'
			  else 'gone'
			end)
		from pgflow.step_tasks as t where t.flow_slug = any ($1) order by t.run_id, t.step_slug, t.task_index`)
	q("messages", `select concat_ws(' ', m.message::text, m.read_ct, m.vt > clock_timestamp() + interval '2 seconds')
		from pgmq.q_cmp as m where m.message ->> 'flow_slug' = any ($1) order by m.message::text`)
	q("events", `select concat_ws(' ', e.payload ->> 'run_id', e.event, e.payload ->> 'status', e.payload -> 'output',
			e.payload ->> 'error_message', e.payload ->> 'remaining_tasks', e.payload ->> 'remaining_deps')
		from realtime.messages as e where e.payload ->> 'flow_slug' = any ($1) order by e.payload ->> 'run_id', e.event, e.id`)
	return b.String()
}

// requireCausalEvents checks the order of every run's events: run:started first, run:completed last, a
// step's started event after the completion (or skip) of each of its dependencies, and a step's completion after
// its start when it had one. (A batch that completes two steps of a run in one call may emit a dependent's
// step:started after the second completion instead of between them; the order of causes and effects is kept.)
func requireCausalEvents(t testing.TB, db fx.DB, flow string) {
	t.Helper()
	rows, err := db.Query(fx.Ctx(t), `select e.payload ->> 'run_id', e.event from realtime.messages as e
		where e.payload ->> 'flow_slug' = $1 order by e.id`, flow)
	require.NoError(t, err)
	type ev struct{ Run, Event string }
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ev])
	require.NoError(t, err)
	rows, err = db.Query(fx.Ctx(t), `select d.step_slug, d.dep_slug from pgflow.deps as d where d.flow_slug = $1`, flow)
	require.NoError(t, err)
	type dep struct{ Step, Dep string }
	deps, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dep])
	require.NoError(t, err)
	byRun := map[string][]string{}
	for _, e := range evs {
		byRun[e.Run] = append(byRun[e.Run], e.Event)
	}
	for run, names := range byRun {
		at := map[string]int{}
		for i, n := range names {
			at[n] = i
		}
		require.Equal(t, "run:started", names[0], "run %s: %v", run, names)
		for i, n := range names {
			if n == "run:completed" && i != len(names)-1 {
				require.Fail(t, "run event not last", "run %s: %v", run, names)
			}
			step, ok := strings.CutPrefix(n, "step:")
			if !ok {
				continue
			}
			slug := step[:strings.LastIndex(step, ":")]
			if strings.HasSuffix(n, ":started") {
				for _, d := range deps {
					if d.Step != slug {
						continue
					}
					c, done := at["step:"+d.Dep+":completed"]
					k, skipped := at["step:"+d.Dep+":skipped"]
					require.True(t, (done && c < i) || (skipped && k < i), "run %s: %s before its dependency %s finished: %v", run, n, d.Dep, names)
				}
			}
			if strings.HasSuffix(n, ":completed") {
				if st, ok := at["step:"+slug+":started"]; ok {
					require.Less(t, st, i, "run %s: %s before its start: %v", run, n, names)
				}
			}
		}
	}
}

// twin is a pair of identical databases: "single" completes tasks with complete_task, "batch" with complete_tasks.
type twin struct {
	single, batch *pgxpool.Pool
}

func newTwin(t *testing.T, setup ...string) *twin {
	t.Helper()
	tw := &twin{single: newDB(t).Pool, batch: newDB(t).Pool}
	for _, db := range []*pgxpool.Pool{tw.single, tw.batch} {
		fx.InstallRealtime(t, db)
		for _, s := range setup {
			fx.Exec(t, db, s)
		}
	}
	return tw
}

// start starts a run with a fixed id in both databases.
func (tw *twin) start(t *testing.T, runID, input string) {
	t.Helper()
	for _, db := range []*pgxpool.Pool{tw.single, tw.batch} {
		fx.Exec(t, db, `select from pgflow.start_flow('cmp', $1::jsonb, $2::uuid)`, input, runID)
	}
}

// claim reads and starts every visible task of flow cmp in both databases and returns them (the same tasks).
func (tw *twin) claim(t *testing.T) []fx.Task {
	t.Helper()
	a := fx.ReadAndStartFrom(t, tw.single, "cmp", "cmp", 60, 1000)
	b := fx.ReadAndStartFrom(t, tw.batch, "cmp", "cmp", 60, 1000)
	key := func(ts []fx.Task) []string {
		var k []string
		for _, x := range ts {
			k = append(k, fmt.Sprintf("%s/%s/%d %s", x.RunID, x.StepSlug, x.TaskIndex, x.Input))
		}
		sort.Strings(k)
		return k
	}
	require.Equal(t, key(a), key(b), "both databases hand out the same tasks")
	return a
}

// complete completes cs in both databases and requires identical results and identical state.
func (tw *twin) complete(t *testing.T, cs []completion) []string {
	t.Helper()
	want := completeOneByOne(t, tw.single, cs)
	got := completeTasks(t, tw.batch, cs)
	require.Equal(t, want, got, "statuses per position")
	require.Equal(t, snapshot(t, tw.single, "cmp"), snapshot(t, tw.batch, "cmp"))
	requireCausalEvents(t, tw.batch, "cmp")
	return got
}

const (
	runA = "00000000-0000-4000-8000-00000000000a"
	runB = "00000000-0000-4000-8000-00000000000b"
	runC = "00000000-0000-4000-8000-00000000000c"
)

func outputsFor(tasks []fx.Task, out func(fx.Task) string) []completion {
	var cs []completion
	for _, x := range tasks {
		cs = append(cs, completion{x.RunID, x.StepSlug, x.TaskIndex, out(x)})
	}
	return cs
}

// A diamond (a -> b, c -> d) worked in batches of several runs, with both middle steps of a run in one batch,
// ends exactly as with one complete_task per task: states, outputs, messages and events.
func TestCompleteTasksMatchesCompleteTaskOnDiamonds(t *testing.T) {
	t.Parallel()
	tw := newTwin(t,
		"select pgflow.create_flow('cmp')",
		"select pgflow.add_step('cmp', 'a')",
		"select pgflow.add_step('cmp', 'b', array['a'])",
		"select pgflow.add_step('cmp', 'c', array['a'])",
		"select pgflow.add_step('cmp', 'd', array['b', 'c'])")
	for _, id := range []string{runA, runB, runC} {
		tw.start(t, id, `{"n": 1}`)
	}
	out := func(x fx.Task) string { return fmt.Sprintf(`{"step": %q, "input": %s}`, x.StepSlug, x.Input) }
	for round := range 3 {
		tasks := tw.claim(t)
		require.NotEmpty(t, tasks, "round %d", round)
		statuses := tw.complete(t, outputsFor(tasks, out))
		for _, s := range statuses {
			require.Equal(t, "completed", s)
		}
	}
	require.Empty(t, tw.claim(t))
	for _, id := range []string{runA, runB, runC} {
		require.Equal(t, "completed", fx.GetRun(t, tw.batch, id).Status)
	}
}

// Map steps: a root map completed partly in one batch and partly in another, a dependent map fed by a single
// step (one run with three elements, one with none: the empty map completes by cascade), and a reduce step.
func TestCompleteTasksMatchesCompleteTaskOnMaps(t *testing.T) {
	t.Parallel()
	tw := newTwin(t,
		"select pgflow.create_flow('cmp')",
		"select pgflow.add_step('cmp', 'each', step_type => 'map')",
		"select pgflow.add_step('cmp', 'pick', array['each'])",
		"select pgflow.add_step('cmp', 'again', array['pick'], step_type => 'map')",
		"select pgflow.add_step('cmp', 'sum', array['again'])")
	tw.start(t, runA, `[1, 2, 3]`)
	tw.start(t, runB, `[4]`)
	tw.start(t, runC, `[]`) // its map is taskless: completed at start, so pick is ready at once
	out := func(x fx.Task) string {
		switch x.StepSlug {
		case "each":
			return x.Input
		case "pick":
			if x.RunID == runA {
				return `["x", "y", "z"]`
			}
			return `[]` // the dependent map of runs B and C is empty: it completes by cascade
		case "again":
			return `{"seen": ` + x.Input + `}`
		}
		return `"total"`
	}
	rounds := 0
	for tasks := tw.claim(t); len(tasks) > 0; tasks = tw.claim(t) {
		rounds++
		half := len(tasks) / 2 // two calls per round: maps complete partly in each
		tw.complete(t, outputsFor(tasks[:half], out))
		tw.complete(t, outputsFor(tasks[half:], out))
	}
	require.Equal(t, 4, rounds)
	require.Equal(t, `{"sum": "total"}`, fx.GetRun(t, tw.batch, runA).Output)
	require.Equal(t, "completed", fx.GetStep(t, tw.batch, runB, "again").Status)
	require.Equal(t, `[]`, fx.GetStep(t, tw.batch, runB, "again").Output)
	for _, id := range []string{runA, runB, runC} {
		require.Equal(t, "completed", fx.GetRun(t, tw.batch, id).Status)
	}
}

// The tasks complete_task treats specially go through it unchanged, mixed with plainly completable ones in one
// call: a type violation (a single step feeding a map produces an object), a duplicate of a task in the same call,
// a replayed callback of a completed task, a task of a failed run, an unknown task, and a SQL NULL output.
func TestCompleteTasksMatchesCompleteTaskOnSpecialCases(t *testing.T) {
	t.Parallel()
	tw := newTwin(t,
		"select pgflow.create_flow('cmp')",
		"select pgflow.add_step('cmp', 'first')",
		"select pgflow.add_step('cmp', 'other')",
		"select pgflow.add_step('cmp', 'items', array['first'], step_type => 'map')")
	tw.start(t, runA, `{}`)
	tw.start(t, runB, `{}`)
	tw.start(t, runC, `{}`)
	tasks := tw.claim(t)
	require.Len(t, tasks, 6)
	cs := []completion{
		{runA, "first", 0, `{"not": "an array"}`}, // type violation: run A fails
		{runA, "other", 0, `1`},                   // run A failed by then (slow path, sorted after 'first')
		{runB, "first", 0, `[1, 2]`},
		{runB, "first", 0, `[9]`}, // duplicate in the same call: the first one counts
		{runB, "other", 0, ``},    // SQL NULL output
		{runC, "other", 0, `"c"`},
		{runC, "nope", 0, `1`}, // unknown task
	}
	statuses := tw.complete(t, cs)
	require.Equal(t, []string{"failed", "cancelled", "completed", "completed", "completed", "completed", ""}, statuses, "run A failed before its task other (which it cancelled)")
	require.Equal(t, "failed", fx.GetRun(t, tw.batch, runA).Status)
	require.Equal(t, `[1, 2]`, fx.GetStep(t, tw.batch, runB, "first").Output)

	// Replays of completed tasks and of the failed run's task change nothing.
	statuses = tw.complete(t, []completion{{runB, "first", 0, `[3]`}, {runA, "other", 0, `2`}, {runC, "other", 0, `"again"`}})
	require.Equal(t, []string{"completed", "cancelled", "completed"}, statuses)
}

// Flows with conditions complete through complete_task for every task; the outcome is the same.
func TestCompleteTasksMatchesCompleteTaskWithConditions(t *testing.T) {
	t.Parallel()
	tw := newTwin(t,
		"select pgflow.create_flow('cmp')",
		"select pgflow.add_step('cmp', 'gate')",
		`select pgflow.add_step('cmp', 'when_ok', array['gate'], required_input_pattern => '{"gate": {"ok": true}}')`,
		`select pgflow.add_step('cmp', 'after', array['when_ok'])`)
	tw.start(t, runA, `{}`)
	tw.start(t, runB, `{}`)
	tasks := tw.claim(t)
	tw.complete(t, outputsFor(tasks, func(x fx.Task) string {
		if x.RunID == runA {
			return `{"ok": true}`
		}
		return `{"ok": false}`
	}))
	for round := 0; round < 2; round++ {
		tasks = tw.claim(t)
		tw.complete(t, outputsFor(tasks, func(fx.Task) string { return `null` }))
	}
	require.Equal(t, "completed", fx.GetRun(t, tw.batch, runA).Status)
	require.Equal(t, "completed", fx.GetRun(t, tw.batch, runB).Status)
	require.Equal(t, "skipped", fx.GetStep(t, tw.batch, runB, "when_ok").Status)
}

func TestCompleteTasksRejectsArraysOfDifferentLengths(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	_, err := db.Exec(fx.Ctx(t), `select pgflow.complete_tasks(array[$1::uuid], array['a', 'b'], array[0], array['1'::jsonb])`, runA)
	requirePgError(t, err, "22023", "complete_tasks: the arrays differ in length: 1 run_ids, 2 step_slugs, 1 task_indexes, 1 outputs, no attempts")
	require.Empty(t, completeTasks(t, db, nil), "empty arrays complete nothing")
	require.Zero(t, fx.Val[int](t, db, `select count(*)::int from pgflow.complete_tasks(null, null, null, null)`))
}

// Concurrent batches naming the same runs in opposite orders both finish: rows are locked in key order.
func TestCompleteTasksConcurrentBatchesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('cmp')")
	fx.Exec(t, db, "select pgflow.add_step('cmp', 'm', step_type => 'map')")
	var runs []string
	for i := range 6 {
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i+1)
		runs = append(runs, id)
		fx.Exec(t, db, `select from pgflow.start_flow('cmp', '[1, 2, 3, 4]'::jsonb, $1::uuid)`, id)
	}
	tasks := fx.ReadAndStartFrom(t, db, "cmp", "cmp", 60, 1000)
	require.Len(t, tasks, 24)
	var even, odd []completion
	for _, x := range tasks {
		c := completion{x.RunID, x.StepSlug, x.TaskIndex, x.Input}
		if x.TaskIndex%2 == 0 {
			even = append(even, c)
		} else {
			odd = append([]completion{c}, odd...) // reversed: the other batch names the runs in the opposite order
		}
	}
	for round := 0; round < 5; round++ {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, batch := range [][]completion{even, odd} {
			wg.Go(func() {
				_, errs[i] = tryCompleteTasks(fx.Ctx(t), db, batch)
			})
		}
		wg.Wait()
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
	}
	for _, id := range runs {
		r := fx.GetRun(t, db, id)
		require.Equal(t, "completed", r.Status)
		require.Equal(t, `{"m": [1, 2, 3, 4]}`, r.Output)
	}
}

// One call completes tasks of two queues (a step routed to a queue of its own): each message goes to its own
// queue's archive, one pgmq.archive call per queue, and nothing is left in either queue.
func TestCompleteTasksArchivesEachQueuesMessages(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('ctq')")
	fx.Exec(t, db, "select pgflow.add_step('ctq', 'a')")
	fx.Exec(t, db, "select pgflow.add_step('ctq', 'b')")
	fx.RouteSteps(t, db, "ctq", "ctq_other", "b")
	runs := []string{fx.StartFlow(t, db, "ctq", `{}`).RunID, fx.StartFlow(t, db, "ctq", `{}`).RunID}

	tasks := append(fx.ReadAndStart(t, db, "ctq", 30, 10), fx.ReadAndStartFrom(t, db, "ctq", "ctq_other", 30, 10)...)
	require.Len(t, tasks, 4)
	var cs []completion
	want := map[string][]int64{}
	for _, task := range tasks {
		cs = append(cs, completion{runID: task.RunID, step: task.StepSlug, index: task.TaskIndex, output: `{"ok": true}`})
		queue := map[string]string{"a": "ctq", "b": "ctq_other"}[task.StepSlug]
		want[queue] = append(want[queue], task.MsgID)
	}
	for _, s := range completeTasks(t, db, cs) {
		require.Equal(t, "completed", s)
	}
	for queue, ids := range want {
		archived := fx.Val[[]int64](t, db, fmt.Sprintf(
			"select coalesce(array_agg(msg_id order by msg_id), '{}') from pgmq.a_%s where msg_id = any($1)", queue), ids)
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		require.Equal(t, ids, archived, "archive of queue %s", queue)
		require.Zero(t, fx.Val[int](t, db, fmt.Sprintf("select count(*)::int from pgmq.q_%s", queue)), "queue %s", queue)
	}
	for _, id := range runs {
		require.Equal(t, "completed", fx.GetRun(t, db, id).Status)
	}
}
