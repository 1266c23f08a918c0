package pgflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-go/pgflow/internal/pgerr"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// StartRunsOpts are the options of one bulk start. A nil *StartRunsOpts means the defaults.
type StartRunsOpts struct {
	// RunIDs, when not empty, gives the id (a UUID) of each run, in the order of the inputs; it must have as many
	// ids as there are inputs. An id that already exists fails the whole call with the database's error (a bulk
	// start is not idempotent per run: use StartRun with StartOpts.RunID for that).
	RunIDs []string
}

// StartRuns starts one run of flow per input (each encoded with encoding/json) in one call: one transaction and
// one round trip (pgflow.start_flows). Every run starts exactly as StartRun starts it. It returns the run ids in
// the order of inputs. The call is atomic: on an error no run was started. Use it to start many runs at once; it
// is many times cheaper per run than StartRun.
func StartRuns[I any](ctx context.Context, c *Client, flow *Flow[I], inputs []I, opts *StartRunsOpts) ([]string, error) {
	raws, err := encodeStarts(flow, inputs)
	if err != nil {
		return nil, err
	}
	return c.StartRunsJSON(ctx, flow.Slug(), raws, opts)
}

// StartRunsTx is StartRuns inside the caller's transaction: the runs exist (and their first tasks can be picked
// up) only if it commits. A failed call is rolled back to a savepoint, so the transaction stays usable.
func StartRunsTx[I any](ctx context.Context, c *Client, tx pgx.Tx, flow *Flow[I], inputs []I, opts *StartRunsOpts) ([]string, error) {
	raws, err := encodeStarts(flow, inputs)
	if err != nil {
		return nil, err
	}
	return c.StartRunsJSONTx(ctx, tx, flow.Slug(), raws, opts)
}

func encodeStarts[I any](flow *Flow[I], inputs []I) ([]json.RawMessage, error) {
	if flow == nil {
		return nil, errors.New("pgflow: start runs: the flow is nil")
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
	return raws, nil
}

// StartRunsJSON starts one run of the flow named flowSlug per JSON input (nil or empty means JSON null) in one
// call; see StartRuns. Errors name the flow, and for an invalid input or run id its position (counting from 1).
func (c *Client) StartRunsJSON(ctx context.Context, flowSlug string, inputs []json.RawMessage, opts *StartRunsOpts) ([]string, error) {
	return c.startRuns(ctx, c.pool, nil, flowSlug, inputs, opts)
}

// StartRunsJSONTx is StartRunsJSON inside the caller's transaction (see StartRunsTx).
func (c *Client) StartRunsJSONTx(ctx context.Context, tx pgx.Tx, flowSlug string, inputs []json.RawMessage, opts *StartRunsOpts) ([]string, error) {
	if tx == nil {
		return nil, fmt.Errorf("pgflow: start runs of flow %q: the transaction is nil", flowSlug)
	}
	return c.startRuns(ctx, tx, tx, flowSlug, inputs, opts)
}

func (c *Client) startRuns(ctx context.Context, db sqlapi.DBTX, tx pgx.Tx, flowSlug string, inputs []json.RawMessage, opts *StartRunsOpts) ([]string, error) {
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
	var ids []string
	if opts != nil && len(opts.RunIDs) > 0 {
		if len(opts.RunIDs) != len(inputs) {
			return nil, fmt.Errorf("pgflow: start runs of flow %q: %d run ids for %d inputs", flowSlug, len(opts.RunIDs), len(inputs))
		}
		ids = make([]string, len(opts.RunIDs))
		for i, id := range opts.RunIDs {
			canon, err := canonicalRunID(id)
			if err != nil {
				return nil, fmt.Errorf("pgflow: start runs of flow %q: run id %d: %w", flowSlug, i+1, err)
			}
			ids[i] = canon
		}
	}
	if len(norm) == 0 {
		return nil, nil
	}
	if err := c.checkSchema(ctx, db); err != nil {
		return nil, fmt.Errorf("pgflow: start runs of flow %q: %w", flowSlug, err)
	}
	var runs []sqlapi.StartedRun
	var err error
	if tx == nil {
		// Outside a caller's transaction a few starts send their notifications after the commit (see startOnce);
		// a large batch commits rarely and keeps them in its transaction (sqlapi.DeferNotificationsBelow).
		var notes sqlapi.Notifications
		runs, notes, err = sqlapi.StartFlowsDeferred(ctx, c.pool, flowSlug, norm, ids)
		if err == nil {
			c.sendNotifications(ctx, notes)
		}
	} else {
		err = inSavepoint(ctx, db, tx, func(db sqlapi.DBTX) (err error) {
			runs, err = sqlapi.StartFlows(ctx, db, flowSlug, norm, ids)
			return err
		})
	}
	if err != nil {
		switch {
		case sqlapi.IsUnknownFlow(err):
			return nil, fmt.Errorf("pgflow: start runs of flow %q: %w (compile it first: Client.EnsureFlow, a worker, or its CompileSQL statements)", flowSlug, ErrFlowNotFound)
		case sqlapi.IsDuplicateRun(err):
			return nil, fmt.Errorf("pgflow: start runs of flow %q: a run id is taken: %w", flowSlug, errors.Join(ErrRunIDConflict, err))
		}
		if msg, ok := pgerr.Raised(err); ok {
			return nil, fmt.Errorf("pgflow: start runs of flow %q: %s: %w", flowSlug, msg, err)
		}
		return nil, fmt.Errorf("pgflow: start runs of flow %q: %w", flowSlug, err)
	}
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.RunID
	}
	return out, nil
}

// inSavepoint runs fn on db, or inside a savepoint of tx when tx is not nil, so that a failure does not abort
// the caller's transaction.
func inSavepoint(ctx context.Context, db sqlapi.DBTX, tx pgx.Tx, fn func(sqlapi.DBTX) error) error {
	if tx == nil {
		return fn(db)
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := fn(sp); err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rerr))
		}
		return err
	}
	if err := sp.Commit(ctx); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}

// EnsureFlowOpts are the options of Client.EnsureFlow. A nil *EnsureFlowOpts means the defaults.
type EnsureFlowOpts struct {
	// AllowDataLoss recompiles a flow whose stored definition differs from the code even in production, which
	// deletes the flow's runs, tasks and queue. Without it a difference is a *ShapeMismatchError, unless the
	// database is local (pgflow.is_local()).
	AllowDataLoss bool
}

// EnsureFlow compiles flow into the database when it is missing, verifies it when it exists, and recompiles it
// when it differs and that is allowed (see EnsureFlowOpts), exactly as a worker does at startup: so runs can be
// started before any worker ran. A difference that may not be recompiled returns a *ShapeMismatchError and changes
// nothing.
func (c *Client) EnsureFlow(ctx context.Context, flow AnyFlow, opts *EnsureFlowOpts) error {
	core := flowCoreOf(flow)
	if core == nil {
		return errors.New("pgflow: EnsureFlow: the flow is nil; create flows with NewFlow")
	}
	shape, err := flow.Shape()
	if err != nil {
		return fmt.Errorf("pgflow: ensure flow %q: %w", core.slug, err)
	}
	if err := c.checkSchema(ctx, c.pool); err != nil {
		return fmt.Errorf("pgflow: ensure flow %q: %w", core.slug, err)
	}
	res, err := sqlapi.EnsureFlowCompiled(ctx, c.pool, core.slug, shape,
		sqlapi.FlowDeployment{QueueMode: core.queueMode(), MessageRetention: core.messageRetention()},
		opts != nil && opts.AllowDataLoss)
	if err != nil {
		return fmt.Errorf("pgflow: ensure flow %q: %w", core.slug, err)
	}
	switch res.Status {
	case "compiled", "verified":
		return nil
	case "recompiled":
		c.log.Warn("flow definition changed: the flow was recompiled and its runs, tasks and queue were deleted",
			"flow", core.slug, "differences", strings.Join(res.Differences, "; "))
		return nil
	case "mismatch":
		return &ShapeMismatchError{Flow: core.slug, Differences: res.Differences}
	}
	return fmt.Errorf("pgflow: ensure flow %q: pgflow.ensure_flow_compiled returned the unknown status %q", core.slug, res.Status)
}
