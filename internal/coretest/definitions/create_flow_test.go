package definitions_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type flowRow struct {
	Slug        string
	MaxAttempts int
	BaseDelay   int
	Timeout     int
}

func TestCreateFlowDefaultsAndQueue(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	var f flowRow
	require.NoError(t, pool.QueryRow(t.Context(),
		`select flow_slug, opt_max_attempts, opt_base_delay, opt_timeout from pgflow.create_flow('test_flow')`).
		Scan(&f.Slug, &f.MaxAttempts, &f.BaseDelay, &f.Timeout))
	require.Equal(t, flowRow{"test_flow", 3, 5, 60}, f, "create_flow defaults are (3, 5, 60)")
	require.True(t, queueExists(t, pool, "test_flow"), "create_flow creates the queue named after the flow")
	require.True(t, queryVal[bool](t, pool, `select to_regclass('pgmq.q_test_flow') is not null`))
	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.flows`))
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.steps`), "a flow without steps is fine")
}

func TestCreateFlowOptions(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	cases := []struct {
		sql  string
		want flowRow
	}{
		{`select flow_slug, opt_max_attempts, opt_base_delay, opt_timeout from pgflow.create_flow('positional', 7, 2, 30)`,
			flowRow{"positional", 7, 2, 30}},
		{`select flow_slug, opt_max_attempts, opt_base_delay, opt_timeout from pgflow.create_flow('only_timeout', null, null, 5)`,
			flowRow{"only_timeout", 3, 5, 5}},
		{`select flow_slug, opt_max_attempts, opt_base_delay, opt_timeout from pgflow.create_flow(flow_slug => 'named', timeout => 9, max_attempts => 0)`,
			flowRow{"named", 0, 5, 9}},
		{`select flow_slug, opt_max_attempts, opt_base_delay, opt_timeout from pgflow.create_flow('zero_delay', base_delay => 0)`,
			flowRow{"zero_delay", 3, 0, 60}},
	}
	for _, c := range cases {
		var f flowRow
		require.NoError(t, pool.QueryRow(t.Context(), c.sql).Scan(&f.Slug, &f.MaxAttempts, &f.BaseDelay, &f.Timeout))
		require.Equal(t, c.want, f, c.sql)
	}
}

func TestCreateFlowIsIdempotent(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	mustExec(t, pool, `select pgflow.create_flow('test_flow', 7, 2, 30)`)
	createdAt := queryVal[string](t, pool, `select created_at::text from pgflow.flows where flow_slug = 'test_flow'`)

	// Calling again, even with other options, returns the existing row unchanged.
	var f flowRow
	var again string
	require.NoError(t, pool.QueryRow(t.Context(),
		`select flow_slug, opt_max_attempts, opt_base_delay, opt_timeout, created_at::text from pgflow.create_flow('test_flow', 1, 1, 1)`).
		Scan(&f.Slug, &f.MaxAttempts, &f.BaseDelay, &f.Timeout, &again))
	require.Equal(t, flowRow{"test_flow", 7, 2, 30}, f)
	require.Equal(t, createdAt, again)
	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.flows`))
	require.Equal(t, 1, count(t, pool, `select 1 from pgmq.list_queues() where queue_name = 'test_flow'`))
}

func TestCreateFlowRecreatesMissingQueue(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	mustExec(t, pool, `select pgflow.create_flow('test_flow')`)
	mustExec(t, pool, `select pgmq.drop_queue('test_flow')`)
	require.False(t, queueExists(t, pool, "test_flow"))
	mustExec(t, pool, `select pgflow.create_flow('test_flow')`)
	require.True(t, queueExists(t, pool, "test_flow"), "a repeated create_flow restores the flow's queue")
}

// Up to v0.16.0 create_flow adopted an existing queue of the same name; since v0.17.0 pgflow manages its queues
// exclusively, so a new flow refuses a queue PGMQ already lists, and leaves that queue (and its messages) alone.
func TestCreateFlowRefusesExistingQueue(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	mustExec(t, pool, `select pgmq.create('test_flow')`)
	mustExec(t, pool, `select pgmq.send('test_flow', '{"keep": true}')`)
	err := execErr(pool, `select pgflow.create_flow('test_flow')`)
	pgErr := requirePgError(t, err, "23505",
		`Cannot create flow "test_flow": PGMQ already lists queue "test_flow", which has the same normalized name "test_flow" as the flow's queue`)
	require.Contains(t, pgErr.Hint, "pgflow manages its queues exclusively")
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.flows`), "nothing written")
	require.Equal(t, 1, count(t, pool, `select 1 from pgmq.q_test_flow`), "the existing queue is kept with its messages")
	require.Equal(t, 1, count(t, pool, `select 1 from pgmq.list_queues()`))
}

func TestCreateFlowSlugLength(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	slug47 := "f" + strings.Repeat("x", 46)
	mustExec(t, pool, `select pgflow.create_flow($1)`, slug47)
	require.True(t, queueExists(t, pool, slug47), "47 characters still name a PGMQ queue")

	for _, n := range []int{48, 100, 128} {
		slug := "f" + strings.Repeat("y", n-1)
		err := execErr(pool, `select pgflow.create_flow($1)`, slug)
		pgErr := requirePgError(t, err, "22023", fmt.Sprintf(
			`Flow slug "%s" is %d characters long, but a flow slug also names the flow's PGMQ queue, which allows at most 47`,
			slug, n))
		require.Equal(t, "Choose a flow slug of at most 47 characters.", pgErr.Hint)
		require.False(t, queueExists(t, pool, slug))
	}
	// Beyond 128 characters the slug itself is invalid, which the constraint reports.
	err := execErr(pool, `select pgflow.create_flow($1)`, strings.Repeat("z", 129))
	requirePgError(t, err, "23514", `new row for relation "flows" violates check constraint "slug_is_valid"`)

	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.flows`), "rejected slugs wrote nothing")
	require.Equal(t, 1, count(t, pool, `select 1 from pgmq.list_queues()`), "rejected slugs created no queue")
}

func TestCreateFlowRejectsCaseOnlyClash(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	mustExec(t, pool, `select pgflow.create_flow('orders')`)
	err := execErr(pool, `select pgflow.create_flow('Orders')`)
	requirePgError(t, err, "23505",
		`Cannot create flow "Orders": PGMQ already lists queue "orders", which has the same normalized name "orders" as the flow's queue`)

	// Even when the other flow's queue is gone, the flows themselves may not share a default queue.
	mustExec(t, pool, `select pgmq.drop_queue('orders')`)
	err = execErr(pool, `select pgflow.create_flow('ORDERS')`)
	pgErr := requirePgError(t, err, "23505", `duplicate key value violates unique constraint "flows_default_queue_key"`)
	require.Equal(t, "Key (pgflow._default_queue_name(flow_slug))=(orders) already exists.", pgErr.Detail)

	// A plain PGMQ queue (not a flow) is protected the same way.
	mustExec(t, pool, `select pgmq.create('Mixed_Queue')`)
	err = execErr(pool, `select pgflow.create_flow('mixed_queue')`)
	requirePgError(t, err, "23505",
		`Cannot create flow "mixed_queue": PGMQ already lists queue "Mixed_Queue", which has the same normalized name "mixed_queue" as the flow's queue`)

	require.Equal(t, []string{"orders"}, queryVal[[]string](t, pool, `select array_agg(flow_slug order by flow_slug) from pgflow.flows`))
	require.Equal(t, 0, count(t, pool, `select 1 from pgmq.list_queues() where lower(queue_name) = 'orders'`),
		"refused calls created no queue")

	// Mixed case on its own is fine (the spelling is kept), and so is re-creating the same spelling. The queue has
	// the canonical lower-case name.
	mustExec(t, pool, `select pgflow.create_flow('CamelFlow')`)
	mustExec(t, pool, `select pgflow.create_flow('CamelFlow')`)
	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.flows where flow_slug = 'CamelFlow'`))
	require.True(t, queueExists(t, pool, "camelflow"))
	require.False(t, queueExists(t, pool, "CamelFlow"))
}

func TestCreateFlowOptionConstraints(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	cases := []struct {
		sql, constraint string
	}{
		{`select pgflow.create_flow('f1', max_attempts => -1)`, "opt_max_attempts_is_nonnegative"},
		{`select pgflow.create_flow('f2', base_delay => -1)`, "opt_base_delay_is_nonnegative"},
		{`select pgflow.create_flow('f3', timeout => 0)`, "opt_timeout_is_positive"},
	}
	for _, c := range cases {
		err := execErr(pool, c.sql)
		requirePgError(t, err, "23514", fmt.Sprintf(`new row for relation "flows" violates check constraint "%s"`, c.constraint))
	}
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.flows`))
	require.Equal(t, 0, count(t, pool, `select 1 from pgmq.list_queues()`))
}
