package pgflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// StartRuns starts one run of flow per input (each encoded with encoding/json) in one call: one transaction and
// one round trip (pgflow.start_flows, schema v0.18.0). Every run starts exactly as StartRun starts it. It returns
// the new run ids in the order of inputs. The call is atomic: on an error no run was started. Use it to start
// many runs at once; it is many times cheaper per run than StartRun.
func StartRuns[I any](ctx context.Context, c *Client, flow *Flow[I], inputs []I) ([]string, error) {
	if flow == nil {
		return nil, errors.New("pgflow: StartRuns with a nil flow")
	}
	if err := flow.Err(); err != nil {
		return nil, fmt.Errorf("pgflow: start runs of flow %q: invalid definition: %w", flow.Slug(), err)
	}
	raws := make([]json.RawMessage, len(inputs))
	for i, in := range inputs {
		raw, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("pgflow: start runs of flow %q: encode input %d (%T): %w", flow.Slug(), i+1, in, err)
		}
		raws[i] = raw
	}
	return c.StartRunsJSON(ctx, flow.Slug(), raws)
}

// StartRunsJSON starts one run of the flow named flowSlug per JSON input (nil or empty means JSON null) in one
// call; see StartRuns. Errors name the flow, and for an invalid input its position (counting from 1).
func (c *Client) StartRunsJSON(ctx context.Context, flowSlug string, inputs []json.RawMessage) ([]string, error) {
	if flowSlug == "" {
		return nil, fmt.Errorf("pgflow: start runs: empty flow slug: %w", ErrFlowNotFound)
	}
	norm := make([]json.RawMessage, len(inputs))
	for i, in := range inputs {
		switch {
		case len(strings.TrimSpace(string(in))) == 0:
			norm[i] = json.RawMessage("null")
		case !json.Valid(in):
			return nil, fmt.Errorf("pgflow: start runs of flow %q: input %d is not valid JSON: %.100q", flowSlug, i+1, in)
		default:
			norm[i] = in
		}
	}
	if len(norm) == 0 {
		return nil, nil
	}
	runs, err := sqlapi.StartFlows(ctx, c.pool, flowSlug, norm, nil)
	if err != nil {
		var pgErr *pgconn.PgError
		switch {
		case sqlapi.IsUnknownFlow(err):
			return nil, fmt.Errorf("pgflow: start runs of flow %q: %w (compile it first: start a worker for it or run its CompileSQL statements)", flowSlug, ErrFlowNotFound)
		case errors.As(err, &pgErr) && pgErr.Code == "42883":
			return nil, fmt.Errorf("pgflow: start runs of flow %q: pgflow.start_flows is missing (schema before v0.18.0; run `pgflow migrate up`): %w", flowSlug, err)
		case errors.As(err, &pgErr) && pgErr.Code == "P0001":
			return nil, fmt.Errorf("pgflow: start runs of flow %q: %s: %w", flowSlug, pgErr.Message, err)
		}
		return nil, fmt.Errorf("pgflow: start runs of flow %q: %w", flowSlug, err)
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.RunID
	}
	return ids, nil
}
