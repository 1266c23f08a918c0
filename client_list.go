package pgflow

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// ListRunsOpts selects the runs Client.ListRuns returns. A nil *ListRunsOpts lists every run, newest first, 50 at
// a time.
type ListRunsOpts struct {
	Flow          string    // only runs of this flow; "" for all
	Status        RunStatus // only runs in this status; "" for all
	StartedAfter  time.Time // only runs started after this time; zero for no bound
	StartedBefore time.Time // only runs started before this time; zero for no bound
	Limit         int       // runs per page: 1 to 1000; 0 means 50
	Cursor        string    // RunList.NextCursor of the previous page; "" for the first page
}

// RunList is one page of runs.
type RunList struct {
	Runs []RunInfo
	// NextCursor continues the listing after the last run of this page (pass it as ListRunsOpts.Cursor); "" when
	// this page is the last.
	NextCursor string
}

// RunInfo is a run as a listing shows it: its state, without input or output (read those with GetRun).
type RunInfo struct {
	ID             string
	FlowSlug       string
	Status         RunStatus
	RemainingSteps int
	StepsTotal     int
	StepsDone      int // completed or skipped
	StartedAt      time.Time
	CompletedAt    *time.Time
	FailedAt       *time.Time
	CancelledAt    *time.Time // set for a cancelled run
	// RetryOf is the run this one re-ran (RetryRunOpts.Fresh); "" otherwise.
	RetryOf string
	// Error is the error of the run's first failed step (in step order), cut to 300 characters; "" otherwise.
	Error string
}

// ListRuns lists runs newest first (by start time, then id), filtered by opts, one page at a time: pass each
// page's NextCursor to get the next. Pages are stable under concurrent starts: a run started after the first page
// was read never shifts a later page.
func (c *Client) ListRuns(ctx context.Context, opts *ListRunsOpts) (*RunList, error) {
	if opts == nil {
		opts = &ListRunsOpts{}
	}
	p := sqlapi.ListRunsParams{Flow: opts.Flow, Status: string(opts.Status), Limit: opts.Limit, NoCount: true}
	switch {
	case opts.Limit < 0 || opts.Limit > 1000:
		return nil, fmt.Errorf("pgflow: list runs: ListRunsOpts.Limit = %d: must be between 1 and 1000 (0 means 50)", opts.Limit)
	case opts.Limit == 0:
		p.Limit = 50
	}
	switch opts.Status {
	case "", RunStarted, RunCompleted, RunFailed, RunCancelled:
	default:
		return nil, fmt.Errorf("pgflow: list runs: ListRunsOpts.Status = %q: must be %q, %q, %q or %q", opts.Status,
			RunStarted, RunCompleted, RunFailed, RunCancelled)
	}
	if !opts.StartedAfter.IsZero() {
		p.StartedAfter = &opts.StartedAfter
	}
	if !opts.StartedBefore.IsZero() {
		p.StartedBefore = &opts.StartedBefore
	}
	if opts.Cursor != "" {
		key, err := decodeCursor(opts.Cursor)
		if err != nil {
			return nil, fmt.Errorf("pgflow: list runs: ListRunsOpts.Cursor = %q: %w", opts.Cursor, err)
		}
		p.After = &key
	}
	if err := c.checkSchema(ctx, c.pool); err != nil {
		return nil, fmt.Errorf("pgflow: list runs: %w", err)
	}
	rows, _, err := sqlapi.ListRuns(ctx, c.pool, p)
	if err != nil {
		return nil, fmt.Errorf("pgflow: list runs: %w", err)
	}
	out := &RunList{Runs: make([]RunInfo, len(rows))}
	for i, r := range rows {
		out.Runs[i] = RunInfo{ID: r.RunID, FlowSlug: r.FlowSlug, Status: RunStatus(r.Status),
			RemainingSteps: r.RemainingSteps, StepsTotal: r.StepsTotal, StepsDone: r.StepsDone,
			StartedAt: r.StartedAt, CompletedAt: r.CompletedAt, FailedAt: r.FailedAt, CancelledAt: r.CancelledAt}
		if r.RetryOf != nil {
			out.Runs[i].RetryOf = *r.RetryOf
		}
		if r.ErrorMessage != nil {
			out.Runs[i].Error = *r.ErrorMessage
		}
	}
	if len(rows) == p.Limit {
		last := rows[len(rows)-1]
		out.NextCursor = encodeCursor(sqlapi.RunKey{StartedAt: last.StartedAt, RunID: last.RunID})
	}
	return out, nil
}

// A cursor is the last run's start time (Unix microseconds, the database's precision) and id, base64-encoded.
func encodeCursor(k sqlapi.RunKey) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d/%s", k.StartedAt.UnixMicro(), k.RunID))
}

func decodeCursor(s string) (sqlapi.RunKey, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return sqlapi.RunKey{}, errors.New("not a cursor returned by ListRuns")
	}
	at, id, ok := strings.Cut(string(raw), "/")
	micros, err := strconv.ParseInt(at, 10, 64)
	if err != nil || !ok {
		return sqlapi.RunKey{}, errors.New("not a cursor returned by ListRuns")
	}
	canon, err := canonicalRunID(id)
	if err != nil {
		return sqlapi.RunKey{}, errors.New("not a cursor returned by ListRuns")
	}
	return sqlapi.RunKey{StartedAt: time.UnixMicro(micros), RunID: canon}, nil
}
