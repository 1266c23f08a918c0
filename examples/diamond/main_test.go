package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
)

func TestArticleFlowRunsTheDiamond(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	out, err := Run(ctx, context.Background(), db.Pool, Input{URL: "https://example.com/posts/postgres-queues"})
	require.NoError(t, err)
	require.Equal(t, Output{Publish: Post{
		URL:      "https://example.com/posts/postgres-queues",
		Title:    "postgres queues",
		Summary:  "This post is about postgres queues.",
		Words:    24,
		Keywords: []string{"postgres", "queues", "about"},
	}}, out)

	// Both branches ran after fetch and before publish.
	var order []string
	rows, err := db.Pool.Query(ctx, `select step_slug from pgflow.step_states where flow_slug = 'article_diamond'
		order by completed_at, step_slug`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		order = append(order, s)
	}
	require.NoError(t, rows.Err())
	require.Len(t, order, 4)
	require.Equal(t, "fetch", order[0])
	require.ElementsMatch(t, []string{"summary", "keywords"}, order[1:3])
	require.Equal(t, "publish", order[3])
}

func TestArticleFlowFailsWithoutURL(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// fetch fails on each of its 3 attempts (with retry delays of 2 s and 4 s), then the run fails.
	_, err := Run(ctx, context.Background(), db.Pool, Input{})
	require.ErrorIs(t, err, pgflow.ErrRunFailed)
	require.ErrorContains(t, err, `step "fetch": input has no url`)
}

func TestTopWords(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"bbbbb", "aaaaa"}, topWords("aaaaa bbbbb bbbbb. ccc", 5))
	require.Equal(t, []string{"aaaaa"}, topWords("zzzzz aaaaa", 1))
	require.Empty(t, topWords("", 3))
}
