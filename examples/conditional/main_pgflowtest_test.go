package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/pgflowtest"
)

// These tests use package pgflowtest, the way an application tests its flows: steps alone without a database,
// and the whole flow synchronously in a test database, without a worker.

func TestSignupConditionsWithPgflowtest(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	// The conditions are evaluated by the database, as in production.
	run, err := pgflowtest.RunFlow(t.Context(), db.Pool, SignupFlow(), Input{Email: "grace@example.com", Plan: "pro"}, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"account":        "completed",
		"subscribe":      "skipped (condition_unmet)",
		"billing":        "completed",
		"trial_reminder": "skipped (condition_unmet)",
		"welcome":        "completed",
	}, statuses(run))
	out, err := pgflow.RunOutput[Output](run)
	require.NoError(t, err)
	require.Equal(t, Output{Welcome: Welcome{To: "grace@example.com", Text: "Welcome to Pro! You are billed 19.00 a month."}}, out)
}

func TestWelcomeWhenBillingWasSkipped(t *testing.T) {
	t.Parallel()
	// No database: a dependency left out of Deps is seen as skipped, so welcome takes its trial branch.
	raw, err := pgflowtest.RunStepJSON(t.Context(), SignupFlow(), "welcome", &pgflowtest.RunStepOpts{
		Deps: map[string]any{
			"account":        Account{ID: "acct_1", Email: "linus@example.com", Plan: "free"},
			"trial_reminder": Reminder{InDays: 30},
		},
	})
	require.NoError(t, err)
	var w Welcome
	require.NoError(t, json.Unmarshal(raw, &w))
	require.Equal(t, Welcome{To: "linus@example.com", Text: "Welcome! We will remind you of Pro in 30 days."}, w)
}

func TestStartingASignupStartsOneRun(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	flow := SignupFlow()
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer client.Close()
	require.NoError(t, client.EnsureFlow(ctx, flow, nil))

	// The code under test starts a run; the test checks the run and its input, then runs it.
	_, err = pgflow.StartRun(ctx, client, flow, Input{Email: "ada@example.com", Plan: "pro", Newsletter: true}, nil)
	require.NoError(t, err)
	run := pgflowtest.RequireRunStarted(ctx, t, db.Pool, flow, Input{Email: "ada@example.com", Plan: "pro", Newsletter: true})
	run, err = pgflowtest.DriveRun(ctx, db.Pool, flow, run.ID, nil)
	require.NoError(t, err)
	require.Equal(t, "completed", statuses(run)["subscribe"])
}
