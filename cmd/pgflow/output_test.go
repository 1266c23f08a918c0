package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

func TestReadInput(t *testing.T) {
	t.Parallel()
	raw, err := readInput(`{"a": [1, 2]}`, nil)
	require.NoError(t, err)
	require.JSONEq(t, `{"a": [1, 2]}`, string(raw))

	raw, err = readInput("-", strings.NewReader(" 0 \n"))
	require.NoError(t, err)
	require.JSONEq(t, `0`, string(raw))

	_, err = readInput("-", strings.NewReader("{"))
	require.ErrorContains(t, err, "--input - (standard input) is not valid JSON: unexpected end of JSON input")

	_, err = readInput("nope", nil)
	require.ErrorContains(t, err, "--input is not valid JSON: invalid character 'o' in literal null (expecting 'u') (at byte 2)")

	_, err = readInput(`{"a": 1} {"b": 2}`, nil)
	require.ErrorContains(t, err, "--input is not valid JSON")
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		-time.Second:                          "0ms",
		850 * time.Millisecond:                "850ms",
		1250 * time.Millisecond:               "1.25s",
		125 * time.Second:                     "2m05s",
		3*time.Hour + 4*time.Minute:           "3h04m",
		53 * time.Hour:                        "2d05h",
		47*time.Hour + 59*time.Minute:         "47h59m",
		59*time.Second + 994*time.Millisecond: "59.99s",
	} {
		require.Equal(t, want, formatDuration(d), d.String())
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a b c", oneLine("a\n  b\tc", 10))
	require.Equal(t, "abcd…", oneLine("abcdefgh", 5))
	require.Equal(t, "äöüß…", oneLine("äöüßäöüß", 5))
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	older, newer := "older", "newer"
	at := t0.Add(time.Minute)
	s := summarize([]sqlapi.TaskRow{
		{Status: "completed", AttemptsCount: 1, QueuedAt: t0},
		{Status: "queued", AttemptsCount: 2, ErrorMessage: &older, QueuedAt: t0},
		{Status: "failed", AttemptsCount: 3, ErrorMessage: &newer, QueuedAt: t0, FailedAt: &at},
		{Status: "started", AttemptsCount: 1, QueuedAt: t0},
	})
	require.Equal(t, taskSummaryJSON{Total: 4, Queued: 1, Started: 1, Completed: 1, Failed: 1, AttemptsTotal: 7,
		AttemptsMax: 3, LastError: &newer}, s)
	require.Equal(t, taskSummaryJSON{}, summarize(nil))
}

// progressRun builds a run snapshot of a flow with a map step "each" over its input and a step "last".
func progressRun(status pgflow.RunStatus, each, last pgflow.StepState) *pgflow.Run {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	each.StepSlug, last.StepSlug = "each", "last"
	r := &pgflow.Run{ID: "0f8fad5b-d9cb-469f-a165-70867728950e", FlowSlug: "demo", Status: status, StartedAt: t0,
		Steps: []pgflow.StepState{each, last}}
	if status == pgflow.RunCompleted {
		end := t0.Add(1500 * time.Millisecond)
		r.CompletedAt = &end
		r.Output = json.RawMessage(`{"last":0}`)
	}
	return r
}

func intp(n int) *int { return &n }

func TestProgressViewPlain(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	v := newProgressView(&out, false, map[string]string{"each": "map", "last": "single"})
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	started := t0.Add(10 * time.Millisecond)
	done := t0.Add(1010 * time.Millisecond)

	v.update(progressRun(pgflow.RunStarted,
		pgflow.StepState{Status: pgflow.StepStarted, InitialTasks: intp(3), RemainingTasks: intp(3), StartedAt: &started},
		pgflow.StepState{Status: pgflow.StepCreated, RemainingDeps: 1}))
	// The same snapshot again prints nothing.
	v.update(progressRun(pgflow.RunStarted,
		pgflow.StepState{Status: pgflow.StepStarted, InitialTasks: intp(3), RemainingTasks: intp(3), StartedAt: &started},
		pgflow.StepState{Status: pgflow.StepCreated, RemainingDeps: 1}))
	v.update(progressRun(pgflow.RunStarted,
		pgflow.StepState{Status: pgflow.StepStarted, InitialTasks: intp(3), RemainingTasks: intp(1), StartedAt: &started},
		pgflow.StepState{Status: pgflow.StepCreated, RemainingDeps: 1}))
	v.tick() // nothing on the plain view
	final := progressRun(pgflow.RunCompleted,
		pgflow.StepState{Status: pgflow.StepCompleted, InitialTasks: intp(3), RemainingTasks: intp(0), StartedAt: &started, CompletedAt: &done},
		pgflow.StepState{Status: pgflow.StepSkipped, SkipReason: "condition_unmet"})
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
	v := newProgressView(&out, false, nil)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	failedAt := t0.Add(2 * time.Second)
	run := progressRun(pgflow.RunFailed,
		pgflow.StepState{Status: pgflow.StepFailed, StartedAt: &t0, FailedAt: &failedAt, ErrorMessage: "line one\nline two"},
		pgflow.StepState{Status: pgflow.StepCreated, RemainingDeps: 1})
	run.FailedAt = &failedAt
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
	v := newProgressView(&out, true, map[string]string{"each": "map"})
	t0 := time.Now().Add(-time.Second)
	v.update(progressRun(pgflow.RunStarted,
		pgflow.StepState{Status: pgflow.StepStarted, InitialTasks: intp(4), RemainingTasks: intp(1), StartedAt: &t0},
		pgflow.StepState{Status: pgflow.StepCreated, RemainingDeps: 1}))
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
	v := newProgressView(&out, true, nil)
	v.update(progressRun(pgflow.RunStarted, pgflow.StepState{Status: pgflow.StepCreated}, pgflow.StepState{Status: pgflow.StepCreated}))
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
	types := map[string]string{"each": "map", "last": "single"}

	// Two reads: nothing has started, then everything is done.
	var out bytes.Buffer
	v := newProgressView(&out, false, types)
	v.update(progressRun(pgflow.RunStarted,
		pgflow.StepState{Status: pgflow.StepCreated},
		pgflow.StepState{Status: pgflow.StepCreated, RemainingDeps: 1}))
	final := progressRun(pgflow.RunCompleted,
		pgflow.StepState{Status: pgflow.StepCompleted, InitialTasks: intp(4), RemainingTasks: intp(0), StartedAt: &started, CompletedAt: &done},
		pgflow.StepState{Status: pgflow.StepCompleted, StartedAt: &lastStart, CompletedAt: &lastDone})
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
	v = newProgressView(&out, false, types)
	v.update(progressRun(pgflow.RunStarted,
		pgflow.StepState{Status: pgflow.StepStarted, InitialTasks: intp(4), RemainingTasks: intp(1), StartedAt: &started},
		pgflow.StepState{Status: pgflow.StepCreated, RemainingDeps: 1}))
	v.update(progressRun(pgflow.RunStarted,
		pgflow.StepState{Status: pgflow.StepStarted, InitialTasks: intp(4), RemainingTasks: intp(2), StartedAt: &started},
		pgflow.StepState{Status: pgflow.StepCreated, RemainingDeps: 1}))
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
	v = newProgressView(&out, false, types)
	v.update(progressRun(pgflow.RunCompleted,
		pgflow.StepState{Status: pgflow.StepCompleted, InitialTasks: intp(0), RemainingTasks: intp(0), StartedAt: &started, CompletedAt: &done},
		pgflow.StepState{Status: pgflow.StepSkipped, SkipReason: "condition_unmet"}))
	require.Equal(t, `run 0f8fad5b-d9cb-469f-a165-70867728950e of flow demo: completed
  each started (0 tasks)
  each completed in 500ms
  last skipped (condition_unmet)
`, out.String())
}

func TestInputPreview(t *testing.T) {
	t.Parallel()
	const id = "0f8fad5b-d9cb-469f-a165-70867728950e"
	require.Equal(t, `{"a":[1,2],"b":"x  y"}`, inputPreview(id, json.RawMessage("{\"a\": [1,\n 2], \"b\": \"x  y\"}")))
	require.Equal(t, "null", inputPreview(id, nil))
	long := json.RawMessage(`["` + strings.Repeat("ä", 300) + `"]`)
	got := inputPreview(id, long)
	require.True(t, strings.HasPrefix(got, `["`+strings.Repeat("ä", inputPreviewChars-2)+"… (truncated: the input has 604 bytes; "), got)
	require.True(t, strings.HasSuffix(got, "'pgflow runs show "+id+" --json' prints it whole)"), got)
	// Exactly the limit is not cut.
	exact := json.RawMessage(`"` + strings.Repeat("x", inputPreviewChars-2) + `"`)
	require.Equal(t, string(exact), inputPreview(id, exact))
}
