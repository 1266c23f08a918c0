package runtime_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

func TestSequentialFlowRunsToCompletion(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	run := fx.StartFlow(t, db, "sequential", `{"x": 1}`)
	require.Equal(t, "started", run.Status)
	require.Equal(t, 3, run.RemainingSteps)

	first := fx.PollAndComplete(t, db, "sequential")
	require.Equal(t, "first", first.StepSlug)
	require.Equal(t, "completed", first.Status)
	second := fx.PollAndComplete(t, db, "sequential")
	require.Equal(t, "second", second.StepSlug)
	last := fx.PollAndComplete(t, db, "sequential")
	require.Equal(t, "last", last.StepSlug)

	got := fx.GetRun(t, db, run.RunID)
	require.Equal(t, "completed", got.Status)
	require.Equal(t, 0, got.RemainingSteps)
	require.Equal(t, fx.JSON(t, db, `{"last": {"input": {"second": {"input": {"first": {"input": {}}}}}}}`), got.Output)
}
