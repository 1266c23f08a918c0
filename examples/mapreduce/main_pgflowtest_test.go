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

func TestWordCountWithPgflowtest(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	run, err := pgflowtest.RunFlow(t.Context(), db.Pool, WordCountFlow(),
		Input{Documents: []string{"The quick brown fox.", "  ", "The lazy dog.", "The end."}}, nil)
	require.NoError(t, err)
	out, err := pgflow.RunOutput[Output](run)
	require.NoError(t, err)
	require.Equal(t, Totals{Documents: 3, Words: 9, Unique: 7,
		Top: []WordCount{{"the", 3}, {"brown", 1}, {"dog", 1}}}, out.Merge)
	require.Equal(t, 3, *run.Step("count").InitialTasks, "one task per non-blank document")
}

func TestCountRunsOneTaskPerDocument(t *testing.T) {
	t.Parallel()
	// No database: the map step runs once per element of split's output, in order, and its output is the array.
	raw, err := pgflowtest.RunStepJSON(t.Context(), WordCountFlow(), "count", &pgflowtest.RunStepOpts{
		Deps: map[string]any{"split": []string{"A a b.", "(c)"}},
	})
	require.NoError(t, err)
	var perDoc []map[string]int
	require.NoError(t, json.Unmarshal(raw, &perDoc))
	require.Equal(t, []map[string]int{{"a": 2, "b": 1}, {"c": 1}}, perDoc)

	// merge adds the per-document counts up.
	raw, err = pgflowtest.RunStepJSON(t.Context(), WordCountFlow(), "merge", &pgflowtest.RunStepOpts{
		Deps: map[string]any{"count": perDoc},
	})
	require.NoError(t, err)
	var tot Totals
	require.NoError(t, json.Unmarshal(raw, &tot))
	require.Equal(t, Totals{Documents: 2, Words: 4, Unique: 3, Top: []WordCount{{"a", 2}, {"b", 1}, {"c", 1}}}, tot)
}
