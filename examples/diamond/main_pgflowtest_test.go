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

func TestArticleFlowWithPgflowtest(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	run, err := pgflowtest.RunFlow(t.Context(), db.Pool, ArticleFlow(), Input{URL: "https://example.com/posts/postgres-queues"}, nil)
	require.NoError(t, err)
	out, err := pgflow.RunOutput[Output](run)
	require.NoError(t, err)
	require.Equal(t, Post{
		URL:      "https://example.com/posts/postgres-queues",
		Title:    "postgres queues",
		Summary:  "This post is about postgres queues.",
		Words:    24,
		Keywords: []string{"postgres", "queues", "about"},
	}, out.Publish)
	require.JSONEq(t, `["postgres", "queues", "about"]`, string(run.Step("keywords").Output))
}

func TestArticleFlowFailsWithoutURLAtOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	// fetch fails on each of its 3 attempts; RunFlow skips the retry delays (2 s and 4 s in a worker).
	run, err := pgflowtest.RunFlow(t.Context(), db.Pool, ArticleFlow(), Input{}, nil)
	require.ErrorIs(t, err, pgflow.ErrRunFailed)
	require.ErrorContains(t, err, `step "fetch": input has no url`)
	require.Equal(t, pgflow.StepFailed, run.Step("fetch").Status)
	require.Equal(t, pgflow.StepSkipped, run.Step("publish").Status, "publish never ran: the failed run ended it")
	require.Equal(t, "run_failed", run.Step("publish").SkipReason)
}

func TestPublishJoinsBothBranches(t *testing.T) {
	t.Parallel()
	// No database: publish runs with the outputs its three dependencies would have produced. ArticleFlow keeps
	// its step handles to itself, so the step is named by its slug.
	raw, err := pgflowtest.RunStepJSON(t.Context(), ArticleFlow(), "publish", &pgflowtest.RunStepOpts{
		FlowInput: Input{URL: "https://example.com/a"},
		Deps: map[string]any{
			"fetch":    Page{Title: "a title", Body: "unused here"},
			"summary":  Summary{FirstSentence: "First.", Words: 7},
			"keywords": []string{"queues"},
		},
	})
	require.NoError(t, err)
	var post Post
	require.NoError(t, json.Unmarshal(raw, &post))
	require.Equal(t, Post{URL: "https://example.com/a", Title: "a title", Summary: "First.", Words: 7, Keywords: []string{"queues"}}, post)

	// A branch that did not complete is an error of publish (here: keywords left out, as if skipped).
	_, err = pgflowtest.RunStepJSON(t.Context(), ArticleFlow(), "publish", &pgflowtest.RunStepOpts{
		FlowInput: Input{URL: "https://example.com/a"},
		Deps:      map[string]any{"fetch": Page{}, "summary": Summary{}},
	})
	require.ErrorIs(t, err, pgflow.ErrDependencySkipped)
}
