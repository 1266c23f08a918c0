// Package testutil holds the test helpers the project's own tests share: waiting for a condition, starting a run
// in SQL and waiting for it to finish, a sink that ignores the worker's events. It is for tests only (it depends
// on testing and testify); users test their flows with package pgflowtest.
package testutil

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/observe"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// WaitTimeout bounds every wait of this package. It is a guard against a hung test, never a measurement: tests
// wait for facts, and a fact that takes longer than this means the test failed.
const WaitTimeout = 60 * time.Second

// WaitFor polls cond until it holds, failing the test after WaitTimeout with what.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitClosed waits until ch is closed, failing the test after WaitTimeout with what.
func WaitClosed(t testing.TB, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(WaitTimeout):
		t.Fatalf("timed out waiting for: %s", what)
	}
}

// StartRun starts a run of flowSlug with pgflow.start_flow and returns its id; input is encoded with
// encoding/json, except a json.RawMessage or a string holding JSON, which are used as they are.
func StartRun(t testing.TB, db sqlapi.DBTX, flowSlug string, input any) string {
	t.Helper()
	var raw string
	switch in := input.(type) {
	case json.RawMessage:
		raw = string(in)
	case string:
		if json.Valid([]byte(in)) {
			raw = in
			break
		}
		b, err := json.Marshal(in)
		require.NoError(t, err)
		raw = string(b)
	default:
		b, err := json.Marshal(in)
		require.NoError(t, err)
		raw = string(b)
	}
	var runID string
	require.NoError(t, db.QueryRow(context.Background(),
		`select r.run_id::text from pgflow.start_flow($1, $2::jsonb) as r`, flowSlug, raw).Scan(&runID))
	return runID
}

// RunResult is a finished run's status and output.
type RunResult struct {
	Status string
	Output json.RawMessage
}

// WaitRun waits until the run is completed or failed.
func WaitRun(t testing.TB, db sqlapi.DBTX, runID string) RunResult {
	t.Helper()
	var res RunResult
	WaitFor(t, "run "+runID+" to finish", func() bool {
		require.NoError(t, db.QueryRow(context.Background(),
			`select status, output from pgflow.runs where run_id = $1`, runID).Scan(&res.Status, &res.Output))
		return res.Status == "completed" || res.Status == "failed"
	})
	return res
}

// Claimed is a task claimed with pgflow.start_tasks.
type Claimed struct {
	RunID     string
	StepSlug  string
	TaskIndex int
	Input     json.RawMessage
}

// ClaimAll reads every visible message of the flow's default queue and claims the tasks behind them as workerID
// (a registered worker), the way a worker does.
func ClaimAll(t testing.TB, db sqlapi.DBTX, flow, workerID string) []Claimed {
	t.Helper()
	rows, err := db.Query(context.Background(), `
select t.run_id::text, t.step_slug, t.task_index, t.input
from pgflow.start_tasks($1, array(select m.msg_id from pgmq.read($1, 60, 1000) as m), $2::uuid) as t`,
		flow, workerID)
	require.NoError(t, err)
	defer rows.Close()
	var out []Claimed
	for rows.Next() {
		var c Claimed
		require.NoError(t, rows.Scan(&c.RunID, &c.StepSlug, &c.TaskIndex, &c.Input))
		out = append(out, c)
	}
	require.NoError(t, rows.Err())
	return out
}

// CompleteTask completes a claimed task with output (JSON) through pgflow.complete_task.
func CompleteTask(t testing.TB, db sqlapi.DBTX, c Claimed, output string) {
	t.Helper()
	_, err := db.Exec(context.Background(), `select pgflow.complete_task($1::uuid, $2, $3, $4::jsonb)`,
		c.RunID, c.StepSlug, c.TaskIndex, output)
	require.NoError(t, err)
}

// FailTask fails a claimed task with msg through pgflow.fail_task.
func FailTask(t testing.TB, db sqlapi.DBTX, c Claimed, msg string) {
	t.Helper()
	_, err := db.Exec(context.Background(), `select pgflow.fail_task($1::uuid, $2, $3, $4)`,
		c.RunID, c.StepSlug, c.TaskIndex, msg)
	require.NoError(t, err)
}

// SyncBuffer is a log sink that goroutines may write to while a test reads it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Notifications listens on channels on a connection of its own and returns a function that collects the
// notifications ("<channel> <payload>") delivered so far, waiting for a marker sent after them.
func Notifications(t testing.TB, url string, channels ...string) func() []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	const marker = "test:marker"
	for _, ch := range append([]string{marker}, channels...) {
		_, err := conn.Exec(ctx, "listen "+pgx.Identifier{ch}.Sanitize())
		require.NoError(t, err)
	}
	return func() []string {
		// Every collector of a test listens on the marker channel: each waits for its own marker.
		token := fmt.Sprintf("marker %p %d", conn, time.Now().UnixNano())
		sender, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer sender.Close(context.Background())
		_, err = sender.Exec(ctx, `select pg_notify($1, $2)`, marker, token)
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, WaitTimeout)
		defer cancel()
		var got []string
		for {
			n, err := conn.WaitForNotification(wctx)
			require.NoError(t, err)
			if n.Channel == marker {
				if n.Payload == token {
					return got
				}
				continue
			}
			got = append(got, n.Channel+" "+n.Payload)
		}
	}
}

// NopSink is an observe.Sink that ignores every event; a test's sink embeds it and defines only the events it
// records.
type NopSink struct{}

var _ observe.Sink = NopSink{}

func (NopSink) PollDone(context.Context, observe.Poll)                          {}
func (NopSink) TaskClaimed(context.Context, observe.Task)                       {}
func (NopSink) TaskStarted(ctx context.Context, _ observe.Task) context.Context { return ctx }
func (NopSink) HandlerDone(context.Context, observe.Handler)                    {}
func (NopSink) TaskFinished(context.Context, observe.Finished)                  {}
func (NopSink) StaleResult(context.Context, observe.StaleResult)                {}
