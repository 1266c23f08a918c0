package upgrade_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// Upgrading to v0.20.0 replaces heartbeat_worker(uuid) by heartbeat_worker(uuid, listener_pid integer default null):
// a role that could heartbeat before still can, with one argument (pgflow's call) and with two; a role that could
// not (PUBLIC's right was revoked) gets nothing. Existing workers count as not listening until a heartbeat says they do.
func TestUpgradeToV020KeepsHeartbeatGrants(t *testing.T) {
	t.Parallel()
	db := newAt(t, "v0.19.0")
	ctx := fx.Ctx(t)
	const worker = "77777777-7777-4777-8777-777777777777"
	fx.Exec(t, db.Pool, `select pgflow.register_worker($1::uuid, 'q', 'ts-worker')`, worker)
	beater, bystander := newRole(t, db.URL), newRole(t, db.URL)
	fx.Exec(t, db.Pool, fmt.Sprintf(`grant usage on schema pgflow to %[1]s, %[2]s;
		grant select, update on pgflow.workers to %[1]s, %[2]s;
		revoke execute on function pgflow.heartbeat_worker(uuid) from public;
		grant execute on function pgflow.heartbeat_worker(uuid) to %[1]s`, beater, bystander))

	_, err := db.upTo(t, "v0.20.0")
	require.NoError(t, err)
	require.Nil(t, fx.Val[*string](t, db.Pool, `select listens_at::text from pgflow.workers where worker_id = $1::uuid`, worker),
		"an existing worker does not listen")

	as := connectAs(t, db.URL, beater)
	var deprecated bool
	require.NoError(t, as.QueryRow(ctx, `select pgflow.heartbeat_worker($1::uuid)`, worker).Scan(&deprecated))
	require.NoError(t, as.QueryRow(ctx, `select pgflow.heartbeat_worker(worker_id => $1::uuid)`, worker).Scan(&deprecated))
	require.NoError(t, as.QueryRow(ctx, `select pgflow.heartbeat_worker($1::uuid, listener_pid => pg_catalog.pg_backend_pid())`, worker).Scan(&deprecated))
	require.NotNil(t, fx.Val[*string](t, db.Pool, `select listens_at::text from pgflow.workers where worker_id = $1::uuid`, worker))

	other := connectAs(t, db.URL, bystander)
	_, err = other.Exec(ctx, `select pgflow.heartbeat_worker($1::uuid)`, worker)
	require.ErrorContains(t, err, "permission denied", "a role that could not heartbeat gets nothing")
}
