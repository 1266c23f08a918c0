package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

func TestWordCountFansOutAndIn(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	out, err := Run(ctx, context.Background(), db.Pool, Input{Documents: []string{
		"The quick brown fox.", "  ", "The lazy dog sleeps.", "The fox jumps over the dog.",
	}})
	require.NoError(t, err)
	require.Equal(t, Output{Merge: Totals{
		Documents: 3, Words: 14, Unique: 9,
		Top: []WordCount{{"the", 4}, {"dog", 2}, {"fox", 2}},
	}}, out)

	// One task per (non-blank) document, and the map output keeps the document order.
	var tasks int
	var countOutput []byte
	require.NoError(t, db.Pool.QueryRow(ctx, `select s.initial_tasks, s.output from pgflow.step_states s
		where s.flow_slug = 'word_count' and s.step_slug = 'count'`).Scan(&tasks, &countOutput))
	require.Equal(t, 3, tasks)
	var perDoc []map[string]int
	require.NoError(t, json.Unmarshal(countOutput, &perDoc))
	require.Equal(t, []map[string]int{
		{"the": 1, "quick": 1, "brown": 1, "fox": 1},
		{"the": 1, "lazy": 1, "dog": 1, "sleeps": 1},
		{"the": 2, "fox": 1, "jumps": 1, "over": 1, "dog": 1},
	}, perDoc)
}

func TestWordCountWithoutDocuments(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// An empty map completes with [] and no tasks; merge still runs.
	out, err := Run(ctx, context.Background(), db.Pool, Input{})
	require.NoError(t, err)
	require.Equal(t, Output{Merge: Totals{Top: []WordCount{}}}, out)
	var tasks int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.step_tasks where step_slug = 'count'`).Scan(&tasks))
	require.Equal(t, 0, tasks)
}
