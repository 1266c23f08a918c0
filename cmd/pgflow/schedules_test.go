package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

func TestSchedulesListPauseResume(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	require.Contains(t, mustCLI(t, "--database-url", db.URL, "schedules", "list"), "no schedules")

	compileFlow(t, db.Pool, squaresFlow("squares"))
	_, err := db.Pool.Exec(context.Background(), `
		select pgflow.upsert_schedule('nightly', 'squares', '30 2 * * *', 'Europe/Berlin', '[1, 2]',
		  since => '2026-01-01T00:00:00Z', next_tick => '2026-01-01T01:30:00Z');
		select pgflow.upsert_schedule('backfill', 'squares', '@hourly', 'UTC', '[3]', missed => 'catch_up',
		  max_catch_up => 5, since => '2026-01-01T00:00:00Z')`)
	require.NoError(t, err)

	out := mustCLI(t, "--database-url", db.URL, "schedules", "list")
	require.Contains(t, out, "SCHEDULE")
	require.Regexp(t, `backfill\s+squares\s+@hourly\s+UTC\s+catch_up/5\s+no\s+2026-01-01 00:00:00Z\s+-\s+-`, out)
	require.Regexp(t, `nightly\s+squares\s+30 2 \* \* \*\s+Europe/Berlin\s+skip\s+no\s+2026-01-01 00:00:00Z\s+2026-01-01 01:30:00Z\s+-`, out)

	docs := decodeJSON[[]scheduleJSON](t, mustCLI(t, "--database-url", db.URL, "schedules", "list", "--json"))
	require.Len(t, docs, 2)
	require.Equal(t, "nightly", docs[1].Name)
	require.JSONEq(t, `[1, 2]`, string(docs[1].Input))
	require.Equal(t, "skip", docs[1].Missed)
	require.Nil(t, docs[1].LastRunID)

	out = mustCLI(t, "--database-url", db.URL, "schedules", "pause", "nightly")
	require.Contains(t, out, "paused schedule nightly")
	require.Regexp(t, `nightly\s+.*since \d{4}-\d\d-\d\d .*paused`, out)
	doc := decodeJSON[scheduleJSON](t, mustCLI(t, "--database-url", db.URL, "schedules", "pause", "nightly", "--json"))
	require.True(t, doc.Paused)
	require.NotNil(t, doc.PausedAt)

	doc = decodeJSON[scheduleJSON](t, mustCLI(t, "--database-url", db.URL, "schedules", "resume", "nightly", "--json"))
	require.False(t, doc.Paused)
	require.Nil(t, doc.PausedAt)
	require.Nil(t, doc.NextTick, "unknown until a worker computes it")
	require.False(t, doc.LastTick.Before(doc.UpdatedAt), "the horizon moved to the resume")

	for _, verb := range []string{"pause", "resume"} {
		r := runCLI(t, "", "--database-url", db.URL, "schedules", verb, "nope")
		require.EqualError(t, r.err, `schedule "nope" does not exist (pgflow schedules list shows them)`)
	}
	r := runCLI(t, "", "--database-url", db.URL, "schedules", "pause")
	require.Error(t, r.err)
}
