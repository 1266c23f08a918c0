package pgflow

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

func TestClientListRuns(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db)
	ctx := clCtx(t)

	// Five runs of chain, started one second apart (start times set explicitly: the order is the test's), and
	// one failed run of fragile.
	var chain []string
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 5 {
		r, err := c.StartRunJSON(ctx, "chain", json.RawMessage(`{}`), nil)
		require.NoError(t, err)
		clExec(t, db.Pool, `update pgflow.runs set started_at = '`+base.Add(time.Duration(i)*time.Second).Format(time.RFC3339)+`' where run_id = '`+r.ID+`'`)
		chain = append([]string{r.ID}, chain...) // newest first
	}
	failed, err := c.StartRunJSON(ctx, "fragile", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	clProcess(t, db.Pool, "fragile", func(clTask) (string, error) { return "", errors.New("boom") })

	all, err := c.ListRuns(ctx, nil)
	require.NoError(t, err)
	require.Len(t, all.Runs, 6)
	require.Empty(t, all.NextCursor, "one page holds them all")
	require.Equal(t, failed.ID, all.Runs[0].ID, "newest first")
	require.Equal(t, RunFailed, all.Runs[0].Status)
	require.Equal(t, "boom", all.Runs[0].Error)

	// Pages of two walk the chain runs in order, each exactly once, and stay stable when a run starts meanwhile.
	var seen []string
	opts := &ListRunsOpts{Flow: "chain", Limit: 2}
	for page := 0; ; page++ {
		l, err := c.ListRuns(ctx, opts)
		require.NoError(t, err)
		for _, r := range l.Runs {
			seen = append(seen, r.ID)
		}
		if page == 0 {
			_, err := c.StartRunJSON(ctx, "chain", json.RawMessage(`{}`), nil) // newer than every listed run
			require.NoError(t, err)
		}
		if l.NextCursor == "" {
			break
		}
		opts.Cursor = l.NextCursor
	}
	require.Equal(t, chain, seen)

	started, err := c.ListRuns(ctx, &ListRunsOpts{Flow: "chain", StartedAfter: base.Add(2500 * time.Millisecond),
		StartedBefore: base.Add(time.Hour)})
	require.NoError(t, err)
	require.Len(t, started.Runs, 2, "the runs started at +3s and +4s")
	require.Equal(t, chain[:2], []string{started.Runs[0].ID, started.Runs[1].ID})

	onlyFailed, err := c.ListRuns(ctx, &ListRunsOpts{Status: RunFailed})
	require.NoError(t, err)
	require.Len(t, onlyFailed.Runs, 1)

	_, err = c.ListRuns(ctx, &ListRunsOpts{Cursor: "garbage!"})
	require.ErrorContains(t, err, `ListRunsOpts.Cursor = "garbage!": not a cursor returned by ListRuns`)
	_, err = c.ListRuns(ctx, &ListRunsOpts{Limit: 5000})
	require.ErrorContains(t, err, "ListRunsOpts.Limit = 5000")
	_, err = c.ListRuns(ctx, &ListRunsOpts{Status: "done"})
	require.ErrorContains(t, err, `ListRunsOpts.Status = "done"`)
}
