package sqlapi

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartedRun is a run as pgflow.start_flows returns it.
type StartedRun struct {
	RunID     string
	Status    string
	StartedAt time.Time
}

// StartFlows starts one run of flowSlug per input with pgflow.start_flows (one transaction, one round trip) and
// returns the runs in input order. runIDs is nil for random ids, else one id per input ("" = random). A nil
// input is SQL NULL. The call is atomic: on any error no run was started.
func StartFlows(ctx context.Context, db DBTX, flowSlug string, inputs []json.RawMessage, runIDs []string) ([]StartedRun, error) {
	if len(inputs) == 0 {
		return nil, nil
	}
	ins := make([]*string, len(inputs))
	for i, in := range inputs {
		if in != nil {
			s := string(in)
			ins[i] = &s
		}
	}
	var ids any
	if runIDs != nil {
		arr := make([]*string, len(runIDs))
		for i := range runIDs {
			if runIDs[i] != "" {
				arr[i] = &runIDs[i]
			}
		}
		ids = arr
	}
	rows, err := db.Query(ctx,
		`select r.run_id::text, r.status, r.started_at
		   from pgflow.start_flows(flow_slug => $1::text, inputs => $2::jsonb[], run_ids => $3::uuid[]) as r`,
		flowSlug, ins, ids)
	if err != nil {
		return nil, fmt.Errorf("sqlapi: pgflow.start_flows(flow %q, %d runs): %w", flowSlug, len(inputs), err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[StartedRun])
	if err != nil {
		return nil, fmt.Errorf("sqlapi: pgflow.start_flows(flow %q, %d runs): %w", flowSlug, len(inputs), err)
	}
	return runs, nil
}
