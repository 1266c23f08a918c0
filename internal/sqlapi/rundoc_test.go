package sqlapi

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// Documents as pgflow.get_run_with_states renders them (jsonb's text), and shapes around them.
var runDocs = []string{
	// A one-step run just started.
	`{"run": {"input": {"n": 1}, "output": null, "run_id": "01a240d9-2a8a-767b-a0f0-a02698b5e4b9", "status": "started", "retry_of": null, "failed_at": null, "flow_slug": "bench_latency", "started_at": "2026-12-04T11:38:23.730513+00:00", "cancelled_at": null, "completed_at": null, "cancel_reason": null, "remaining_steps": 1}, "steps": [{"output": null, "run_id": "01a240d9-2a8a-767b-a0f0-a02698b5e4b9", "status": "started", "failed_at": null, "flow_slug": "bench_latency", "step_slug": "work", "created_at": "2026-12-04T11:38:23.730513+00:00", "skipped_at": null, "started_at": "2026-12-04T11:38:23.730513+00:00", "skip_reason": null, "completed_at": null, "error_message": null, "initial_tasks": 1, "remaining_deps": 0, "remaining_tasks": 1}]}`,
	// Finished, failed, skipped and cancelled fields; escapes; nested outputs; another time zone.
	`{"run": {"input": [1, "a\"b", {"k": [true, false, null, -1.5e3]}], "output": {"x": {"y": "\u00e9\n"}}, "run_id": "r", "status": "cancelled", "retry_of": "01a240d9-2a8a-767b-a0f0-a02698b5e4b9", "failed_at": "2026-12-04T11:38:23+02:00", "flow_slug": "f", "started_at": "2026-12-04T11:38:23.1Z", "cancelled_at": "2026-12-04T11:38:24.000001+00:00", "completed_at": null, "cancel_reason": "operator said \"stop\"\tnow", "remaining_steps": 0}, "steps": [{"output": "done", "run_id": "r", "status": "completed", "failed_at": null, "flow_slug": "f", "step_slug": "a", "created_at": "2026-12-04T11:38:23.730513+00:00", "skipped_at": null, "started_at": null, "skip_reason": null, "completed_at": "2026-12-04T11:38:23.730513+00:00", "error_message": null, "initial_tasks": null, "remaining_deps": 0, "remaining_tasks": null}, {"output": null, "run_id": "r", "status": "skipped", "failed_at": null, "flow_slug": "f", "step_slug": "b", "created_at": "2026-12-04T11:38:23.730513+00:00", "skipped_at": "2026-12-04T11:38:23.730513+00:00", "started_at": null, "skip_reason": "condition_unmet", "completed_at": null, "error_message": "boom \\ \ud83d\ude00", "initial_tasks": 0, "remaining_deps": 2, "remaining_tasks": 0}]}`,
	// No steps, and null steps.
	`{"run": {"input": null, "output": null, "run_id": "r", "status": "completed", "flow_slug": "f", "started_at": "2026-12-04T11:38:23Z", "remaining_steps": 0}, "steps": []}`,
	`{"run": {"run_id": "r", "started_at": "2026-12-04T11:38:23Z"}, "steps": null}`,
	// Shapes the reader leaves to encoding/json: unknown and differently cased keys, wrong types, bad numbers,
	// trailing data, a top-level null, broken JSON.
	`{"run": {"run_id": "r", "extra": 1}, "steps": []}`,
	`{"RUN": {"Run_ID": "r"}, "steps": []}`,
	`{"run": {"remaining_steps": "1"}, "steps": []}`,
	`{"run": {"remaining_steps": 01}, "steps": []}`,
	`{"run": {"remaining_steps": 1.5}, "steps": []}`,
	`{"run": {"input": 1-2}, "steps": []}`,
	`{"run": {"started_at": "yesterday"}, "steps": []}`,
	`{"run": {}, "steps": []} x`,
	`null`,
	`{"run": {"status": "a`,
	"{\"run\": {\"status\": \"\xff\"}, \"steps\": []}",
}

// The reader gives what encoding/json gives, or leaves the document to it: decodeRunWithStates is the same
// function with or without the reader.
func TestRunDocMatchesEncodingJSON(t *testing.T) {
	read := 0
	for _, doc := range runDocs {
		checkRunDoc(t, []byte(doc))
		if _, ok := readRunDoc([]byte(doc)); ok {
			read++
		}
	}
	require.Equal(t, 4, read, "the four documents of get_run_with_states' shape are read without encoding/json")
}

func FuzzRunDoc(f *testing.F) {
	for _, doc := range runDocs {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) { checkRunDoc(t, doc) })
}

func checkRunDoc(t *testing.T, doc []byte) {
	t.Helper()
	var want RunWithStates
	wantErr := json.Unmarshal(doc, &want)
	got, ok := readRunDoc(doc)
	if ok {
		require.NoError(t, wantErr, "the reader accepted what encoding/json refuses: %q", doc)
		require.Equal(t, &want, got, "%q", doc)
	}
	decoded, err := decodeRunWithStates(doc)
	if wantErr != nil {
		require.Error(t, err, "%q", doc)
		return
	}
	require.NoError(t, err, "%q", doc)
	require.Equal(t, &want, decoded, "%q", doc)
}

// The document of a one-step run just started, as the client decodes it on every start, against encoding/json.
func BenchmarkDecodeRunWithStates(b *testing.B) {
	doc := []byte(runDocs[0])
	b.Run("reader", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeRunWithStates(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r RunWithStates
			if err := json.Unmarshal(doc, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The documents PostgreSQL renders for runs in several states take the reader's path (a column added to runs or
// step_states would send them all to encoding/json, unnoticed but slower), and read as encoding/json reads them.
func TestRunDocReadsWhatTheDatabaseRenders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	ClientFlows(t, db.Pool)
	start := func(flow, input string) string {
		r, err := StartFlowWithStates(ctx, db.Pool, flow, json.RawMessage(input), "")
		require.NoError(t, err)
		return r.Run.RunID
	}
	ids := []string{
		start("chain", `{"s": "quote \" backslash \\ newline \n tab \t é 😀 \u001f", "n": [1.5e3, -0, true, null, {}]}`),
		start("rootmap", `[]`), // completed at its start
		start("rootmap", `[1, 2, 3]`),
	}
	cancelled := start("chain", `null`)
	_, err := CancelRun(ctx, db.Pool, cancelled, "operator said \"stop\"\nnow \\ é")
	require.NoError(t, err)
	ids = append(ids, cancelled)

	for _, id := range ids {
		var raw []byte
		require.NoError(t, db.Pool.QueryRow(ctx, getRunWithStatesSQL, id).Scan(&raw))
		_, ok := readRunDoc(raw)
		require.True(t, ok, "the reader reads %s", raw)
		checkRunDoc(t, raw)
	}
}
