package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// statuses maps each step of run to its status, with the skip reason for skipped steps.
func statuses(run *pgflow.Run) map[string]string {
	m := map[string]string{}
	for _, s := range run.Steps {
		m[s.StepSlug] = string(s.Status)
		if s.SkipReason != "" {
			m[s.StepSlug] += " (" + s.SkipReason + ")"
		}
	}
	return m
}

func TestSignupProWithNewsletter(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	run, err := Run(ctx, context.Background(), db.Pool, Input{Email: "ada@example.com", Plan: "pro", Newsletter: true})
	require.NoError(t, err)
	require.Equal(t, pgflow.RunCompleted, run.Status)
	require.Equal(t, map[string]string{
		"account":        "completed",
		"subscribe":      "completed",
		"billing":        "completed",
		"trial_reminder": "skipped (condition_unmet)", // billing completed, so IfNot({"billing": {}}) failed
		"welcome":        "completed",
	}, statuses(run))

	out, err := pgflow.RunOutput[Output](run)
	require.NoError(t, err)
	require.Equal(t, "ada@example.com", out.Welcome.To)
	require.Equal(t, "Welcome to Pro! You are billed 19.00 a month.", out.Welcome.Text)
	require.NotNil(t, out.Subscribe)
	require.Equal(t, "subscribed ada@example.com", *out.Subscribe)
}

func TestSignupFreeWithoutNewsletter(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	run, err := Run(ctx, context.Background(), db.Pool, Input{Email: "linus@example.com", Plan: "free"})
	require.NoError(t, err)
	require.Equal(t, pgflow.RunCompleted, run.Status)
	require.Equal(t, map[string]string{
		"account":        "completed",
		"subscribe":      "skipped (condition_unmet)", // root condition on the run input
		"billing":        "skipped (condition_unmet)",
		"trial_reminder": "completed", // runs because billing was skipped
		"welcome":        "completed",
	}, statuses(run))

	out, err := pgflow.RunOutput[Output](run)
	require.NoError(t, err)
	require.Equal(t, Output{Welcome: Welcome{To: "linus@example.com", Text: "Welcome! We will remind you of Pro in 14 days."}}, out)
	require.JSONEq(t, `{"welcome": {"to": "linus@example.com", "text": "Welcome! We will remind you of Pro in 14 days."}}`,
		string(run.Output)) // the skipped leaf is absent from the run output
}
