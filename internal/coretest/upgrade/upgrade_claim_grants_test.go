package upgrade_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// Upgrading to v0.20.0 gives the roles that could claim tasks (execute on start_tasks) the new claim in one call
// and the functions it uses, and nobody else.
func TestUpgradeToV020GrantsTheNewClaimToClaimers(t *testing.T) {
	t.Parallel()
	db := newAt(t, "v0.19.0")
	claimer, bystander := newRole(t, db.URL), newRole(t, db.URL)
	fx.Exec(t, db.Pool, fmt.Sprintf(`grant execute on function pgflow.start_tasks(text, bigint[], uuid, text) to %s`, claimer))

	_, err := db.upTo(t, "v0.20.0")
	require.NoError(t, err)

	for _, fn := range []string{"pgflow.read_and_start_tasks(text, text, uuid, integer, integer)",
		"pgflow._claim_tasks(text, text, bigint[], uuid)", "pgflow._claimed_task_records(tid[])", "pgflow._notify(text[], text[])"} {
		granted := executors(t, db.Pool, fn)
		require.Contains(t, granted, claimer, fn)
		require.NotContains(t, granted, bystander, fn)
	}
}

// Upgrading to v0.20.0 gives the roles that could emit events (execute on _emit_events: a worker role that
// completes tasks, a role that starts runs) pgflow._emit_envelopes, which the start and the completion now call,
// and nobody else.
func TestUpgradeToV020GrantsEnvelopesToEventEmitters(t *testing.T) {
	t.Parallel()
	db := newAt(t, "v0.19.0")
	emitter, bystander := newRole(t, db.URL), newRole(t, db.URL)
	fx.Exec(t, db.Pool, fmt.Sprintf(`grant execute on function pgflow._emit_events(jsonb[]) to %s`, emitter))

	_, err := db.upTo(t, "v0.20.0")
	require.NoError(t, err)

	granted := executors(t, db.Pool, "pgflow._emit_envelopes(text[], uuid[], text[], text[], text[], jsonb[])")
	require.Contains(t, granted, emitter)
	require.NotContains(t, granted, bystander)
}

// Upgrading to v0.20.0 gives the roles that could start ready steps (execute on _start_ready_steps_batch: whoever
// starts runs or completes tasks) pgflow._send_step_tasks, which it, start_flows and complete_tasks now call, and
// nobody else.
func TestUpgradeToV020GrantsSendStepTasksToStepStarters(t *testing.T) {
	t.Parallel()
	db := newAt(t, "v0.19.0")
	starter, bystander := newRole(t, db.URL), newRole(t, db.URL)
	fx.Exec(t, db.Pool, fmt.Sprintf(`grant execute on function pgflow._start_ready_steps_batch(uuid[], uuid[], text[]) to %s`, starter))

	_, err := db.upTo(t, "v0.20.0")
	require.NoError(t, err)

	granted := executors(t, db.Pool, "pgflow._send_step_tasks(uuid[], text[], text[], text[], integer[], integer[])")
	require.Contains(t, granted, starter)
	require.NotContains(t, granted, bystander)
}
