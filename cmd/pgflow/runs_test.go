package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/schema"
)

func TestRunsStartWithoutWorkerThenShow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	compileFlow(t, db.Pool, squaresFlow("squares"))

	// Without a worker the run stays started: the map has its tasks queued.
	out := mustCLI(t, "--database-url", db.URL, "runs", "start", "squares", "--input", "[1, 2, 3]", "--json")
	doc := decodeJSON[runJSON](t, out)
	require.NotEmpty(t, doc.RunID)
	require.Equal(t, "squares", doc.FlowSlug)
	require.Equal(t, "started", doc.Status)
	require.JSONEq(t, `[1, 2, 3]`, string(doc.Input))
	require.Equal(t, "null", string(doc.Output))
	require.Nil(t, doc.Error)
	require.Equal(t, 2, doc.RemainingSteps)
	require.Len(t, doc.Steps, 2)
	sq := doc.Steps[0]
	require.Equal(t, "square", sq.StepSlug)
	require.Equal(t, "map", sq.StepType)
	require.Equal(t, "started", sq.Status)
	require.Equal(t, 3, *sq.InitialTasks)
	require.Equal(t, taskSummaryJSON{Total: 3, Queued: 3}, sq.Tasks)
	require.Nil(t, sq.TaskList)
	sum := doc.Steps[1]
	require.Equal(t, "sum", sum.StepSlug)
	require.Equal(t, "single", sum.StepType)
	require.Equal(t, "created", sum.Status)
	require.Equal(t, 1, sum.RemainingDeps)

	// show --json --tasks: the same run, with every task and its message id as a string.
	out = mustCLI(t, "--database-url", db.URL, "runs", "show", doc.RunID, "--json", "--tasks")
	shown := decodeJSON[runJSON](t, out)
	require.Equal(t, doc.RunID, shown.RunID)
	require.Len(t, shown.Steps[0].TaskList, 3)
	require.Empty(t, shown.Steps[1].TaskList)
	for i, task := range shown.Steps[0].TaskList {
		require.Equal(t, i, task.TaskIndex)
		require.Equal(t, "queued", task.Status)
		require.NotNil(t, task.MessageID)
		require.Equal(t, "squares", *task.QueueName)
	}
	// IDs are JSON strings, and the field names are the documented ones.
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &raw))
	require.IsType(t, "", raw["run_id"])
	steps := raw["steps"].([]any)
	task0 := steps[0].(map[string]any)["task_list"].([]any)[0].(map[string]any)
	require.IsType(t, "", task0["message_id"])
	for _, key := range []string{"run_id", "flow_slug", "status", "input", "output", "error", "remaining_steps",
		"started_at", "completed_at", "failed_at", "steps"} {
		require.Contains(t, raw, key)
	}
	for _, key := range []string{"step_slug", "step_type", "status", "remaining_deps", "initial_tasks",
		"remaining_tasks", "tasks", "output", "error_message", "skip_reason", "created_at", "started_at",
		"completed_at", "failed_at", "skipped_at"} {
		require.Contains(t, steps[0], key)
	}

	// Text: a header and one line per step.
	out = mustCLI(t, "--database-url", db.URL, "runs", "show", doc.RunID)
	require.Contains(t, out, "Run       "+doc.RunID)
	require.Contains(t, out, "Flow      squares")
	require.Contains(t, out, "Status    started (2 steps left)")
	require.Contains(t, out, "Input     [1,2,3]")
	require.NotContains(t, out, "Output")
	require.Regexp(t, `square\s+map\s+started\s+0/3\s+0 \(max 0\)`, out)
	require.Regexp(t, `sum\s+single\s+created\s+0/1\s+-\s+-\s+waiting for 1 dependency`, out)

	// A worker finishes the run; show then has the outputs.
	startWorker(t, db.Pool, squaresFlow("squares"))
	waitTerminal(t, db.Pool, doc.RunID)
	out = mustCLI(t, "--database-url", db.URL, "runs", "show", doc.RunID, "--tasks")
	require.Contains(t, out, "Status    completed in ")
	require.Contains(t, out, `Output    {"sum":14}`)
	require.Regexp(t, `square\s+map\s+completed\s+3/3\s+3 \(max 1\)\s+\S+\s+\[1,4,9\]`, out)
	require.Regexp(t, `sum\s+single\s+completed\s+1/1\s+1\s+\S+\s+14`, out)
	require.Regexp(t, `square\s+2\s+completed\s+1\s+squares/\d+\s+[0-9a-f-]{36}`, out) // the task table: queue/message id
}

func TestRunsStartWaitJSONAndText(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	startWorker(t, db.Pool, squaresFlow("squares"))

	out := mustCLI(t, "--database-url", db.URL, "runs", "start", "squares", "--input", "[3, 4]", "--wait", "--json")
	doc := decodeJSON[runJSON](t, out)
	require.Equal(t, "completed", doc.Status)
	require.JSONEq(t, `{"sum": 25}`, string(doc.Output))
	require.NotNil(t, doc.CompletedAt)
	require.JSONEq(t, `[9, 16]`, string(doc.Steps[0].Output))
	require.Equal(t, taskSummaryJSON{Total: 2, Completed: 2, AttemptsTotal: 2, AttemptsMax: 1}, doc.Steps[0].Tasks)
	require.JSONEq(t, `25`, string(doc.Steps[1].Output))

	// An empty map completes without tasks; the output keeps the 0.
	out = mustCLI(t, "--database-url", db.URL, "runs", "start", "squares", "--input", "[]", "--wait")
	require.Contains(t, out, "Status    completed in ")
	require.Contains(t, out, `Output    {"sum":0}`)
	require.Regexp(t, `square\s+map\s+completed\s+0/0\s+-`, out)

	// Input from standard input and from a file.
	r := runCLI(t, "[5]", "--database-url", db.URL, "runs", "start", "squares", "--input", "-", "--wait", "--json")
	require.NoError(t, r.err, r.stderr)
	require.JSONEq(t, `{"sum": 25}`, string(decodeJSON[runJSON](t, r.stdout).Output))
	file := filepath.Join(t.TempDir(), "input.json")
	require.NoError(t, os.WriteFile(file, []byte("[1, 1]\n"), 0o644))
	out = mustCLI(t, "--database-url", db.URL, "runs", "start", "squares", "--input", "@"+file, "--wait", "--json")
	require.JSONEq(t, `{"sum": 2}`, string(decodeJSON[runJSON](t, out).Output))
}

func TestRunsStartWaitFailedRunExitsWithStatus1(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	startWorker(t, db.Pool, failingFlow("fragile"))

	r := runCLI(t, "", "--database-url", db.URL, "runs", "start", "fragile", "--wait", "--json")
	var ee exitError
	require.ErrorAs(t, r.err, &ee)
	require.Equal(t, 1, ee.code)
	doc := decodeJSON[runJSON](t, r.stdout)
	require.Equal(t, "failed", doc.Status)
	require.NotNil(t, doc.Error)
	require.Equal(t, "run "+doc.RunID+` of flow "fragile" failed: step "boom": the printer is on fire`, *doc.Error)
	require.Equal(t, "failed", doc.Steps[1].Status)
	require.Equal(t, "the printer is on fire", *doc.Steps[1].ErrorMessage)
	require.Equal(t, "the printer is on fire", *doc.Steps[1].Tasks.LastError)
	require.Equal(t, 1, doc.Steps[1].Tasks.Failed)

	out := mustCLI(t, "--database-url", db.URL, "runs", "show", doc.RunID)
	require.Contains(t, out, "Status    failed after ")
	require.Regexp(t, `boom\s+single\s+failed\s+0/1\s+1\s+\S+\s+the printer is on fire`, out)
	require.Contains(t, out, "step boom failed: the printer is on fire")
}

func TestRunsStartIdempotentRunID(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	compileFlow(t, db.Pool, squaresFlow("squares"))
	const id = "0f8fad5b-d9cb-469f-a165-70867728950e"

	first := decodeJSON[runJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "start", "squares",
		"--input", "[1]", "--run-id", id, "--json"))
	require.Equal(t, id, first.RunID)
	again := decodeJSON[runJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "start", "squares",
		"--input", "[7, 7]", "--run-id", strings.ToUpper(id), "--json"))
	require.Equal(t, id, again.RunID)
	require.JSONEq(t, `[1]`, string(again.Input)) // the existing run, not a new one

	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `select count(*) from pgflow.runs`).Scan(&n))
	require.Equal(t, 1, n)
}

func TestRunsErrors(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	compileFlow(t, db.Pool, squaresFlow("squares"))

	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"bad JSON input", []string{"runs", "start", "squares", "--input", `{"a": }`},
			[]string{"--input is not valid JSON", "invalid character '}'", "at byte 7"}},
		{"truncated JSON input", []string{"runs", "start", "squares", "--input", `[1, 2`},
			[]string{"--input is not valid JSON", "unexpected end of JSON input"}},
		{"empty input", []string{"runs", "start", "squares", "--input", " "},
			[]string{"--input: empty"}},
		{"missing input file", []string{"runs", "start", "squares", "--input", "@/no/such/file.json"},
			[]string{"--input @/no/such/file.json", "no such file"}},
		{"unknown flow", []string{"runs", "start", "no_such_flow"},
			[]string{`flow "no_such_flow" not found`, "pgflow flows"}},
		{"input the flow rejects", []string{"runs", "start", "squares", "--input", `{"not": "an array"}`},
			[]string{"squares", "array"}},
		{"bad run id", []string{"runs", "start", "squares", "--input", "[1]", "--run-id", "run-1"},
			[]string{`--run-id "run-1" is not a UUID`}},
		{"show unknown run", []string{"runs", "show", "00000000-0000-4000-8000-000000000001"},
			[]string{"run 00000000-0000-4000-8000-000000000001 not found"}},
		{"show malformed id", []string{"runs", "show", "nope"},
			[]string{`RUN_ID "nope" is not a run id`}},
		{"watch unknown run", []string{"runs", "watch", "00000000-0000-4000-8000-000000000002"},
			[]string{"run 00000000-0000-4000-8000-000000000002 not found"}},
		{"show without id", []string{"runs", "show"},
			[]string{"accepts 1 arg(s), received 0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, "", append([]string{"--database-url", db.URL}, tc.args...)...)
			require.Error(t, r.err)
			for _, w := range tc.want {
				require.Contains(t, r.err.Error(), w)
			}
		})
	}

	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `select count(*) from pgflow.runs`).Scan(&n))
	require.Equal(t, 0, n, "no failed command started a run")
}

func TestRunsWithoutDatabaseURL(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	r := runCLI(t, "", "runs", "show", "00000000-0000-4000-8000-000000000001")
	require.ErrorContains(t, r.err, "no database: pass --database-url")
}

func TestRunsCommandsOnADatabaseWithoutSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	r := runCLI(t, "", "--database-url", db.URL, "runs", "start", "squares", "--input", "[1]")
	require.ErrorContains(t, r.err, "pgflow migrate up")
	r = runCLI(t, "", "--database-url", db.URL, "flows")
	require.ErrorContains(t, r.err, "pgflow migrate up")
	r = runCLI(t, "", "--database-url", db.URL, "workers")
	require.ErrorContains(t, r.err, "pgflow migrate up")
	const id = "00000000-0000-4000-8000-000000000001"
	for _, cmd := range []string{"show", "watch"} {
		r = runCLI(t, "", "--database-url", db.URL, "runs", cmd, id)
		require.ErrorContains(t, r.err, "pgflow migrate up", cmd)
		require.ErrorContains(t, r.err, "run "+id, cmd)
		require.NotContains(t, r.err.Error(), "sqlapi", cmd)
	}
}

func TestRunsWatchPlain(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	startWorker(t, db.Pool, squaresFlow("squares"))
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer client.Close()

	run, err := client.StartRunJSON(context.Background(), "squares", json.RawMessage(`[1, 2, 3, 4]`), nil)
	require.NoError(t, err)
	// The output is not a terminal, so the view appends lines.
	out := mustCLI(t, "--database-url", db.URL, "runs", "watch", run.ID)
	require.Contains(t, out, "run "+run.ID+" of flow squares: ")
	require.Contains(t, out, "  sum completed in ")
	require.Contains(t, out, "  square completed in ")
	require.Contains(t, out, "run completed in ")
	require.Contains(t, out, "output:\n{\n  \"sum\": 30\n}\n")
	require.NotContains(t, out, "\x1b[")

	// A run that has already ended is printed at once.
	out = mustCLI(t, "--database-url", db.URL, "runs", "watch", run.ID, "--plain")
	require.Contains(t, out, "run "+run.ID+" of flow squares: completed")
	require.Contains(t, out, "\"sum\": 30")
}

func TestRunsWatchFailedRun(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	compileFlow(t, db.Pool, failingFlow("fragile"))
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer client.Close()
	run, err := client.StartRunJSON(context.Background(), "fragile", json.RawMessage(`{}`), nil)
	require.NoError(t, err)

	// The worker starts while watch already waits.
	done := make(chan cliResult, 1)
	go func() {
		done <- runCLI(t, "", "--database-url", db.URL, "runs", "watch", run.ID, "--poll-interval", "200ms")
	}()
	startWorker(t, db.Pool, failingFlow("fragile"))
	r := <-done

	var ee exitError
	require.ErrorAs(t, r.err, &ee)
	require.Equal(t, 1, ee.code)
	require.Contains(t, r.stdout, "  boom failed: the printer is on fire\n")
	require.Contains(t, r.stdout, "run failed after ")
	require.Contains(t, r.stdout, "step boom failed: the printer is on fire\n")
}

// Without notifications (the listener cannot connect) watch still follows the run, by polling.
func TestWatchRunWithoutNotificationsPolls(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	startWorker(t, db.Pool, squaresFlow("squares"))

	listen, err := pgx.ParseConfig(db.URL)
	require.NoError(t, err)
	listen.Port = 1 // nothing listens there
	listen.ConnectTimeout = time.Second
	client, err := pgflow.NewClient(db.Pool, &pgflow.ClientConfig{ListenConfig: listen, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	run, err := client.StartRunJSON(ctx, "squares", json.RawMessage(`[2, 3]`), nil)
	require.NoError(t, err)
	var out bytes.Buffer
	final, err := watchRun(ctx, client, db.Pool, run.ID, newProgressView(&out, false), 50*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, "completed", final.Run.Status)
	require.JSONEq(t, `{"sum": 13}`, string(final.Run.Output))
	require.Contains(t, out.String(), "sum completed in ")
}

// runs start does not echo a large input back: the text shows a short preview marked as cut, --json leaves the
// input out and gives its size, and runs show --json still has all of it.
func TestRunsStartDoesNotEchoALargeInput(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	compileFlow(t, db.Pool, failingFlow("big")) // no worker: the run just starts
	blob := strings.Repeat("ab", 512<<10)       // 1 MiB
	file := filepath.Join(t.TempDir(), "input.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"blob": "`+blob+`"}`), 0o600))
	size := len(`{"blob": "` + blob + `"}`)

	out := mustCLI(t, "--database-url", db.URL, "runs", "start", "big", "--input", "@"+file)
	require.Less(t, len(out), 4<<10, "runs start printed %d bytes", len(out))
	require.NotContains(t, out, strings.Repeat("ab", 200))
	require.Contains(t, out, `Input     {"blob":"abab`)
	require.Regexp(t, `… \(truncated: the input has \d+ bytes; 'pgflow runs show [0-9a-f-]{36} --json' prints it whole\)`, out)

	out = mustCLI(t, "--database-url", db.URL, "runs", "start", "big", "--input", "@"+file, "--json")
	require.Less(t, len(out), 8<<10, "runs start --json printed %d bytes", len(out))
	doc := decodeJSON[runJSON](t, out)
	require.Equal(t, "null", string(doc.Input))
	require.NotNil(t, doc.InputBytes)
	require.GreaterOrEqual(t, *doc.InputBytes, size-1) // as the database stores it (jsonb re-spaces)

	// show --json prints the whole input; the text of show has the preview too.
	shown := decodeJSON[runJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "show", doc.RunID, "--json"))
	require.JSONEq(t, `{"blob": "`+blob+`"}`, string(shown.Input))
	require.Nil(t, shown.InputBytes)
	require.Less(t, len(mustCLI(t, "--database-url", db.URL, "runs", "show", doc.RunID)), 4<<10)

	// A small input is still shown whole.
	out = mustCLI(t, "--database-url", db.URL, "runs", "start", "big", "--input", `{"n": 1}`)
	require.Contains(t, out, `Input     {"n":1}`+"\n")
	doc = decodeJSON[runJSON](t, mustCLI(t, "--database-url", db.URL, "runs", "start", "big", "--input", `{"n": 2}`, "--json"))
	require.JSONEq(t, `{"n": 2}`, string(doc.Input))
	require.Nil(t, doc.InputBytes)
}
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

// A database whose schema is older than the code needs (v0.19.0) is refused with the command that fixes it,
// said once.
func TestRunsStartOnAnOldSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.NewWithPGMQ(t)
	conn, err := pgx.Connect(context.Background(), db.URL)
	require.NoError(t, err)
	_, err = schema.NewMigrator(conn, nil).Up(context.Background(), "v0.19.0")
	require.NoError(t, err)
	require.NoError(t, conn.Close(context.Background()))

	r := runCLI(t, "", "--database-url", db.URL, "runs", "start", "squares", "--input", "[1]")
	require.ErrorContains(t, r.err, "pgflow migrate up")
	require.Equal(t, 1, strings.Count(r.err.Error(), "pgflow migrate up"), r.err.Error())
}
