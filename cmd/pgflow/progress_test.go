package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// progressRun builds a run snapshot of a flow with a map step "each" over its input and a step "last".
func progressRun(status string, each, last sqlapi.StepDetail) *sqlapi.RunDetail {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	each.StepSlug, last.StepSlug = "each", "last"
	each.Definition = sqlapi.StepDefinition{StepSlug: "each", StepType: "map", StepIndex: 0}
	last.Definition = sqlapi.StepDefinition{StepSlug: "last", StepType: "single", StepIndex: 1, Deps: []string{"each"}}
	r := &sqlapi.RunDetail{Run: sqlapi.RunRow{RunID: "0f8fad5b-d9cb-469f-a165-70867728950e", FlowSlug: "demo",
		Status: status, StartedAt: t0}, Steps: []sqlapi.StepDetail{each, last}}
	if status == "completed" {
		end := t0.Add(1500 * time.Millisecond)
		r.Run.CompletedAt = &end
		r.Run.Output = json.RawMessage(`{"last":0}`)
	}
	return r
}

// step is a step state for progressRun.
func step(s sqlapi.StepStateRow) sqlapi.StepDetail { return sqlapi.StepDetail{StepStateRow: s} }

func strp(s string) *string { return &s }

func intp(n int) *int { return &n }

func TestProgressViewPlain(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	v := newProgressView(&out, false)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	started := t0.Add(10 * time.Millisecond)
	done := t0.Add(1010 * time.Millisecond)

	v.update(progressRun("started",
		step(sqlapi.StepStateRow{Status: "started", InitialTasks: intp(3), RemainingTasks: intp(3), StartedAt: &started}),
		step(sqlapi.StepStateRow{Status: "created", RemainingDeps: 1})))
	// The same snapshot again prints nothing.
	v.update(progressRun("started",
		step(sqlapi.StepStateRow{Status: "started", InitialTasks: intp(3), RemainingTasks: intp(3), StartedAt: &started}),
		step(sqlapi.StepStateRow{Status: "created", RemainingDeps: 1})))
	v.update(progressRun("started",
		step(sqlapi.StepStateRow{Status: "started", InitialTasks: intp(3), RemainingTasks: intp(1), StartedAt: &started}),
		step(sqlapi.StepStateRow{Status: "created", RemainingDeps: 1})))
	v.tick() // nothing on the plain view
	final := progressRun("completed",
		step(sqlapi.StepStateRow{Status: "completed", InitialTasks: intp(3), RemainingTasks: intp(0), StartedAt: &started, CompletedAt: &done}),
		step(sqlapi.StepStateRow{Status: "skipped", SkipReason: strp("condition_unmet")}))
	v.update(final)
	v.finish(final)

	require.Equal(t, `run 0f8fad5b-d9cb-469f-a165-70867728950e of flow demo: started
  each started (3 tasks)
  each 2/3 tasks done
  each completed in 1.00s
  last skipped (condition_unmet)
run completed in 1.50s
output:
{
  "last": 0
}
`, out.String())
}

func TestProgressViewFailedRunPlain(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	v := newProgressView(&out, false)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	failedAt := t0.Add(2 * time.Second)
	run := progressRun("failed",
		step(sqlapi.StepStateRow{Status: "failed", StartedAt: &t0, FailedAt: &failedAt, ErrorMessage: strp("line one\nline two")}),
		step(sqlapi.StepStateRow{Status: "created", RemainingDeps: 1}))
	run.Run.FailedAt = &failedAt
	v.update(run)
	v.finish(run)
	require.Equal(t, `run 0f8fad5b-d9cb-469f-a165-70867728950e of flow demo: failed
  each started
  each failed: line one line two
run failed after 2.00s
step each failed: line one
line two
`, out.String())
}

func TestProgressViewANSIRedrawsInPlace(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	var out bytes.Buffer
	v := newProgressView(&out, true)
	t0 := time.Now().Add(-time.Second)
	v.update(progressRun("started",
		step(sqlapi.StepStateRow{Status: "started", InitialTasks: intp(4), RemainingTasks: intp(1), StartedAt: &t0}),
		step(sqlapi.StepStateRow{Status: "created", RemainingDeps: 1})))
	first := out.String()
	require.NotContains(t, first, "\x1b[3A", "the first drawing moves nothing up")
	require.Contains(t, first, "\x1b[2K")
	require.Contains(t, first, "each  started")
	require.Contains(t, first, "3/4 tasks")
	require.Contains(t, first, "last  created")
	require.Contains(t, first, "waiting for 1 dependency")
	require.Contains(t, first, ansiYellow)
	require.Equal(t, 3, strings.Count(first, "\n"))

	out.Reset()
	v.tick()
	require.True(t, strings.HasPrefix(out.String(), "\x1b[3A"), "a redraw starts by moving up over the block: %q", out.String())
	require.Equal(t, 3, strings.Count(out.String(), "\n"))
}

func TestProgressViewNoColor(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	var out bytes.Buffer
	v := newProgressView(&out, true)
	v.update(progressRun("started", step(sqlapi.StepStateRow{Status: "created"}), step(sqlapi.StepStateRow{Status: "created"})))
	require.Contains(t, out.String(), "\x1b[2K") // still redraws in place
	require.NotContains(t, out.String(), "\x1b[3")
	require.NotContains(t, out.String(), ansiReset)
}

// The plain view prints every transition, also when several happen between two reads of the run: a step that
// went from created to completed in between gets its "started" line before its "completed" line, and a map
// step first seen with tasks done still gets "started (N tasks)". (TestDemoWithDatabaseURL used to miss
// "price started (4 tasks)" whenever the worker was faster than the watcher.)
func TestProgressViewPlainPrintsEveryTransition(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	started, done := t0.Add(10*time.Millisecond), t0.Add(510*time.Millisecond)
	lastStart, lastDone := t0.Add(600*time.Millisecond), t0.Add(850*time.Millisecond)

	// Two reads: nothing has started, then everything is done.
	var out bytes.Buffer
	v := newProgressView(&out, false)
	v.update(progressRun("started",
		step(sqlapi.StepStateRow{Status: "created"}),
		step(sqlapi.StepStateRow{Status: "created", RemainingDeps: 1})))
	final := progressRun("completed",
		step(sqlapi.StepStateRow{Status: "completed", InitialTasks: intp(4), RemainingTasks: intp(0), StartedAt: &started, CompletedAt: &done}),
		step(sqlapi.StepStateRow{Status: "completed", StartedAt: &lastStart, CompletedAt: &lastDone}))
	v.update(final)
	v.update(final) // the same snapshot again prints nothing
	require.Equal(t, `run 0f8fad5b-d9cb-469f-a165-70867728950e of flow demo: started
  each started (4 tasks)
  each completed in 500ms
  last started
  last completed in 250ms
`, out.String())

	// First read in the middle of the map: its start is reported before its progress, and a later read with
	// fewer tasks done (cannot happen, but must not print backwards progress) prints nothing.
	out.Reset()
	v = newProgressView(&out, false)
	v.update(progressRun("started",
		step(sqlapi.StepStateRow{Status: "started", InitialTasks: intp(4), RemainingTasks: intp(1), StartedAt: &started}),
		step(sqlapi.StepStateRow{Status: "created", RemainingDeps: 1})))
	v.update(progressRun("started",
		step(sqlapi.StepStateRow{Status: "started", InitialTasks: intp(4), RemainingTasks: intp(2), StartedAt: &started}),
		step(sqlapi.StepStateRow{Status: "created", RemainingDeps: 1})))
	v.update(final)
	require.Equal(t, `run 0f8fad5b-d9cb-469f-a165-70867728950e of flow demo: started
  each started (4 tasks)
  each 3/4 tasks done
  each completed in 500ms
  last started
  last completed in 250ms
`, out.String())

	// The very first read already shows the end: every step's whole history is printed, in order. A step
	// skipped without starting gets only its skip line.
	out.Reset()
	v = newProgressView(&out, false)
	v.update(progressRun("completed",
		step(sqlapi.StepStateRow{Status: "completed", InitialTasks: intp(0), RemainingTasks: intp(0), StartedAt: &started, CompletedAt: &done}),
		step(sqlapi.StepStateRow{Status: "skipped", SkipReason: strp("condition_unmet")})))
	require.Equal(t, `run 0f8fad5b-d9cb-469f-a165-70867728950e of flow demo: completed
  each started (0 tasks)
  each completed in 500ms
  last skipped (condition_unmet)
`, out.String())
}
