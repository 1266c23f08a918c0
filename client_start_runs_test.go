package pgflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
)

func TestStartRunsStartsManyRunsInOneCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	f := pgflow.NewFlow[map[string]int]("bulk")
	pgflow.Step(f, "double", func(ctx context.Context, tk *pgflow.Task[map[string]int]) (int, error) {
		in, err := tk.FlowInput(ctx)
		return 2 * in["n"], err
	})
	stmts, err := f.CompileSQL()
	require.NoError(t, err)
	for _, s := range stmts {
		_, err := db.Pool.Exec(ctx, s)
		require.NoError(t, err)
	}
	c := newClient(t, db.Pool, nil)
	defer c.Close()

	var inputs []map[string]int
	for i := range 25 {
		inputs = append(inputs, map[string]int{"n": i})
	}
	ids, err := pgflow.StartRuns(ctx, c, f, inputs, nil)
	require.NoError(t, err)
	require.Len(t, ids, 25)
	for i, id := range ids {
		run, err := c.GetRun(ctx, id)
		require.NoError(t, err)
		require.Equal(t, pgflow.RunStarted, run.Status)
		require.JSONEq(t, fmt.Sprintf(`{"n": %d}`, i), string(run.Input), "run %d keeps its input and position", i)
	}

	w, err := newFlowWorker(t, db.Pool, f, pgflow.WorkerConfig{MaxPollWait: time.Second})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); require.NoError(t, <-done) }()
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i, id := range ids {
		run, err := c.WaitRun(wait, id)
		require.NoError(t, err)
		require.Equal(t, pgflow.RunCompleted, run.Status)
		require.JSONEq(t, fmt.Sprintf(`{"double": %d}`, 2*i), string(run.Output))
	}

	_, err = c.StartRunsJSON(ctx, "nope", []json.RawMessage{json.RawMessage(`{}`)}, nil)
	require.ErrorIs(t, err, pgflow.ErrFlowNotFound)
	_, err = c.StartRunsJSON(ctx, "bulk", []json.RawMessage{json.RawMessage(`{}`), json.RawMessage(`{bad`)}, nil)
	require.ErrorContains(t, err, "input 2 is not valid JSON")
	none, err := c.StartRunsJSON(ctx, "bulk", nil, nil)
	require.NoError(t, err)
	require.Empty(t, none)
}
