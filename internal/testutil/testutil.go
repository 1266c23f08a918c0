// Package testutil holds the test helpers the project's own tests share: waiting for a condition, starting a run
// in SQL and waiting for it to finish. It is for tests only (it depends on testing and testify); users test their
// flows with package pgflowtest.
package testutil

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
