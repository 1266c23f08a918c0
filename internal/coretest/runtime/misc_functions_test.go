package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// poll_for_tasks is a deprecated stub: a NOTICE, no rows, no claims.
func TestPollForTasksIsADeprecatedStub(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	fx.SetupFlow(t, d.Pool, "sequential")
	run := fx.StartFlow(t, d.Pool, "sequential", `{}`)

	var notices []string
	cfg := d.Pool.Config().ConnConfig.Copy().Config
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	pc, err := pgconn.ConnectConfig(fx.Ctx(t), &cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pc.Close(context.Background()) })
	res := pc.ExecParams(fx.Ctx(t), "select count(*) from pgflow.poll_for_tasks('sequential', 5, 10)", nil, nil, nil, nil).Read()
	require.NoError(t, res.Err)
	require.Equal(t, "0", string(res.Rows[0][0]))
	require.Len(t, notices, 1)
	require.Contains(t, notices[0], "deprecated")
	require.Contains(t, notices[0], "sequential")
	require.Equal(t, "queued", fx.GetTask(t, d.Pool, run.RunID, "first", 0).Status)
	require.Equal(t, 0, fx.Val[int](t, d.Pool, "select coalesce(sum(read_ct), 0)::int from pgmq.q_sequential"))
}

func TestArchiveTaskMessage(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "two_roots")
	run := fx.StartFlow(t, db, "two_roots", `{}`)
	a := *fx.GetTask(t, db, run.RunID, "root_a", 0).MessageID
	b := *fx.GetTask(t, db, run.RunID, "root_b", 0).MessageID
	fx.Exec(t, db, "select pgflow._archive_task_message($1, 'root_a', 0)", run.RunID)
	require.True(t, fx.InArchive(t, db, "two_roots", a))
	require.True(t, fx.InQueue(t, db, "two_roots", b))
	require.Equal(t, "queued", fx.GetTask(t, db, run.RunID, "root_a", 0).Status, "only the message moves")
	// Repeating it, or naming unknown tasks, is a no-op.
	fx.Exec(t, db, "select pgflow._archive_task_message($1, 'root_a', 0)", run.RunID)
	fx.Exec(t, db, "select pgflow._archive_task_message($1, 'nope', 0)", run.RunID)
	fx.Exec(t, db, "select pgflow._archive_task_message(gen_random_uuid(), 'root_a', 0)")
	require.Len(t, fx.ArchivedMessages(t, db, "two_roots"), 1)
}

// Concurrent completions of the tasks of one map (from many connections) aggregate every output exactly once and
// start the dependent exactly once.
func TestConcurrentCompletionsOfOneMap(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'after', array['m'])")
	const n = 40
	run := fx.Val[string](t, db, "select run_id::text from pgflow.start_flow('f', (select jsonb_agg(i) from generate_series(0, $1 - 1) i))", n)
	require.Len(t, fx.ReadAndStart(t, db, "f", 60, n), n)

	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rows, err := fx.TryCompleteTask(context.Background(), db, run, "m", i, fmt.Sprint(i*10))
			if err == nil {
				rows.Close()
				err = rows.Err()
			}
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	m := fx.GetStep(t, db, run, "m")
	require.Equal(t, "completed", m.Status)
	want := "["
	for i := 0; i < n; i++ {
		if i > 0 {
			want += ", "
		}
		want += fmt.Sprint(i * 10)
	}
	require.Equal(t, want+"]", m.Output)
	require.Len(t, fx.GetTasks(t, db, run, "after"), 1)
	require.Equal(t, "started", fx.GetStep(t, db, run, "after").Status)
	require.Equal(t, 1, fx.GetRun(t, db, run).RemainingSteps)
}

// A completion racing a failure of the same task: exactly one of them wins; the state stays consistent.
func TestCompleteAndFailRacingOnOneTask(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f', max_attempts => 1)")
	fx.Exec(t, db, "select pgflow.add_step('f', 'a')")
	for round := 0; round < 10; round++ {
		run := fx.StartFlow(t, db, "f", `{}`)
		id := *fx.GetTask(t, db, run.RunID, "a", 0).MessageID
		fx.EnsureWorker(t, db, "f", fx.DefaultWorker)
		require.Len(t, fx.StartTasks(t, db, "f", []int64{id}, fx.DefaultWorker), 1)
		var wg sync.WaitGroup
		var cErr, fErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			rows, err := fx.TryCompleteTask(context.Background(), db, run.RunID, "a", 0, `"ok"`)
			if err == nil {
				rows.Close()
				err = rows.Err()
			}
			cErr = err
		}()
		go func() {
			defer wg.Done()
			_, fErr = db.Exec(context.Background(), "select pgflow.fail_task($1, 'a', 0, 'no')", run.RunID)
		}()
		wg.Wait()
		require.NoError(t, cErr)
		require.NoError(t, fErr)
		r := fx.GetRun(t, db, run.RunID)
		tk := fx.GetTask(t, db, run.RunID, "a", 0)
		switch tk.Status {
		case "completed":
			require.Equal(t, "completed", r.Status)
			require.Equal(t, "completed", fx.GetStep(t, db, run.RunID, "a").Status)
		case "failed":
			require.Equal(t, "failed", r.Status)
			require.Equal(t, "failed", fx.GetStep(t, db, run.RunID, "a").Status)
		default:
			t.Fatalf("round %d: task ended %s", round, tk.Status)
		}
	}
}

// Step outputs exist only on completed steps; the constraint's error text is part of the API.
func TestStepOutputOnlyForCompletedSteps(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	run := fx.StartFlow(t, db, "sequential", `{}`)
	_, err := db.Exec(fx.Ctx(t), `update pgflow.step_states set output = '1' where run_id = $1 and step_slug = 'first'`, run.RunID)
	requirePgError(t, err, "23514",
		`new row for relation "step_states" violates check constraint "output_only_for_completed_or_null"`)
}
