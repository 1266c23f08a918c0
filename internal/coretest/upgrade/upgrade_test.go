package upgrade_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// snapshot captures every pgflow row (as jsonb, without the columns v0.17.0 adds) and every queue's messages.
type snapshot struct {
	tables map[string]string
	queues []string
	queued map[string][]int64
	archiv map[string][]int64
}

var snapshotQueries = map[string]string{
	"flows":       "select jsonb_agg(to_jsonb(x) order by x.flow_slug)::text from pgflow.flows x",
	"steps":       "select jsonb_agg(to_jsonb(x) - 'queue_name' order by x.flow_slug, x.step_index)::text from pgflow.steps x",
	"deps":        "select jsonb_agg(to_jsonb(x) order by x.flow_slug, x.step_slug, x.dep_slug)::text from pgflow.deps x",
	"runs":        "select jsonb_agg(to_jsonb(x) order by x.run_id)::text from pgflow.runs x",
	"step_states": "select jsonb_agg(to_jsonb(x) order by x.run_id, x.step_slug)::text from pgflow.step_states x",
	"step_tasks": "select jsonb_agg(to_jsonb(x) - 'queue_name' order by x.run_id, x.step_slug, x.task_index)::text " +
		"from pgflow.step_tasks x",
	"workers": "select jsonb_agg(to_jsonb(x) order by x.worker_id)::text from pgflow.workers x",
}

func takeSnapshot(t *testing.T, db fx.DB) snapshot {
	t.Helper()
	s := snapshot{tables: map[string]string{}, queued: map[string][]int64{}, archiv: map[string][]int64{}}
	for table, q := range snapshotQueries {
		s.tables[table] = fx.Val[string](t, db, "select coalesce(("+q+"), '[]')")
	}
	s.queues = fx.Val[[]string](t, db, "select array_agg(queue_name::text order by queue_name) from pgmq.list_queues()")
	for _, q := range s.queues {
		s.queued[q] = fx.MessageIDs(fx.QueueMessages(t, db, q))
		s.archiv[q] = fx.MessageIDs(fx.ArchivedMessages(t, db, q))
	}
	return s
}

// A populated v0.16.0 database - flows with mixed-case and empty definitions, runs and tasks in every state,
// tasks without a message, messages in queues and archives - upgrades with every step and task getting the queue
// lower(flow_slug), and nothing else changing.
func TestUpgradeFromV016Populated(t *testing.T) {
	t.Parallel()
	d := newV016(t)
	db := d.Pool

	// Definitions through the v0.16.0 API.
	for _, s := range []string{
		"select pgflow.create_flow('seq', max_attempts => 1)",
		"select pgflow.add_step('seq', 'a')",
		"select pgflow.add_step('seq', 'b', array['a'])",
		"select pgflow.add_step('seq', 'c', array['b'])",
		"select pgflow.create_flow('MixedCase')",
		"select pgflow.add_step('MixedCase', 'stepOne', step_type => 'map')",
		"select pgflow.add_step('MixedCase', 'stepTwo', array['stepOne'])",
		"select pgflow.create_flow('cond', max_attempts => 1)",
		`select pgflow.add_step('cond', 'gate', required_input_pattern => '{"go": true}', when_unmet => 'skip')`,
		"select pgflow.add_step('cond', 'soft', when_exhausted => 'skip')",
		"select pgflow.create_flow('empty_flow')",
		"select pgflow.register_worker('33333333-3333-3333-3333-333333333333', 'seq', 'fn')",
	} {
		fx.Exec(t, db, s)
	}

	// seq: a completed run, a failed run, a run with a started task, a run with a queued task.
	completed := fx.StartFlow(t, db, "seq", `{"run": "completed"}`)
	for _, step := range []string{"a", "b", "c"} {
		require.Len(t, claim016(t, db, "seq", "seq", 10), 1)
		complete(t, db, completed.RunID, step, 0, `"done"`)
	}
	require.Equal(t, "completed", fx.GetRun(t, db, completed.RunID).Status)
	failed := fx.StartFlow(t, db, "seq", `{"run": "failed"}`)
	require.Len(t, claim016(t, db, "seq", "seq", 10), 1)
	fail(t, db, failed.RunID, "a", 0, "boom")
	require.Equal(t, "failed", fx.GetRun(t, db, failed.RunID).Status)
	started := fx.StartFlow(t, db, "seq", `{"run": "started"}`)
	require.Len(t, claim016(t, db, "seq", "seq", 10), 1)
	queued := fx.StartFlow(t, db, "seq", `{"run": "queued"}`)

	// MixedCase: a map with one started and one queued task; another run whose tasks have no message.
	mixed := fx.StartFlow(t, db, "MixedCase", `[1, 2]`)
	require.Len(t, claim016(t, db, "MixedCase", "MixedCase", 1), 1)
	noMsg := fx.StartFlow(t, db, "MixedCase", `[3, 4]`)
	fx.Exec(t, db, "update pgflow.step_tasks set message_id = null where run_id = $1", noMsg.RunID)

	// cond: a step skipped by its condition and a step skipped after its task failed.
	cond := fx.StartFlow(t, db, "cond", `{"go": false}`)
	require.Len(t, claim016(t, db, "cond", "cond", 10), 1)
	fail(t, db, cond.RunID, "soft", 0, "soft failure")
	require.Equal(t, map[string]string{"gate": "skipped", "soft": "skipped"}, fx.StepStatuses(t, db, cond.RunID))

	// Every state is present.
	require.Equal(t, []string{"completed", "failed", "queued", "started"},
		fx.Val[[]string](t, db, "select array_agg(distinct status order by status) from pgflow.step_tasks"))
	require.Equal(t, []string{"completed", "created", "failed", "skipped", "started"},
		fx.Val[[]string](t, db, "select array_agg(distinct status order by status) from pgflow.step_states"))
	require.Equal(t, 2, count(t, db, "select 1 from pgflow.step_tasks where message_id is null"))
	require.Equal(t, []string{"MixedCase", "cond", "empty_flow", "seq"},
		fx.Val[[]string](t, db, "select array_agg(queue_name::text order by queue_name) from pgmq.list_queues()"))
	before := takeSnapshot(t, db)
	require.NotEmpty(t, before.queued["seq"])
	require.NotEmpty(t, before.archiv["seq"])
	require.NotEmpty(t, before.queued["MixedCase"])

	d.mustUpgrade(t)

	// Every step and every task (also those without a message) got lower(flow_slug).
	require.Equal(t, []string{"MixedCase/mixedcase/2", "cond/cond/2", "seq/seq/3"}, fx.Val[[]string](t, db, `
		select array_agg(flow_slug || '/' || queue_name || '/' || n order by flow_slug)
		from (select flow_slug, queue_name, count(*) as n from pgflow.steps group by 1, 2) as x`))
	require.Equal(t, []string{"MixedCase/mixedcase/4", "cond/cond/1", "seq/seq/6"}, fx.Val[[]string](t, db, `
		select array_agg(flow_slug || '/' || queue_name || '/' || n order by flow_slug)
		from (select flow_slug, queue_name, count(*) as n from pgflow.step_tasks group by 1, 2) as x`))
	require.Zero(t, count(t, db, "select 1 from pgflow.steps where queue_name is distinct from lower(flow_slug)"))
	require.Zero(t, count(t, db, "select 1 from pgflow.step_tasks where queue_name is distinct from lower(flow_slug)"))
	require.Equal(t, []string{"mixedcase", "mixedcase"},
		fx.Val[[]string](t, db, "select array_agg(queue_name) from pgflow.step_tasks where message_id is null"))

	// Nothing else changed: rows, queues (no rename, no new metadata entry), messages in queues and archives.
	after := takeSnapshot(t, db)
	for table := range snapshotQueries {
		require.JSONEq(t, before.tables[table], after.tables[table], table)
	}
	require.Equal(t, before.queues, after.queues)
	require.Equal(t, before.queued, after.queued)
	require.Equal(t, before.archiv, after.archiv)

	// The migrated rows work: the queued and started runs of seq go on.
	for _, r := range []fx.Run{queued, started} {
		require.Equal(t, "started", fx.GetRun(t, db, r.RunID).Status)
	}
	require.Equal(t, "queued", fx.GetTask(t, db, mixed.RunID, "stepOne", 1).Status)
}

// A database violating a new constraint cannot be upgraded: the migration fails, and the database is byte-for-byte
// what it was (schema and data of every schema, compared with pg_dump). Nothing is renamed or repaired.
func TestUpgradeRollsBackOnCollision(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		conflict []string // SQL that creates the conflicting v0.16.0 state
		wantErr  string
	}{
		{
			// v0.16.0's create_flow already refuses case-only duplicates; a definition written with plain SQL is
			// the conflicting existing definition.
			name: "flows differing only in case",
			conflict: []string{
				"insert into pgflow.flows (flow_slug) values ('Orders')",
				"select pgflow.add_step('Orders', 'x')",
			},
			wantErr: `could not create unique index "flows_default_queue_key"`,
		},
		{
			name: "two tasks with one message",
			conflict: []string{
				`update pgflow.step_tasks set message_id = (select min(message_id) from pgflow.step_tasks)
				 where step_slug = 'a' and task_index = 1`,
			},
			wantErr: `could not create unique index "step_tasks_queue_name_message_id_key"`,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := newV016(t)
			db := d.Pool
			fx.Exec(t, db, "select pgflow.create_flow('orders')")
			fx.Exec(t, db, "select pgflow.add_step('orders', 'a', step_type => 'map')")
			fx.StartFlow(t, db, "orders", `[1, 2, 3]`)
			require.Len(t, claim016(t, db, "orders", "orders", 1), 1)
			for _, s := range c.conflict {
				fx.Exec(t, db, s)
			}
			before := dumpAll(t, d.URL)
			require.Contains(t, before, "COPY pgflow.step_tasks")

			_, err := d.upgrade(t)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.wantErr)

			after := dumpAll(t, d.URL)
			if before != after {
				t.Fatalf("the failed upgrade changed the database:\n%s", firstDifference(before, after))
			}
			require.Equal(t, "v0.16.0", fx.Val[string](t, db,
				"select max(version) from pgflow.schema_migrations"))
		})
	}
}

func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n- " + x + "\n+ " + y
		}
	}
	return "(no line differs)"
}

// Runs started under v0.16.0 (queued and started tasks, in a mixed-case flow) finish after the upgrade, claimed with
// the four-argument and the three-argument start_tasks; the worker's startup check still verifies the flow.
func TestUpgradeThenInFlightRunsFinish(t *testing.T) {
	t.Parallel()
	d := newV016(t)
	db := d.Pool
	fx.Exec(t, db, "select pgflow.create_flow('InFlight')")
	fx.Exec(t, db, "select pgflow.add_step('InFlight', 'fetch')")
	fx.Exec(t, db, "select pgflow.add_step('InFlight', 'each', array['fetch'], step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('InFlight', 'report', array['each'])")
	shape := fx.Val[string](t, db, "select pgflow._get_flow_shape('InFlight')::text")

	startedRun := fx.StartFlow(t, db, "InFlight", `{"n": 1}`)
	require.Len(t, claim016(t, db, "InFlight", "InFlight", 10), 1) // fetch of startedRun is started
	queuedRun := fx.StartFlow(t, db, "InFlight", `{"n": 2}`)       // fetch of queuedRun stays queued

	d.mustUpgrade(t)
	require.Equal(t, "verified", fx.Val[string](t, db,
		"select pgflow.ensure_flow_compiled('InFlight', $1::jsonb)->>'status'", shape))

	// The task started before the upgrade reports its result; its dependents are created in the stored route.
	fx.CompleteTask(t, db, startedRun.RunID, "fetch", 0, `[1, 2]`)
	require.Equal(t, []string{"inflight", "inflight"},
		fx.Val[[]string](t, db, "select array_agg(queue_name) from pgflow.step_tasks where run_id = $1 and step_slug = 'each'", startedRun.RunID))

	// A v0.17.0 worker polls the queue PGMQ lists ('InFlight') and names it; a v0.16.0 worker claims with three
	// arguments. Both finish the runs.
	worker := fx.EnsureWorker(t, db, "InFlight", "")
	for i := 0; i < 10 && (fx.GetRun(t, db, startedRun.RunID).Status == "started" ||
		fx.GetRun(t, db, queuedRun.RunID).Status == "started"); i++ {
		var tasks []fx.Task
		if i%2 == 0 {
			tasks = fx.StartTasksFrom(t, db, "InFlight", "InFlight", fx.ReadMessages(t, db, "InFlight", 30, 10), worker)
		} else {
			tasks = fx.StartTasks(t, db, "InFlight", fx.ReadMessages(t, db, "InFlight", 30, 10), worker)
		}
		for _, tk := range tasks {
			out := `"ok"`
			if tk.StepSlug == "fetch" {
				out = `[1, 2, 3]`
			}
			fx.CompleteTask(t, db, tk.RunID, tk.StepSlug, tk.TaskIndex, out)
		}
	}
	require.Equal(t, "completed", fx.GetRun(t, db, startedRun.RunID).Status)
	require.Equal(t, "completed", fx.GetRun(t, db, queuedRun.RunID).Status)
	require.Empty(t, fx.QueueMessages(t, db, "inflight"))
	require.Equal(t, []string{"InFlight"}, fx.Val[[]string](t, db, "select array_agg(queue_name::text) from pgmq.list_queues()"))
}

// After the upgrade a v0.16.0 worker's three-argument claim (named arguments, as the v0.16.0 Go worker sends it)
// still resolves to the single start_tasks and claims tasks created before and after the upgrade.
func TestThreeArgumentClaimAfterUpgrade(t *testing.T) {
	t.Parallel()
	d := newV016(t)
	db := d.Pool
	fx.Exec(t, db, "select pgflow.create_flow('old_worker')")
	fx.Exec(t, db, "select pgflow.add_step('old_worker', 'a')")
	before := fx.StartFlow(t, db, "old_worker", `{}`)

	d.mustUpgrade(t)
	require.Equal(t, 1, count(t, db, "select 1 from pg_proc where pronamespace = 'pgflow'::regnamespace and proname = 'start_tasks'"))
	after := fx.StartFlow(t, db, "old_worker", `{}`)

	claimed := claim016(t, db, "old_worker", "old_worker", 10)
	require.Len(t, claimed, 2)
	require.Equal(t, []int64{*fx.GetTask(t, db, before.RunID, "a", 0).MessageID, *fx.GetTask(t, db, after.RunID, "a", 0).MessageID}, claimed)
	for _, r := range []fx.Run{before, after} {
		tk := fx.GetTask(t, db, r.RunID, "a", 0)
		require.Equal(t, "started", tk.Status)
		require.Equal(t, 1, tk.AttemptsCount)
		require.Greater(t, fx.VisibleIn(t, db, "old_worker", *tk.MessageID), 55.0, "claim visibility: timeout 60 + 2 s")
		fx.CompleteTask(t, db, r.RunID, "a", 0, `1`)
		require.Equal(t, "completed", fx.GetRun(t, db, r.RunID).Status)
	}
}
