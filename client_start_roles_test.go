package pgflow_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// A role that may start runs only one at a time (start_flow_with_states, not start_flows_with_states) still starts
// every run: the client's first shared start is refused with a privilege error and rolled back, the call starts
// alone, the client says once that it starts one run per transaction from then on, and no run starts twice.
func TestClientStartsAloneWhenTheRoleMayNotStartSeveral(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	roles := loginRoles(t, "pgflow_one_by_one_starter")
	db := pgtest.New(t)
	_, err := db.Pool.Exec(ctx, `select pgflow.create_flow('alone'); select pgflow.add_step('alone', 'a');
		revoke execute on function pgflow.start_flows_with_states(text, jsonb[]) from public;
		grant usage on schema pgflow to pgflow_one_by_one_starter;
		grant execute on function pgflow.start_flow_with_states(text, jsonb, uuid), pgflow.get_run_with_states(uuid),
		  pgflow.schema_version() to pgflow_one_by_one_starter`)
	require.NoError(t, err)

	var logs testutil.SyncBuffer
	client := newClient(t, newPool(t, roleURL(t, db, roles["pgflow_one_by_one_starter"]), 4),
		&pgflow.ClientConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	var ids []string
	for i := range 3 {
		run, err := client.StartRunJSON(ctx, "alone", json.RawMessage(`{"i": `+strconv.Itoa(i)+`}`), nil)
		require.NoError(t, err)
		require.Equal(t, pgflow.RunStarted, run.Status)
		ids = append(ids, run.ID)
	}
	var runs int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs where flow_slug = 'alone'`).Scan(&runs))
	require.Equal(t, 3, runs, "each call started its run once: %v", ids)
	require.Equal(t, 1, strings.Count(logs.String(), "may not call pgflow.start_flows_with_states"), logs.String())
}
