package runtime_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// readRecord is one pgflow.read_task_record.
type readRecord struct {
	MsgID       int64
	Claimed     bool
	FlowSlug    *string
	RunID       *string
	StepSlug    *string
	Input       *string
	TaskIndex   *int
	FlowInput   *string
	Attempt     *int
	Timeout     *int
	MaxAttempts *int
}

func tryReadAndStartTasks(ctx context.Context, db fx.DB, flow, queue, worker string, qty, vt any) ([]readRecord, error) {
	rows, err := db.Query(ctx, `
		select msg_id, claimed, flow_slug, run_id::text, step_slug, input::text, task_index, flow_input::text,
		       attempt, timeout, max_attempts
		  from pgflow.read_and_start_tasks($1, $2, $3::uuid, $4::integer, $5::integer)`, flow, queue, worker, qty, vt)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (readRecord, error) {
		var x readRecord
		err := r.Scan(&x.MsgID, &x.Claimed, &x.FlowSlug, &x.RunID, &x.StepSlug, &x.Input, &x.TaskIndex, &x.FlowInput,
			&x.Attempt, &x.Timeout, &x.MaxAttempts)
		return x, err
	})
}

func readAndStartTasks(t *testing.T, db fx.DB, flow, queue, worker string, qty, vt int) []readRecord {
	t.Helper()
	recs, err := tryReadAndStartTasks(fx.Ctx(t), db, flow, queue, worker, qty, vt)
	require.NoError(t, err)
	return recs
}

func TestReadAndStartTasksReadsAndClaimsInOneCall(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 4, timeout => 40)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a', timeout => 300)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'b')")
	fx.EnsureWorker(t, db, "f", fx.DefaultWorker)
	run := fx.StartFlow(t, db, "f", `{"n": 1}`)
	msgA := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID
	msgB := *fx.GetTask(t, db, run.RunID, "b", 0).MessageID

	recs := readAndStartTasks(t, db, "f", "f", fx.DefaultWorker, 10, 5)
	require.Len(t, recs, 2)
	byMsg := map[int64]readRecord{recs[0].MsgID: recs[0], recs[1].MsgID: recs[1]}
	require.Less(t, recs[0].MsgID, recs[1].MsgID, "ordered by msg_id")
	a, b := byMsg[msgA], byMsg[msgB]
	require.True(t, a.Claimed)
	require.Equal(t, "f", *a.FlowSlug)
	require.Equal(t, run.RunID, *a.RunID)
	require.Equal(t, "a", *a.StepSlug)
	require.Equal(t, "{}", *a.Input)
	require.Equal(t, fx.JSON(t, db, `{"n": 1}`), *a.FlowInput)
	require.Equal(t, 0, *a.TaskIndex)
	require.Equal(t, 1, *a.Attempt)
	require.Equal(t, 300, *a.Timeout, "the step's own timeout")
	require.Equal(t, 4, *a.MaxAttempts, "the flow's max attempts")
	require.Equal(t, 40, *b.Timeout, "the flow's timeout")

	for _, step := range []string{"a", "b"} {
		tk := fx.GetTask(t, db, run.RunID, step, 0)
		require.Equal(t, "started", tk.Status)
		require.Equal(t, 1, tk.AttemptsCount)
		require.Equal(t, ptr(fx.DefaultWorker), tk.LastWorkerID)
	}
	// One update per message: read_ct counts the read, vt is the claim's (step timeout + 2).
	for _, m := range fx.QueueMessages(t, db, "f") {
		require.Equal(t, 1, m.ReadCt, "message %d", m.MsgID)
	}
	require.InDelta(t, 302, fx.VisibleIn(t, db, "f", msgA), 3)
	require.InDelta(t, 42, fx.VisibleIn(t, db, "f", msgB), 3)

	// The claimed messages are hidden: nothing more to read, nothing changes.
	require.Empty(t, readAndStartTasks(t, db, "f", "f", fx.DefaultWorker, 10, 5))
	require.Equal(t, 1, fx.GetTask(t, db, run.RunID, "a", 0).AttemptsCount)
}

func TestReadAndStartTasksLeavesUnclaimableMessagesAsReadDoes(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	fx.EnsureWorker(t, db, "sequential", fx.DefaultWorker)

	// A message without a task, the task of a failed run, and a claimable task.
	stray := fx.Val[int64](t, db, `select pgmq.send('sequential', '{"stray": true}')`)
	failed := fx.StartFlow(t, db, "sequential", `{}`)
	fx.Exec(t, db, "update pgflow.runs set status = 'failed', failed_at = now() where run_id = $1", failed.RunID)
	failedMsg := *fx.GetTask(t, db, failed.RunID, "first", 0).MessageID
	ok := fx.StartFlow(t, db, "sequential", `{}`)
	okMsg := *fx.GetTask(t, db, ok.RunID, "first", 0).MessageID

	recs := readAndStartTasks(t, db, "sequential", "sequential", fx.DefaultWorker, 10, 7)
	require.Len(t, recs, 3)
	got := map[int64]readRecord{}
	for _, r := range recs {
		got[r.MsgID] = r
	}
	require.True(t, got[okMsg].Claimed)
	for _, id := range []int64{stray, failedMsg} {
		r := got[id]
		require.False(t, r.Claimed, "message %d", id)
		require.Nil(t, r.RunID)
		require.Nil(t, r.Attempt)
		require.True(t, fx.InQueue(t, db, "sequential", id), "never archived or deleted")
		require.InDelta(t, 7, fx.VisibleIn(t, db, "sequential", id), 2, "hidden for vt, as pgmq.read hides it")
	}
	require.Equal(t, "queued", fx.GetTask(t, db, failed.RunID, "first", 0).Status)
	require.Equal(t, 0, fx.GetTask(t, db, failed.RunID, "first", 0).AttemptsCount)
	require.InDelta(t, 3, fx.VisibleIn(t, db, "sequential", okMsg), 2, "step timeout 1 + 2")
	for _, m := range fx.QueueMessages(t, db, "sequential") {
		require.Equal(t, 1, m.ReadCt, "every message read once, message %d", m.MsgID)
	}
}

func TestReadAndStartTasksReadsOldestVisibleFirstUpToQty(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', step_type => 'map')")
	fx.EnsureWorker(t, db, "f", fx.DefaultWorker)
	run := fx.StartFlow(t, db, "f", `[0, 1, 2, 3, 4]`)
	ids := fx.Val[[]int64](t, db, "select array_agg(message_id order by message_id) from pgflow.step_tasks where run_id = $1", run.RunID)
	// The oldest message is hidden (as if another worker had read it): it is skipped.
	fx.Exec(t, db, "select pgflow.set_vt_batch('f', array[$1::bigint], array[60])", ids[0])

	recs := readAndStartTasks(t, db, "f", "f", fx.DefaultWorker, 2, 5)
	require.Len(t, recs, 2)
	require.Equal(t, ids[1], recs[0].MsgID)
	require.Equal(t, ids[2], recs[1].MsgID)
	require.Equal(t, 1, *recs[0].TaskIndex)
	require.Equal(t, "1", *recs[0].Input, "a root map task gets its element")
	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "m", 0).Status)
	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "m", 3).Status)
}

func TestReadAndStartTasksRefusesBadArgumentsAndChangesNothing(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	fx.EnsureWorker(t, db, "sequential", fx.DefaultWorker)
	run := fx.StartFlow(t, db, "sequential", `{}`)

	for _, c := range []struct {
		qty, vt any
		msg     string
	}{
		{0, 5, "read_and_start_tasks: qty must be at least 1, got 0"},
		{nil, 5, "read_and_start_tasks: qty must be at least 1, got NULL"},
		{1, -1, "read_and_start_tasks: vt must be 0 or more seconds, got -1"},
		{1, nil, "read_and_start_tasks: vt must be 0 or more seconds, got NULL"},
	} {
		_, err := tryReadAndStartTasks(fx.Ctx(t), db, "sequential", "sequential", fx.DefaultWorker, c.qty, c.vt)
		requirePgError(t, err, "22023", c.msg)
	}
	_, err := tryReadAndStartTasks(fx.Ctx(t), db, "sequential", "no_such_queue", fx.DefaultWorker, 1, 5)
	requirePgError(t, err, "42P01", `relation "pgmq.q_no_such_queue" does not exist`)

	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "first", 0).Status)
	for _, m := range fx.QueueMessages(t, db, "sequential") {
		require.Equal(t, 0, m.ReadCt)
	}
}

// Concurrent callers on one queue: every message is read by one caller and every task claimed exactly once.
func TestReadAndStartTasksConcurrentCallersClaimEachTaskOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('race')")
	fx.Exec(t, db, "select pgflow.add_step('race', 'm', step_type => 'map')")
	ws := []string{
		"aaaaaaaa-0000-0000-0000-000000000001", "aaaaaaaa-0000-0000-0000-000000000002",
		"aaaaaaaa-0000-0000-0000-000000000003", "aaaaaaaa-0000-0000-0000-000000000004",
	}
	for _, w := range ws {
		fx.EnsureWorker(t, db, "race", w)
	}
	const tasks = 200
	fx.Exec(t, db, "select pgflow.start_flow('race', (select jsonb_agg(i) from generate_series(1, $1) i))", tasks)

	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	errs := make([]error, len(ws))
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				recs, err := tryReadAndStartTasks(context.Background(), db, "race", "race", w, 7, 30)
				if err != nil {
					errs[i] = err
					return
				}
				if len(recs) == 0 {
					return
				}
				mu.Lock()
				for _, r := range recs {
					if r.Claimed {
						seen[r.MsgID]++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, tasks, "every task claimed")
	for id, n := range seen {
		require.Equal(t, 1, n, "message %d claimed once", id)
	}
	require.Equal(t, tasks, fx.Val[int](t, db, "select count(*)::int from pgflow.step_tasks where status = 'started' and attempts_count = 1"))
	require.Equal(t, 0, fx.Val[int](t, db, "select count(*)::int from pgmq.q_race where read_ct <> 1"))
}
