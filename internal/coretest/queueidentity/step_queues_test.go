package queueidentity_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// Per-step queues (v0.20.0): a flow compiled with queue_mode 'step' gives every step a private queue named
// <flow>__<step> (or <flow>__<index> when that is too long) and has no default queue.

// chainShape is a three-step chain in the full form the DSL produces (patterns spelled out).
var chainShape = `{"steps": [` + stepJSON("fetch", "") + `, ` + stepJSON("Parse", "fetch") + `, ` + stepJSON("store", "Parse") + `]}`

func stepJSON(slug, dep string) string {
	deps := "[]"
	if dep != "" {
		deps = `["` + dep + `"]`
	}
	return `{"slug": "` + slug + `", "stepType": "single", "dependencies": ` + deps + `, "whenUnmet": "skip",
		"whenExhausted": "fail", "requiredInputPattern": {"defined": false}, "forbiddenInputPattern": {"defined": false}}`
}

func stepRoutes(t *testing.T, db fx.DB, flow string) map[string]string {
	t.Helper()
	rows, err := db.Query(context.Background(), `select step_slug, queue_name from pgflow.steps where flow_slug = $1`, flow)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var s, q string
		require.NoError(t, rows.Scan(&s, &q))
		out[s] = q
	}
	require.NoError(t, rows.Err())
	return out
}

func queueNames(t *testing.T, db fx.DB) []string {
	t.Helper()
	return fx.Val[[]string](t, db, `select coalesce(array_agg(queue_name::text order by queue_name), '{}') from pgmq.list_queues()`)
}

func TestStepModeCreatesOneQueuePerStepAndNoDefaultQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	res := fx.Val[string](t, db, `select pgflow.ensure_flow_compiled('Orders', $1::jsonb, queue_mode => 'step')->>'status'`, chainShape)
	require.Equal(t, "compiled", res)

	require.Equal(t, "step", fx.Val[string](t, db, `select queue_mode from pgflow.flows where flow_slug = 'Orders'`))
	require.Equal(t, map[string]string{"fetch": "orders__fetch", "Parse": "orders__parse", "store": "orders__store"},
		stepRoutes(t, db, "Orders"))
	require.Equal(t, []string{"orders__fetch", "orders__parse", "orders__store"}, queueNames(t, db),
		"one queue per step, and no unused default queue")

	// Compiling again verifies; nothing new is created.
	require.Equal(t, "verified", fx.Val[string](t, db,
		`select pgflow.ensure_flow_compiled('Orders', $1::jsonb, queue_mode => 'step')->>'status'`, chainShape))
	require.Len(t, queueNames(t, db), 3)

	// An ordinary flow still has one queue exactly as before.
	fx.Exec(t, db, `select pgflow.ensure_flow_compiled('plain', $1::jsonb)`, chainShape)
	require.Equal(t, map[string]string{"fetch": "plain", "Parse": "plain", "store": "plain"}, stepRoutes(t, db, "plain"))
	require.Equal(t, "flow", fx.Val[string](t, db, `select queue_mode from pgflow.flows where flow_slug = 'plain'`))
}

func TestStepModeLongStepSlugUsesItsIndex(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	long := "a" + strings.Repeat("b", 44) // orders__ + 45 = 53 characters
	fx.Exec(t, db, `select pgflow.create_flow('orders', queue_mode => 'step')`)
	fx.Exec(t, db, `select pgflow.add_step('orders', 'first')`)
	fx.Exec(t, db, `select pgflow.add_step('orders', $1)`, long)
	require.Equal(t, map[string]string{"first": "orders__first", long: "orders__1"}, stepRoutes(t, db, "orders"))
	require.Equal(t, []string{"orders__1", "orders__first"}, queueNames(t, db))
	require.Equal(t, "orders__1", fx.Val[string](t, db, `select pgflow._step_queue_name('orders', $1, 1)`, long))
}

func TestStepModeRefusesAmbiguousNamesAndChangesNothing(t *testing.T) {
	t.Parallel()
	db := newDB(t)

	cases := []struct{ sql, code, msg string }{
		{`select pgflow.create_flow('_orders', queue_mode => 'step')`, "22023",
			`Flow slug "_orders" starts or ends with '_', which a flow with per-step queues does not allow`},
		{`select pgflow.create_flow('my__orders', queue_mode => 'step')`, "22023",
			`Flow slug "my__orders" contains '__', which a flow with per-step queues does not allow`},
		{`select pgflow.create_flow('` + strings.Repeat("o", 41) + `', queue_mode => 'step')`, "22023",
			`Flow slug "` + strings.Repeat("o", 41) + `" is 41 characters long; at most 40 are allowed, so that its steps' queue names fit PGMQ's 47, which a flow with per-step queues does not allow`},
		{`select pgflow.create_flow('orders', queue_mode => 'steps')`, "22023",
			`Flow "orders": queue_mode must be 'flow' or 'step', got 'steps'`},
		{`select pgflow.ensure_flow_compiled('orders', '{"steps": []}', queue_mode => 'queue')`, "22023",
			`Flow "orders": queue_mode must be 'flow' or 'step', got 'queue'`},
	}
	for _, c := range cases {
		requirePgError(t, execErr(db, c.sql), c.code, c.msg)
	}
	require.Zero(t, count(t, db, `select 1 from pgflow.flows`))
	require.Empty(t, queueNames(t, db))

	// Step slugs: checked before the step or its queue is written.
	fx.Exec(t, db, `select pgflow.create_flow('orders', queue_mode => 'step')`)
	fx.Exec(t, db, `select pgflow.add_step('orders', 'fetch')`)
	stepCases := []struct{ sql, code, msg string }{
		{`select pgflow.add_step('orders', 'fetch_')`, "22023",
			`Step slug "fetch_" of flow "orders" starts or ends with '_', which a flow with per-step queues does not allow`},
		{`select pgflow.add_step('orders', 'a__b')`, "22023",
			`Step slug "a__b" of flow "orders" contains '__', which a flow with per-step queues does not allow`},
		{`select pgflow.add_step('orders', 'Fetch')`, "23505",
			`Step slug "Fetch" of flow "orders" differs only in letter case from step "fetch"; with per-step queues both would use queue "orders__fetch"`},
	}
	for _, c := range stepCases {
		requirePgError(t, execErr(db, c.sql), c.code, c.msg)
	}
	require.Equal(t, map[string]string{"fetch": "orders__fetch"}, stepRoutes(t, db, "orders"))
	require.Equal(t, []string{"orders__fetch"}, queueNames(t, db))
}

// A step queue is never adopted: a flow whose default queue has the step queue's name blocks the step, and a step
// queue blocks a flow of that name, in either order.
func TestStepQueueNamesNeverCollideWithOtherFlowsQueues(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, `select pgflow.create_flow('orders__fetch')`) // legacy slug with '__' in queue mode 'flow'
	err := execErr(db, `select pgflow.ensure_flow_compiled('orders', '{"steps": [{"slug": "fetch"}]}', queue_mode => 'step')`)
	requirePgError(t, err, "23505",
		`Cannot add step "fetch" to flow "orders": PGMQ already lists queue "orders__fetch", the name of the step's private queue`)
	require.Zero(t, count(t, db, `select 1 from pgflow.flows where flow_slug = 'orders'`), "nothing of the step-mode flow was written")

	fx.Exec(t, db, `select pgflow.ensure_flow_compiled('shop', '{"steps": [{"slug": "pay"}]}', queue_mode => 'step')`)
	err = execErr(db, `select pgflow.create_flow('shop__pay')`)
	requirePgError(t, err, "23505",
		`Cannot create flow "shop__pay": PGMQ already lists queue "shop__pay", which has the same normalized name "shop__pay" as the flow's queue`)
}

// Two sessions that create the colliding definitions at the same time: exactly one wins, and the queue belongs to it.
func TestConcurrentCollidingDefinitionsOneWins(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := fx.Ctx(t)
	for round := 0; round < 5; round++ {
		flowA := "f" + string(rune('a'+round))
		stepQueueFlow := flowA + "__s"
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, errs[0] = db.Exec(ctx, `select pgflow.ensure_flow_compiled($1, '{"steps": [{"slug": "s"}]}', queue_mode => 'step')`, flowA)
		}()
		go func() {
			defer wg.Done()
			<-start
			_, errs[1] = db.Exec(ctx, `select pgflow.create_flow($1)`, stepQueueFlow)
		}()
		close(start)
		wg.Wait()
		succeeded := 0
		for _, err := range errs {
			if err == nil {
				succeeded++
			}
		}
		require.Equal(t, 1, succeeded, "round %d: exactly one succeeds: %v / %v", round, errs[0], errs[1])
		require.Len(t, listed(t, db, stepQueueFlow), 1)
		owners := count(t, db, `select 1 from pgflow.steps where queue_name = $1 union all
			select 1 from pgflow.flows where flow_slug = $1`, stepQueueFlow)
		require.Equal(t, 1, owners, "round %d: the queue has exactly one owner", round)
	}
}

// Concurrent compilation of one step-mode flow (several workers starting at once): one compiles, the others
// verify, one queue per step.
func TestConcurrentStepModeCompilation(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := fx.Ctx(t)
	const n = 6
	statuses := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = db.QueryRow(ctx, `select pgflow.ensure_flow_compiled('conc', $1::jsonb, queue_mode => 'step')->>'status'`,
				chainShape).Scan(&statuses[i])
		})
	}
	close(start)
	wg.Wait()
	compiled := 0
	for i := range n {
		require.NoError(t, errs[i])
		if statuses[i] == "compiled" {
			compiled++
		} else {
			require.Equal(t, "verified", statuses[i])
		}
	}
	require.Equal(t, 1, compiled)
	require.Equal(t, []string{"conc__fetch", "conc__parse", "conc__store"}, queueNames(t, db))
}

// Switching the queue mode is a definition change with the rules of a shape change: a mismatch in production,
// a recompilation (new queues, old ones dropped) when data loss is allowed.
func TestSwitchingQueueModeFollowsShapeChangeRules(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, `select pgflow.ensure_flow_compiled('sw', $1::jsonb)`, chainShape)
	fx.StartFlow(t, db, "sw", `{}`)

	var res struct {
		Status      string   `json:"status"`
		Differences []string `json:"differences"`
	}
	raw := fx.Val[string](t, db, `select pgflow.ensure_flow_compiled('sw', $1::jsonb, queue_mode => 'step')::text`, chainShape)
	require.NoError(t, json.Unmarshal([]byte(raw), &res))
	require.Equal(t, "mismatch", res.Status)
	require.Equal(t, []string{`Queue mode differs: 'step' vs 'flow'`}, res.Differences)
	require.Equal(t, []string{"sw"}, queueNames(t, db), "nothing changed")
	require.Equal(t, 1, count(t, db, `select 1 from pgflow.runs where flow_slug = 'sw'`))

	raw = fx.Val[string](t, db, `select pgflow.ensure_flow_compiled('sw', $1::jsonb, true, 'step')::text`, chainShape)
	require.NoError(t, json.Unmarshal([]byte(raw), &res))
	require.Equal(t, "recompiled", res.Status)
	require.Equal(t, []string{"sw__fetch", "sw__parse", "sw__store"}, queueNames(t, db), "the default queue was dropped")
	require.Zero(t, count(t, db, `select 1 from pgflow.runs where flow_slug = 'sw'`))

	raw = fx.Val[string](t, db, `select pgflow.ensure_flow_compiled('sw', $1::jsonb, true)::text`, chainShape)
	require.NoError(t, json.Unmarshal([]byte(raw), &res))
	require.Equal(t, "recompiled", res.Status)
	require.Equal(t, []string{`Queue mode differs: 'flow' vs 'step'`}, res.Differences)
	require.Equal(t, []string{"sw"}, queueNames(t, db), "back to one queue")
}

func TestDeleteStepModeFlowDropsEveryStepQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, `select pgflow.ensure_flow_compiled('del', $1::jsonb, queue_mode => 'step')`, chainShape)
	fx.Exec(t, db, `select pgflow.create_flow('empty', queue_mode => 'step')`)
	fx.Exec(t, db, `select pgflow.create_flow('keep')`)
	fx.StartFlow(t, db, "del", `{}`)
	require.Len(t, fx.ReadAndStartFrom(t, db, "del", "del__fetch", 30, 1), 1)

	fx.Exec(t, db, `select pgflow.delete_flow_and_data('del')`)
	fx.Exec(t, db, `select pgflow.delete_flow_and_data('empty')`)
	require.Equal(t, []string{"keep"}, queueNames(t, db))
	require.Zero(t, count(t, db, `select 1 from pgflow.flows where flow_slug in ('del', 'empty')`))
}

// A run of a step-mode flow: each task goes to its step's queue, is claimed only from there, and retries,
// stalled-task recovery and cancellation act on that queue.
func TestStepModeRunUsesEachStepsQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	fx.Exec(t, db, `select pgflow.ensure_flow_compiled('rt', '{"options": {"maxAttempts": 3, "baseDelay": 100},
		"steps": [{"slug": "a"}, {"slug": "b"}, {"slug": "c", "dependencies": ["a"]}]}', queue_mode => 'step')`)
	run := fx.StartFlow(t, db, "rt", `{}`)

	aMsg := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID
	bMsg := *fx.GetTask(t, db, run.RunID, "b", 0).MessageID
	require.True(t, fx.InQueue(t, db, "rt__a", aMsg))
	require.True(t, fx.InQueue(t, db, "rt__b", bMsg))
	require.Equal(t, "rt__b", fx.GetTask(t, db, run.RunID, "b", 0).QueueName)

	// A worker of step b's queue never gets a's task: claiming a's message id through b's queue claims nothing
	// unless b's queue has a message with that id, and then only b's task.
	claimed := fx.ReadAndStartFrom(t, db, "rt", "rt__b", 30, 10)
	require.Len(t, claimed, 1)
	require.Equal(t, "b", claimed[0].StepSlug)
	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "a", 0).Status)

	// Retry: the delay is set on b's queue.
	require.Equal(t, "queued", fx.FailTask(t, db, run.RunID, "b", 0, "again").Status)
	require.Greater(t, fx.VisibleIn(t, db, "rt__b", bMsg), 190.0)

	// a completes; c's task goes to c's queue.
	require.Len(t, fx.ReadAndStartFrom(t, db, "rt", "rt__a", 30, 10), 1)
	fx.CompleteTask(t, db, run.RunID, "a", 0, `1`)
	require.True(t, fx.InArchive(t, db, "rt__a", aMsg))
	cMsg := *fx.GetTask(t, db, run.RunID, "c", 0).MessageID
	require.True(t, fx.InQueue(t, db, "rt__c", cMsg))

	// Stalled-task recovery: c claimed, its claim expires, recovery makes it visible in c's queue again.
	require.Len(t, fx.ReadAndStartFrom(t, db, "rt", "rt__c", 30, 10), 1)
	fx.Exec(t, db, `update pgflow.step_tasks set started_at = now() - interval '1 hour',
		queued_at = least(queued_at, now() - interval '1 hour') where run_id = $1 and step_slug = 'c'`, run.RunID)
	fx.Exec(t, db, `select pgflow.requeue_stalled_tasks()`)
	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "c", 0).Status)
	require.LessOrEqual(t, fx.VisibleIn(t, db, "rt__c", cMsg), 0.0)

	// Cancel: every unfinished task's message leaves its own queue.
	fx.Exec(t, db, `select pgflow.cancel_run($1, 'test')`, run.RunID)
	for _, q := range []string{"rt__a", "rt__b", "rt__c"} {
		require.Empty(t, fx.QueueMessages(t, db, q), q)
	}
	require.True(t, fx.InArchive(t, db, "rt__b", bMsg))
	require.True(t, fx.InArchive(t, db, "rt__c", cMsg))

	// Resume: the unfinished tasks are queued again, each in its own step's queue.
	fx.Exec(t, db, `select pgflow.retry_run($1)`, run.RunID)
	for step, q := range map[string]string{"b": "rt__b", "c": "rt__c"} {
		tk := fx.GetTask(t, db, run.RunID, step, 0)
		require.Equal(t, "queued", tk.Status, step)
		require.Equal(t, q, tk.QueueName, step)
		require.True(t, fx.InQueue(t, db, q, *tk.MessageID), step)
	}
	require.Empty(t, fx.QueueMessages(t, db, "rt__a"), "the completed step is not run again")
}
