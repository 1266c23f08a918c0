package sqlapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// This file holds the SQL the client sends: starting runs and reading a run with its step states. Both go
// through the SECURITY DEFINER functions pgflow.start_flow_with_states and pgflow.get_run_with_states, so a role
// that was granted only those two functions (the documented client grants) can use the client.

// RunRow is a pgflow.runs row as pgflow.get_run_with_states renders it (keys are the column names).
type RunRow struct {
	RunID          string          `json:"run_id"`
	FlowSlug       string          `json:"flow_slug"`
	Status         string          `json:"status"`
	Input          json.RawMessage `json:"input"`
	Output         json.RawMessage `json:"output"`
	RemainingSteps int             `json:"remaining_steps"`
	StartedAt      time.Time       `json:"started_at"`
	CompletedAt    *time.Time      `json:"completed_at"`
	FailedAt       *time.Time      `json:"failed_at"`
}

// StepStateRow is a pgflow.step_states row as pgflow.get_run_with_states renders it.
type StepStateRow struct {
	FlowSlug       string          `json:"flow_slug"`
	RunID          string          `json:"run_id"`
	StepSlug       string          `json:"step_slug"`
	Status         string          `json:"status"`
	RemainingTasks *int            `json:"remaining_tasks"`
	RemainingDeps  int             `json:"remaining_deps"`
	InitialTasks   *int            `json:"initial_tasks"`
	Output         json.RawMessage `json:"output"`
	ErrorMessage   *string         `json:"error_message"`
	SkipReason     *string         `json:"skip_reason"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at"`
	CompletedAt    *time.Time      `json:"completed_at"`
	FailedAt       *time.Time      `json:"failed_at"`
	SkippedAt      *time.Time      `json:"skipped_at"`
}

// RunWithStates is one consistent read of a run and its step states, steps in step_index order.
//
// JSON null and SQL NULL both render as null in the function's jsonb, so an Output that reads "null" may be
// either; the status tells whether an output exists (only completed runs and steps have one).
type RunWithStates struct {
	Run   RunRow         `json:"run"`
	Steps []StepStateRow `json:"steps"`
}

const startFlowWithStatesSQL = `select pgflow.start_flow_with_states(flow_slug => $1::text, input => $2::jsonb, run_id => $3::uuid)`

// StartFlowWithStates starts a run of flowSlug with input (a JSON document; nil means SQL NULL) and returns the
// run as it is at the end of the start. runID "" lets the database choose a random id. Errors are the database's:
// use IsUnknownFlow, IsDuplicateRun and IsInvalidRunID to classify them.
func StartFlowWithStates(ctx context.Context, db DBTX, flowSlug string, input json.RawMessage, runID string) (*RunWithStates, error) {
	var id any
	if runID != "" {
		id = runID
	}
	var in any
	if input != nil {
		in = string(input)
	}
	var raw []byte
	if err := db.QueryRow(ctx, startFlowWithStatesSQL, flowSlug, in, id).Scan(&raw); err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, fmt.Errorf("pgflow.start_flow_with_states(%q) returned NULL", flowSlug)
	}
	return decodeRunWithStates(raw)
}

const getRunWithStatesSQL = `select pgflow.get_run_with_states(run_id => $1::uuid)`

// GetRunWithStates reads a run and its step states in one statement. It returns nil, nil for an unknown run id.
func GetRunWithStates(ctx context.Context, db DBTX, runID string) (*RunWithStates, error) {
	var raw []byte
	if err := db.QueryRow(ctx, getRunWithStatesSQL, runID).Scan(&raw); err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, nil
	}
	return decodeRunWithStates(raw)
}

func decodeRunWithStates(raw []byte) (*RunWithStates, error) {
	var r RunWithStates
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("decode run with states: %w", err)
	}
	return &r, nil
}

// IsUnknownFlow reports whether err is the foreign-key violation start_flow raises for a flow slug that is not
// in pgflow.flows.
func IsUnknownFlow(err error) bool {
	return constraintViolation(err, "23503", "runs_flow_slug_fkey")
}

// IsDuplicateRun reports whether err is the unique violation start_flow raises for a run id that already exists.
func IsDuplicateRun(err error) bool {
	return constraintViolation(err, "23505", "runs_pkey")
}

// IsInvalidRunID reports whether err is PostgreSQL rejecting a run id that is not a UUID.
func IsInvalidRunID(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22P02"
}

func constraintViolation(err error, code, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code && pgErr.ConstraintName == constraint
}
