package pgflowtest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// DB is the database handle the kit's database functions use: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx (a test's
// transaction, rolled back at its end). A *pgx.Conn or a pgx.Tx is used by one call at a time, as they require.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// isNil reports whether v is nil or a nil pointer in an interface (a nil *pgflow.Flow passed as pgflow.AnyFlow).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// newUUID returns a random (version 4) UUID in canonical text form.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// toRun converts the database's rendering of a run (pgflow.get_run_with_states) into a *pgflow.Run exactly as
// pgflow.Client.GetRun does (TestRunFlowReturnsTheRunAsClientGetRunReadsIt keeps them equal).
func toRun(r *sqlapi.RunWithStates) *pgflow.Run {
	run := &pgflow.Run{
		ID:             r.Run.RunID,
		FlowSlug:       r.Run.FlowSlug,
		Status:         pgflow.RunStatus(r.Run.Status),
		Input:          r.Run.Input,
		RemainingSteps: r.Run.RemainingSteps,
		StartedAt:      r.Run.StartedAt,
		CompletedAt:    r.Run.CompletedAt,
		FailedAt:       r.Run.FailedAt,
		Steps:          make([]pgflow.StepState, 0, len(r.Steps)),
	}
	if run.Status == pgflow.RunCompleted {
		run.Output = nullIfEmpty(r.Run.Output)
	}
	for _, s := range r.Steps {
		st := pgflow.StepState{
			StepSlug:       s.StepSlug,
			Status:         pgflow.StepStatus(s.Status),
			RemainingTasks: s.RemainingTasks,
			RemainingDeps:  s.RemainingDeps,
			InitialTasks:   s.InitialTasks,
			CreatedAt:      s.CreatedAt,
			StartedAt:      s.StartedAt,
			CompletedAt:    s.CompletedAt,
			FailedAt:       s.FailedAt,
			SkippedAt:      s.SkippedAt,
		}
		if st.Status == pgflow.StepCompleted {
			st.Output = nullIfEmpty(s.Output)
		}
		if s.ErrorMessage != nil {
			st.ErrorMessage = *s.ErrorMessage
		}
		if s.SkipReason != nil {
			st.SkipReason = *s.SkipReason
		}
		run.Steps = append(run.Steps, st)
	}
	return run
}

func nullIfEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// getRun reads one run; an unknown id is an error wrapping pgflow.ErrRunNotFound.
func getRun(ctx context.Context, db DB, runID string) (*sqlapi.RunWithStates, error) {
	r, err := sqlapi.GetRunWithStates(ctx, db, runID)
	switch {
	case err != nil && sqlapi.IsInvalidRunID(err):
		return nil, fmt.Errorf("run id %q: %w: %w", runID, pgflow.ErrInvalidRunID, err)
	case err != nil:
		return nil, fmt.Errorf("read run %s: %w", runID, err)
	case r == nil:
		return nil, fmt.Errorf("run %s: %w", runID, pgflow.ErrRunNotFound)
	}
	return r, nil
}
