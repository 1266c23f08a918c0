package pgflowtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// runsPage is how many runs StartedRuns lists per query.
const runsPage = 500

// StartedRuns returns every run of the flow named flowSlug in db, whatever its status now (a run may have
// finished, or completed at its start), with its input and step states, oldest first (by start time, then run
// id; runs started in one transaction share their start time). Use it to assert on runs the code under test
// started; RequireRunStarted covers the common case. A flow that is not in the database has no runs.
func StartedRuns(ctx context.Context, db DB, flowSlug string) ([]*pgflow.Run, error) {
	if db == nil {
		return nil, fmt.Errorf("pgflowtest: StartedRuns of flow %q: the database is nil", flowSlug)
	}
	if flowSlug == "" {
		return nil, errors.New("pgflowtest: StartedRuns: the flow slug is empty")
	}
	var runs []*pgflow.Run
	for offset := 0; ; offset += runsPage {
		page, _, err := sqlapi.ListRuns(ctx, db, sqlapi.ListRunsParams{Flow: flowSlug, Limit: runsPage, Offset: offset})
		if err != nil {
			return nil, fmt.Errorf("pgflowtest: StartedRuns of flow %q: %w", flowSlug, err)
		}
		for _, s := range page {
			r, err := getRun(ctx, db, s.RunID)
			if err != nil {
				return nil, fmt.Errorf("pgflowtest: StartedRuns of flow %q: %w", flowSlug, err)
			}
			runs = append(runs, pgflow.EngineRun(r))
		}
		if len(page) < runsPage {
			break
		}
	}
	slices.SortStableFunc(runs, func(a, b *pgflow.Run) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return runs, nil
}

// RequireRunStarted asserts that exactly one run of flow was started in db with an input equal to want (compared
// as JSON values, so key order and number formatting do not matter) and returns it. Otherwise it fails the test
// with t.Fatalf, listing the runs of the flow and their inputs — no run with that input, or several (a double
// start). Use it in tests of code that starts runs (pgflow.StartRun, StartRunTx, StartRuns); DriveRun then runs
// the run when the test wants its outcome too.
func RequireRunStarted[I any](ctx context.Context, t testing.TB, db DB, flow *pgflow.Flow[I], want I) *pgflow.Run {
	t.Helper()
	if flow == nil {
		t.Fatalf("pgflowtest: RequireRunStarted: the flow is nil")
		return nil
	}
	wantRaw, err := json.Marshal(want)
	if err != nil {
		t.Fatalf("pgflowtest: RequireRunStarted of flow %q: encode the wanted input %T: %v", flow.Slug(), want, err)
		return nil
	}
	runs, err := StartedRuns(ctx, db, flow.Slug())
	if err != nil {
		t.Fatalf("pgflowtest: RequireRunStarted: %v", err)
		return nil
	}
	var matches []*pgflow.Run
	for _, r := range runs {
		if jsonEqual(r.Input, wantRaw) {
			matches = append(matches, r)
		}
	}
	switch len(matches) {
	case 1:
		return matches[0]
	case 0:
		t.Fatalf("pgflowtest: no run of flow %q was started with input %s; %s", flow.Slug(), wantRaw, describeRuns(runs))
	default:
		t.Fatalf("pgflowtest: %d runs of flow %q were started with input %s, want exactly one; %s",
			len(matches), flow.Slug(), wantRaw, describeRuns(runs))
	}
	return nil
}

// RequireNoRunStarted asserts that no run of the flow named flowSlug was started in db; otherwise it fails the
// test with t.Fatalf, listing the runs and their inputs.
func RequireNoRunStarted(ctx context.Context, t testing.TB, db DB, flowSlug string) {
	t.Helper()
	runs, err := StartedRuns(ctx, db, flowSlug)
	if err != nil {
		t.Fatalf("pgflowtest: RequireNoRunStarted: %v", err)
		return
	}
	if len(runs) > 0 {
		t.Fatalf("pgflowtest: want no run of flow %q, but %s", flowSlug, describeRuns(runs))
	}
}

// maxListedRuns bounds the runs a failure message lists.
const maxListedRuns = 10

func describeRuns(runs []*pgflow.Run) string {
	if len(runs) == 0 {
		return "no run of it was started"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d runs of it were started:", len(runs))
	for i, r := range runs {
		if i == maxListedRuns {
			fmt.Fprintf(&b, "\n  ... and %d more", len(runs)-maxListedRuns)
			break
		}
		fmt.Fprintf(&b, "\n  run %s (%s), input %s", r.ID, r.Status, compactJSON(r.Input))
	}
	return b.String()
}

// jsonEqual reports whether a and b are the same JSON value (objects compared by key, numbers by value).
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	const limit = 300
	if b.Len() > limit {
		return strings.ToValidUTF8(b.String()[:limit], "") + "…"
	}
	return b.String()
}
