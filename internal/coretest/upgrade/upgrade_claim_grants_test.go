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
		granted := fx.Val[[]string](t, db.Pool, `select coalesce(array_agg(a.grantee::regrole::text order by 1), '{}')
			from pg_proc as p cross join lateral aclexplode(p.proacl) as a
			where p.oid = $1::regprocedure and a.privilege_type = 'EXECUTE' and a.grantee <> p.proowner and a.grantee <> 0`, fn)
		require.Contains(t, granted, claimer, fn)
		require.NotContains(t, granted, bystander, fn)
	}
}
