package pgflow

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// A flow defined with DeleteTaskMessages runs end to end through a worker: every message is deleted at its claim
// (nothing is archived), a failed attempt is retried with a message sent again, and the flow's definition as read
// back says so.
func TestDeleteTaskMessagesRunsAFlowWithoutArchiving(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	cfg, _ := testConfig(t)
	client := newClient(t, db.Pool, &ClientConfig{Logger: cfg.Logger})

	var failed atomic.Bool
	flow := NewFlow[[]int]("lean", DeleteTaskMessages(), MaxAttempts(3))
	items := MapInput(flow, "items", func(ctx context.Context, tk *Task[[]int], n int) (int, error) {
		if n == 3 && failed.CompareAndSwap(false, true) {
			return 0, RetryAfter(0, errors.New("first attempt of item 3 fails"))
		}
		return n * 2, nil
	})
	Step(flow, "sum", func(ctx context.Context, tk *Task[[]int]) (int, error) {
		out, err := items.Output(tk)
		if err != nil {
			return 0, err
		}
		total := 0
		for _, v := range out {
			total += v
		}
		return total, nil
	}, DependsOn(items))

	startWorker(t, db.Pool, flow, cfg)
	r, err := StartRun(ctx, client, flow, []int{1, 2, 3, 4}, nil)
	require.NoError(t, err)
	done, err := client.WaitRun(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, RunCompleted, done.Status)
	require.JSONEq(t, `{"sum": 20}`, string(done.Output))
	require.True(t, failed.Load())

	require.Equal(t, 2, count(t, db.Pool, `select 1 from pgflow.step_tasks
		where run_id = $1::uuid and step_slug = 'items' and task_index = 2 and attempts_count = 2
		  and status = 'completed'`, r.ID)+
		count(t, db.Pool, `select 1 from pgflow.step_tasks where run_id = $1::uuid and step_slug = 'sum'
		  and status = 'completed'`, r.ID), "item 3 took two attempts, the sum one")
	require.Zero(t, count(t, db.Pool, `select 1 from pgmq.q_lean`), "no message left in the queue")
	require.Zero(t, count(t, db.Pool, `select 1 from pgmq.a_lean`), "nothing archived")

	flows, err := client.ListFlows(ctx)
	require.NoError(t, err)
	require.Len(t, flows, 1)
	require.True(t, flows[0].DeleteTaskMessages)
}

// The message retention follows the code: a worker started with the option sets it on an existing flow, and one
// without it sets it back, with no definition change.
func TestDeleteTaskMessagesIsAppliedToAnExistingFlow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	cfg, _ := testConfig(t)
	client := newClient(t, db.Pool, &ClientConfig{Logger: cfg.Logger})
	handler := func(ctx context.Context, tk *Task[int]) (int, error) { return tk.FlowInput(ctx) }

	archiving := NewFlow[int]("switch")
	Step(archiving, "only", handler)
	require.NoError(t, client.EnsureFlow(ctx, archiving, nil))
	retention := func() string {
		return strs(t, db.Pool, `select message_retention from pgflow.flows where flow_slug = 'switch'`)[0]
	}
	require.Equal(t, "archive", retention())

	deleting := NewFlow[int]("switch", DeleteTaskMessages())
	Step(deleting, "only", handler)
	w := startWorker(t, db.Pool, deleting, cfg)
	require.Equal(t, "delete", retention())
	r, err := StartRun(ctx, client, deleting, 5, nil)
	require.NoError(t, err)
	done, err := client.WaitRun(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, RunCompleted, done.Status)
	require.Zero(t, count(t, db.Pool, `select 1 from pgmq.a_switch`))
	require.NoError(t, w.stop(t))

	require.NoError(t, client.EnsureFlow(ctx, archiving, nil))
	require.Equal(t, "archive", retention())
}
