package definitions_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDeleteFlowAndData(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	for _, flow := range []string{"doomed", "survivor"} {
		mustExec(t, pool, `select pgflow.create_flow($1)`, flow)
		mustExec(t, pool, `select pgflow.add_step($1, 'a')`, flow)
		mustExec(t, pool, `select pgflow.add_step($1, 'b', ARRAY['a'])`, flow)
		seedRun(t, pool, flow, "a")
	}
	mustExec(t, pool, `select pgmq.archive('doomed', (select max(msg_id) from pgmq.q_doomed))`)
	mustExec(t, pool, `select pgflow.register_worker('11111111-1111-1111-1111-111111111111', 'doomed', 'fn')`)

	mustExec(t, pool, `select pgflow.delete_flow_and_data('doomed')`)

	for _, table := range []string{"flows", "steps", "deps", "runs", "step_states", "step_tasks"} {
		require.Equal(t, 0, count(t, pool, `select 1 from pgflow.`+table+` where flow_slug = 'doomed'`), table)
		require.Positive(t, count(t, pool, `select 1 from pgflow.`+table+` where flow_slug = 'survivor'`), table)
	}
	require.False(t, queueExists(t, pool, "doomed"))
	require.False(t, queryVal[bool](t, pool, `select to_regclass('pgmq.a_doomed') is not null`), "archive dropped")
	require.True(t, queueExists(t, pool, "survivor"))
	require.Equal(t, 1, count(t, pool, `select 1 from pgmq.q_survivor`))
	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.workers`), "workers are not touched")

	// The slug can be defined again from scratch.
	mustExec(t, pool, `select pgflow.create_flow('doomed', 1, 1, 1)`)
	require.Equal(t, 1, queryVal[int](t, pool, `select opt_max_attempts from pgflow.flows where flow_slug = 'doomed'`))
}

// pgflow fails with 'relation "pgmq.q_<slug>" does not exist' when the queue is gone, which leaves such a flow
// undeletable; pgflow-go deletes the rows anyway.
func TestDeleteFlowAndDataWithoutQueue(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, `select pgflow.create_flow('no_queue')`)
	mustExec(t, pool, `select pgflow.add_step('no_queue', 'a')`)
	mustExec(t, pool, `select pgmq.drop_queue('no_queue')`)

	mustExec(t, pool, `select pgflow.delete_flow_and_data('no_queue')`)
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.flows`))
	require.Equal(t, 0, count(t, pool, `select 1 from pgflow.steps`))

	mustExec(t, pool, `select pgflow.delete_flow_and_data('never_existed')`)
}
