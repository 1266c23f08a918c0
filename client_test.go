package pgflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// These tests drive runs without a worker: clProcess claims and completes tasks with the SQL functions, the way a
// worker does.

const clWait = 60 * time.Second

func clClient(t *testing.T, db *pgtest.DB, cfgs ...ClientConfig) *Client {
	t.Helper()
	var cfg ClientConfig
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	c, err := NewClient(db.Pool, &cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// afterRead makes every run read of WaitRun and Subscribe call fn with what it read.
func afterRead(c *Client, fn func(*Run)) {
	read := c.read
	c.read = func(ctx context.Context, id string) (*Run, error) {
		r, err := read(ctx, id)
		if err == nil {
			fn(r)
		}
		return r, err
	}
}

func clExec(t *testing.T, pool *pgxpool.Pool, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		_, err := pool.Exec(context.Background(), q)
		require.NoError(t, err, q)
	}
}

// clFlows defines:
//
//	chain:   first -> second
//	rootmap: each (map over the run input)
//	fragile: only (one attempt)
//	other:   only
func clFlows(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	clExec(t, pool,
		`select pgflow.create_flow('chain')`,
		`select pgflow.add_step('chain', 'first')`,
		`select pgflow.add_step('chain', 'second', array['first'])`,
		`select pgflow.create_flow('rootmap')`,
		`select pgflow.add_step('rootmap', 'each', step_type => 'map')`,
		`select pgflow.create_flow('fragile', max_attempts => 1)`,
		`select pgflow.add_step('fragile', 'only')`,
		`select pgflow.create_flow('other')`,
		`select pgflow.add_step('other', 'only')`,
	)
}

// clTask is one claimed task as clProcess hands it to its callback.
type clTask struct {
	RunID     string
	StepSlug  string
	TaskIndex int
	Input     json.RawMessage
}

// clProcess claims every visible task of flow and completes it with the JSON output fn returns, or fails it when
// fn returns an error. It returns the number of tasks handled.
func clProcess(t *testing.T, pool *pgxpool.Pool, flow string, fn func(clTask) (string, error)) int {
	t.Helper()
	ctx := context.Background()
	const worker = "0a0a0a0a-0000-4000-8000-00000000c11e"
	_, err := pool.Exec(ctx, `select pgflow.register_worker($1::uuid, $2, 'client-test')`, worker, flow)
	require.NoError(t, err)

	var ids []int64
	rows, err := pool.Query(ctx, `select msg_id from pgmq.read($1, 30, 100)`, flow)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	if len(ids) == 0 {
		return 0
	}
	rows, err = pool.Query(ctx,
		`select run_id::text, step_slug, task_index, input from pgflow.start_tasks($1, $2::bigint[], $3::uuid)`,
		flow, ids, worker)
	require.NoError(t, err)
	var tasks []clTask
	for rows.Next() {
		var tk clTask
		require.NoError(t, rows.Scan(&tk.RunID, &tk.StepSlug, &tk.TaskIndex, &tk.Input))
		tasks = append(tasks, tk)
	}
	require.NoError(t, rows.Err())
	for _, tk := range tasks {
		out, ferr := fn(tk)
		if ferr != nil {
			_, err = pool.Exec(ctx, `select pgflow.fail_task($1::uuid, $2, $3, $4)`, tk.RunID, tk.StepSlug, tk.TaskIndex, ferr.Error())
		} else {
			_, err = pool.Exec(ctx, `select pgflow.complete_task($1::uuid, $2, $3, $4::jsonb)`, tk.RunID, tk.StepSlug, tk.TaskIndex, out)
		}
		require.NoError(t, err)
	}
	return len(tasks)
}

// clDrive processes flow's tasks until the run is terminal.
func clDrive(t *testing.T, c *Client, flow, runID string, fn func(clTask) (string, error)) {
	t.Helper()
	deadline := time.Now().Add(clWait)
	for {
		run, err := c.GetRun(context.Background(), runID)
		require.NoError(t, err)
		if run.Status.Terminal() {
			return
		}
		require.True(t, time.Now().Before(deadline), "run %s never finished", runID)
		if clProcess(t, c.pool, flow, fn) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func clEcho(tk clTask) (string, error) {
	return fmt.Sprintf(`{"step": %q, "index": %d}`, tk.StepSlug, tk.TaskIndex), nil
}

func clCountRuns(t *testing.T, pool *pgxpool.Pool, runID string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `select count(*) from pgflow.runs where run_id = $1::uuid`, runID).Scan(&n))
	return n
}

func clCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), clWait)
	t.Cleanup(cancel)
	return ctx
}

func TestClientStartAndGetRun(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db)
	ctx := clCtx(t)

	run, err := c.StartRunJSON(ctx, "chain", json.RawMessage(`{"user": 7}`), nil)
	require.NoError(t, err)
	_, err = canonicalRunID(run.ID)
	require.NoError(t, err)
	require.Equal(t, "chain", run.FlowSlug)
	require.Equal(t, RunStarted, run.Status)
	require.JSONEq(t, `{"user": 7}`, string(run.Input))
	require.Nil(t, run.Output)
	require.Equal(t, 2, run.RemainingSteps)
	require.False(t, run.StartedAt.IsZero())
	require.Nil(t, run.CompletedAt)
	require.Nil(t, run.FailedAt)
	require.NoError(t, run.Err())
	require.Len(t, run.Steps, 2)
	first, second := run.Step("first"), run.Step("second")
	require.Equal(t, StepStarted, first.Status)
	require.Equal(t, 1, *first.RemainingTasks)
	require.Equal(t, 1, *first.InitialTasks)
	require.NotNil(t, first.StartedAt)
	require.Equal(t, StepCreated, second.Status)
	require.Nil(t, second.RemainingTasks)
	require.Equal(t, 1, second.RemainingDeps)
	require.Nil(t, run.Step("missing"))

	got, err := c.GetRun(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, run, got)

	// The id is accepted in any spelling PostgreSQL accepts.
	got, err = c.GetRun(ctx, "{"+strings.ToUpper(run.ID)+"}")
	require.NoError(t, err)
	require.Equal(t, run.ID, got.ID)

	clDrive(t, c, "chain", run.ID, clEcho)
	done, err := c.GetRun(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, RunCompleted, done.Status)
	require.NotNil(t, done.CompletedAt)
	require.Equal(t, 0, done.RemainingSteps)
	require.JSONEq(t, `{"step": "first", "index": 0}`, string(done.Step("first").Output))
	require.JSONEq(t, `{"second": {"step": "second", "index": 0}}`, string(done.Output))
}

type clInput struct {
	Name string `json:"name"`
}

// clFalsyFlow is a DSL flow whose four root steps produce 0, false, "" and null. Its handlers are never run
// here: the test completes the tasks through SQL with exactly those outputs.
func clFalsyFlow() (*Flow[clInput], StepHandle[int], StepHandle[bool], StepHandle[string], StepHandle[*int]) {
	f := NewFlow[clInput]("falsy")
	zero := Step(f, "zero", func(context.Context, *Task[clInput]) (int, error) { return 0, nil })
	no := Step(f, "no", func(context.Context, *Task[clInput]) (bool, error) { return false, nil })
	empty := Step(f, "empty", func(context.Context, *Task[clInput]) (string, error) { return "", nil })
	nothing := Step(f, "nothing", func(context.Context, *Task[clInput]) (*int, error) { return nil, nil })
	return f, zero, no, empty, nothing
}

func TestClientOutputsKeepFalsyValues(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	c := clClient(t, db)
	ctx := clCtx(t)

	f, zero, no, empty, nothing := clFalsyFlow()
	stmts, err := f.CompileSQL()
	require.NoError(t, err)
	clExec(t, db.Pool, stmts...)

	run, err := StartRun(ctx, c, f, clInput{Name: ""}, nil)
	require.NoError(t, err)
	require.JSONEq(t, `{"name": ""}`, string(run.Input))
	_, err = RunOutput[map[string]json.RawMessage](run)
	require.ErrorIs(t, err, ErrRunNotCompleted)
	_, err = StepOutput(run, zero)
	require.ErrorIs(t, err, ErrStepNotCompleted)
	require.ErrorContains(t, err, `step "zero"`)
	require.ErrorContains(t, err, "started")

	outputs := map[string]string{"zero": `0`, "no": `false`, "empty": `""`, "nothing": `null`}
	clDrive(t, c, "falsy", run.ID, func(tk clTask) (string, error) { return outputs[tk.StepSlug], nil })

	run, err = c.WaitRun(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, RunCompleted, run.Status)
	for slug, raw := range outputs {
		require.Equal(t, raw, string(run.Step(slug).Output), "raw output of %s", slug)
	}
	require.JSONEq(t, `{"zero": 0, "no": false, "empty": "", "nothing": null}`, string(run.Output))

	z, err := StepOutput(run, zero)
	require.NoError(t, err)
	require.Equal(t, 0, z)
	n, err := StepOutput(run, no)
	require.NoError(t, err)
	require.False(t, n)
	e, err := StepOutput(run, empty)
	require.NoError(t, err)
	require.Equal(t, "", e)
	p, err := StepOutput(run, nothing)
	require.NoError(t, err)
	require.Nil(t, p)

	type out struct {
		Zero    *int    `json:"zero"`
		No      *bool   `json:"no"`
		Empty   *string `json:"empty"`
		Nothing *int    `json:"nothing"`
	}
	o, err := RunOutput[out](run)
	require.NoError(t, err)
	require.NotNil(t, o.Zero)
	require.Equal(t, 0, *o.Zero)
	require.NotNil(t, o.No)
	require.False(t, *o.No)
	require.NotNil(t, o.Empty)
	require.Equal(t, "", *o.Empty)
	require.Nil(t, o.Nothing)

	// A handle of a step the run's flow does not have.
	g := NewFlow[clInput]("ghost")
	ghost := Step(g, "ghost", func(context.Context, *Task[clInput]) (int, error) { return 0, nil })
	_, err = StepOutput(run, ghost)
	require.ErrorIs(t, err, ErrStepNotFound)
	require.ErrorContains(t, err, `"ghost"`)
}

func TestClientStartRunTypedRejectsInvalidFlow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	c := clClient(t, db)
	f := NewFlow[clInput]("1bad")
	_, err := StartRun(clCtx(t), c, f, clInput{}, nil)
	require.ErrorIs(t, err, ErrInvalidSlug)
}

func TestClientIdempotentStartSequential(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db)
	ctx := clCtx(t)
	const id = "6a1d6d1e-3f7e-4b53-9c1a-2d2c0e0f0001"

	r1, err := c.StartRunJSON(ctx, "chain", json.RawMessage(`{"n": 1}`), &StartOpts{RunID: id})
	require.NoError(t, err)
	require.Equal(t, id, r1.ID)

	// Same id, other spelling, other input: the existing run is returned as it is now.
	clProcess(t, db.Pool, "chain", clEcho)
	r2, err := c.StartRunJSON(ctx, "chain", json.RawMessage(`{"n": 2}`), &StartOpts{RunID: strings.ToUpper(id)})
	require.NoError(t, err)
	require.Equal(t, id, r2.ID)
	require.JSONEq(t, `{"n": 1}`, string(r2.Input))
	require.Equal(t, StepCompleted, r2.Step("first").Status, "the second start returns the current state")
	require.Equal(t, 1, clCountRuns(t, db.Pool, id))

	var tasks int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.step_tasks where run_id = $1::uuid and step_slug = 'first'`, id).Scan(&tasks))
	require.Equal(t, 1, tasks)
}

func TestClientIdempotentStartConcurrent(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db)
	ctx := clCtx(t)
	const id = "6a1d6d1e-3f7e-4b53-9c1a-2d2c0e0f0002"

	const n = 8
	var wg sync.WaitGroup
	runs := make([]*Run, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			runs[i], errs[i] = c.StartRunJSON(ctx, "chain", json.RawMessage(fmt.Sprintf(`{"caller": %d}`, i)), &StartOpts{RunID: id})
		})
	}
	close(start)
	wg.Wait()
	var inputs []string
	for i := range n {
		require.NoError(t, errs[i], "caller %d", i)
		require.Equal(t, id, runs[i].ID)
		inputs = append(inputs, string(runs[i].Input))
	}
	for _, in := range inputs {
		require.Equal(t, inputs[0], in, "every caller gets the one run")
	}
	require.Equal(t, 1, clCountRuns(t, db.Pool, id))
	var msgs int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgmq.q_chain`).Scan(&msgs))
	require.Equal(t, 1, msgs, "one run, one task message")
}

func TestClientRunIDOfAnotherFlow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db)
	ctx := clCtx(t)
	const id = "6a1d6d1e-3f7e-4b53-9c1a-2d2c0e0f0003"

	_, err := c.StartRunJSON(ctx, "chain", json.RawMessage(`{}`), &StartOpts{RunID: id})
	require.NoError(t, err)
	_, err = c.StartRunJSON(ctx, "other", json.RawMessage(`{}`), &StartOpts{RunID: id})
	require.ErrorIs(t, err, ErrRunIDConflict)
	require.ErrorContains(t, err, `"chain"`)
	require.ErrorContains(t, err, `"other"`)
	require.ErrorContains(t, err, id)

	_, err = c.StartRunJSON(ctx, "chain", json.RawMessage(`{}`), &StartOpts{RunID: "run-1"})
	require.ErrorIs(t, err, ErrInvalidRunID)
	require.ErrorContains(t, err, `"run-1"`)
}

func TestClientStartErrors(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db)
	ctx := clCtx(t)

	_, err := c.StartRunJSON(ctx, "no_such_flow", json.RawMessage(`{}`), nil)
	require.ErrorIs(t, err, ErrFlowNotFound)
	require.ErrorContains(t, err, `"no_such_flow"`)

	_, err = c.StartRunJSON(ctx, "rootmap", json.RawMessage(`{"items": []}`), nil)
	require.ErrorContains(t, err, "Flow rootmap has root map steps but input is not an array (got object)")
	_, err = c.StartRunJSON(ctx, "rootmap", nil, nil)
	require.ErrorContains(t, err, "Flow rootmap has root map steps but input is not an array (got null)")

	_, err = c.StartRunJSON(ctx, "chain", json.RawMessage(`{"broken": `), nil)
	require.ErrorContains(t, err, "not valid JSON")

	var runs int
	require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.runs`).Scan(&runs))
	require.Zero(t, runs)
}

func TestClientStartRunTx(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db)
	ctx := clCtx(t)

	// Rolled back: no run.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	gone, err := c.StartRunJSONTx(ctx, tx, "chain", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = c.GetRun(ctx, gone.ID)
	require.ErrorIs(t, err, ErrRunNotFound)

	// Committed, with errors along the way that must not abort the transaction.
	const id = "6a1d6d1e-3f7e-4b53-9c1a-2d2c0e0f0004"
	tx, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	r1, err := c.StartRunJSONTx(ctx, tx, "chain", json.RawMessage(`{"a": 1}`), &StartOpts{RunID: id})
	require.NoError(t, err)
	_, err = c.StartRunJSONTx(ctx, tx, "no_such_flow", json.RawMessage(`{}`), nil)
	require.ErrorIs(t, err, ErrFlowNotFound)
	_, err = c.StartRunJSONTx(ctx, tx, "rootmap", json.RawMessage(`7`), nil)
	require.ErrorContains(t, err, "not an array (got number)")
	r2, err := c.StartRunJSONTx(ctx, tx, "chain", json.RawMessage(`{"a": 2}`), &StartOpts{RunID: id})
	require.NoError(t, err)
	require.Equal(t, r1.ID, r2.ID)
	require.JSONEq(t, `{"a": 1}`, string(r2.Input))
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 1, clCountRuns(t, db.Pool, id))
}

// A concurrent transaction inserts the same run id and commits while StartRunTx waits on it: the unique
// violation is rolled back to a savepoint, the caller's transaction stays usable and gets the committed run.
func TestClientStartRunTxConcurrentDuplicate(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db)
	ctx := clCtx(t)
	const id = "6a1d6d1e-3f7e-4b53-9c1a-2d2c0e0f0005"

	first, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(ctx) }()
	_, err = c.StartRunJSONTx(ctx, first, "chain", json.RawMessage(`{"who": "first"}`), &StartOpts{RunID: id})
	require.NoError(t, err)

	second, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = second.Rollback(ctx) }()
	type result struct {
		run *Run
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := c.StartRunJSONTx(ctx, second, "chain", json.RawMessage(`{"who": "second"}`), &StartOpts{RunID: id})
		done <- result{r, err}
	}()

	// Wait until the second start blocks on the first one's uncommitted row, then commit the first.
	deadline := time.Now().Add(clWait)
	for {
		var waiting int
		require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`).Scan(&waiting))
		if waiting > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "second start never blocked")
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, first.Commit(ctx))

	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, id, res.run.ID)
	require.JSONEq(t, `{"who": "first"}`, string(res.run.Input))
	var one int
	require.NoError(t, second.QueryRow(ctx, `select 1`).Scan(&one), "the caller's transaction is still usable")
	require.NoError(t, second.Commit(ctx))
	require.Equal(t, 1, clCountRuns(t, db.Pool, id))
}

func TestClientWaitRunCompletesWhileWaiting(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	// A poll interval longer than the test: only events can end the wait.
	c := clClient(t, db, ClientConfig{PollInterval: time.Hour})
	ctx := clCtx(t)

	run, err := c.StartRunJSON(ctx, "chain", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	reads := make(chan *Run, 100)
	afterRead(c, func(r *Run) { reads <- r })
	type result struct {
		run *Run
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := c.WaitRun(ctx, run.ID)
		done <- result{r, err}
	}()
	first := <-reads
	require.Equal(t, RunStarted, first.Status, "WaitRun is waiting on a running run")

	clDrive(t, c, "chain", run.ID, clEcho)
	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, RunCompleted, res.run.Status)
	require.JSONEq(t, `{"second": {"step": "second", "index": 0}}`, string(res.run.Output))
}

func TestClientWaitRunAlreadyCompleted(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db, ClientConfig{PollInterval: time.Hour})
	ctx := clCtx(t)

	// A map over an empty array completes inside the start.
	run, err := c.StartRunJSON(ctx, "rootmap", json.RawMessage(`[]`), nil)
	require.NoError(t, err)
	require.Equal(t, RunCompleted, run.Status)
	require.JSONEq(t, `{"each": []}`, string(run.Output))

	got, err := c.WaitRun(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, run, got)
}

func TestClientWaitRunFailed(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db, ClientConfig{PollInterval: time.Hour})
	ctx := clCtx(t)

	run, err := c.StartRunJSON(ctx, "fragile", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	done := make(chan error, 1)
	var got *Run
	go func() {
		var err error
		got, err = c.WaitRun(ctx, run.ID)
		done <- err
	}()
	clDrive(t, c, "fragile", run.ID, func(clTask) (string, error) { return "", errors.New("disk on fire") })
	require.NoError(t, <-done)
	require.Equal(t, RunFailed, got.Status)
	require.NotNil(t, got.FailedAt)
	require.Nil(t, got.Output)
	require.Equal(t, StepFailed, got.Step("only").Status)
	require.Equal(t, "disk on fire", got.Step("only").ErrorMessage)
	require.ErrorIs(t, got.Err(), ErrRunFailed)
	require.ErrorContains(t, got.Err(), `step "only": disk on fire`)
	_, err = RunOutput[json.RawMessage](got)
	require.ErrorIs(t, err, ErrRunFailed)
}

// The run ends right after WaitRun's first read and before it waits: the event (or the listener's activation)
// still ends the wait, although polling would take an hour.
func TestClientWaitRunNoLostEvent(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db, ClientConfig{PollInterval: time.Hour})
	ctx := clCtx(t)

	run, err := c.StartRunJSON(ctx, "chain", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	var once sync.Once
	var sawRunning bool
	afterRead(c, func(r *Run) {
		once.Do(func() {
			sawRunning = r.Status == RunStarted
			clDrive(t, c, "chain", run.ID, clEcho) // completes the run between the read and the wait
		})
	})
	got, err := c.WaitRun(ctx, run.ID)
	require.NoError(t, err)
	require.True(t, sawRunning)
	require.Equal(t, RunCompleted, got.Status)
}

// The same for Subscribe: the run ends between Subscribe's read and the first event delivery.
func TestClientSubscribeNoLostEvent(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db, ClientConfig{PollInterval: time.Hour})
	ctx := clCtx(t)

	run, err := c.StartRunJSON(ctx, "fragile", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	var once sync.Once
	afterRead(c, func(*Run) {
		once.Do(func() {
			clDrive(t, c, "fragile", run.ID, func(clTask) (string, error) { return "", errors.New("boom") })
		})
	})
	events, err := c.Subscribe(ctx, run.ID)
	require.NoError(t, err)
	var got []string
	for _, ev := range clDrain(t, events) {
		got = append(got, ev.Event)
	}
	require.Equal(t, []string{"step:only:failed", "run:failed"}, got)
}

func TestClientWaitRunPollingFallback(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	// The listener can never connect (nothing listens on that port), so only polling can end the wait.
	cfg := db.Pool.Config().ConnConfig.Copy()
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nil, errors.New("listener connection disabled by the test")
	}
	cfg.Fallbacks = nil
	c := clClient(t, db, ClientConfig{PollInterval: 20 * time.Millisecond, ListenConfig: cfg})
	ctx := clCtx(t)

	run, err := c.StartRunJSON(ctx, "chain", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	done := make(chan error, 1)
	var got *Run
	go func() {
		var err error
		got, err = c.WaitRun(ctx, run.ID)
		done <- err
	}()
	clDrive(t, c, "chain", run.ID, clEcho)
	require.NoError(t, <-done)
	require.Equal(t, RunCompleted, got.Status)
	require.Zero(t, c.listener.BackendPID())
}

func TestClientSubscribeEvents(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db)
	ctx := clCtx(t)

	run, err := c.StartRunJSON(ctx, "chain", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	events, err := c.Subscribe(ctx, run.ID)
	require.NoError(t, err)
	clDrive(t, c, "chain", run.ID, clEcho)

	got := clDrain(t, events)
	var names []string
	for _, ev := range got {
		names = append(names, ev.Event)
		require.Equal(t, run.ID, ev.RunID)
		require.Equal(t, "chain", ev.FlowSlug)
	}
	require.Equal(t, []string{"step:first:completed", "step:second:started", "step:second:completed", "run:completed"}, names)
	require.Equal(t, Event{Type: "step:started", Event: "step:second:started", RunID: run.ID, FlowSlug: "chain", StepSlug: "second", Status: "started"}, got[1])
	last := got[len(got)-1]
	require.Equal(t, Event{Type: "run:completed", Event: "run:completed", RunID: run.ID, FlowSlug: "chain", Status: "completed"}, last)
	require.True(t, last.IsRunEvent())
	require.True(t, last.IsTerminal())
	require.False(t, got[0].IsRunEvent())
	require.False(t, got[0].IsTerminal())
}

func TestClientSubscribeTerminalRunAndCancel(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db)
	ctx := clCtx(t)

	done, err := c.StartRunJSON(ctx, "rootmap", json.RawMessage(`[]`), nil)
	require.NoError(t, err)
	events, err := c.Subscribe(ctx, done.ID)
	require.NoError(t, err)
	_, open := <-events
	require.False(t, open, "the channel of an ended run is closed at once")

	running, err := c.StartRunJSON(ctx, "chain", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	subCtx, cancel := context.WithCancel(ctx)
	events, err = c.Subscribe(subCtx, running.ID)
	require.NoError(t, err)
	cancel()
	clDrain(t, events)
}

// clDrain reads events until the channel is closed.
func clDrain(t *testing.T, events <-chan Event) []Event {
	t.Helper()
	var got []Event
	timeout := time.After(clWait)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return got
			}
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("event channel not closed within %s; got %v", clWait, got)
		}
	}
}

// The listener's connection is killed while the run is waited for and subscribed to, and the run completes while
// the listener cannot reconnect: its events are lost, and WaitRun and Subscribe finish by re-reading the run once
// the listener is back.
func TestClientListenerReconnect(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)

	var gateMu sync.Mutex
	gate := make(chan struct{})
	close(gate) // open
	cfg := db.Pool.Config().ConnConfig.Copy()
	dialer := &net.Dialer{}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		gateMu.Lock()
		g := gate
		gateMu.Unlock()
		select {
		case <-g:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return dialer.DialContext(ctx, network, addr)
	}
	c := clClient(t, db, ClientConfig{PollInterval: time.Hour, ListenConfig: cfg})
	ctx := clCtx(t)

	run, err := c.StartRunJSON(ctx, "chain", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	events, err := c.Subscribe(ctx, run.ID) // returns once the listener is active
	require.NoError(t, err)
	waitDone := make(chan error, 1)
	var waited *Run
	go func() {
		var err error
		waited, err = c.WaitRun(ctx, run.ID)
		waitDone <- err
	}()

	// One event while connected.
	clProcess(t, db.Pool, "chain", clEcho)
	ev := <-events
	require.Equal(t, "step:first:completed", ev.Event)

	// Close the gate, kill the connection, and finish the run while the listener is away.
	gateMu.Lock()
	gate = make(chan struct{})
	gateMu.Unlock()
	pid := c.listener.BackendPID()
	require.NotZero(t, pid)
	var ok bool
	require.NoError(t, db.Pool.QueryRow(ctx, `select pg_terminate_backend($1)`, int32(pid)).Scan(&ok))
	require.True(t, ok)
	deadline := time.Now().Add(clWait)
	for c.listener.BackendPID() != 0 {
		require.True(t, time.Now().Before(deadline), "listener did not notice the terminated connection")
		time.Sleep(5 * time.Millisecond)
	}
	clDrive(t, c, "chain", run.ID, clEcho)

	gateMu.Lock()
	close(gate)
	gateMu.Unlock()

	require.NoError(t, <-waitDone)
	require.Equal(t, RunCompleted, waited.Status)
	var rest []string
	for _, ev := range clDrain(t, events) {
		rest = append(rest, ev.Event)
	}
	// Events committed while disconnected are lost; nothing is synthesized. (step:second:started may have been
	// read from the socket before the kill, so only the lost ones are certain.)
	require.NotContains(t, rest, "step:second:completed")
	require.NotContains(t, rest, "run:completed")
	newPID := c.listener.BackendPID()
	require.NotZero(t, newPID)
	require.NotEqual(t, pid, newPID)
}

func TestClientUnknownAndInvalidRun(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	c := clClient(t, db)
	ctx := clCtx(t)
	const id = "00000000-0000-4000-8000-0000000000ff"

	_, err := c.GetRun(ctx, id)
	require.ErrorIs(t, err, ErrRunNotFound)
	require.ErrorContains(t, err, id)
	_, err = c.WaitRun(ctx, id)
	require.ErrorIs(t, err, ErrRunNotFound)
	require.ErrorContains(t, err, id)
	_, err = c.Subscribe(ctx, id)
	require.ErrorIs(t, err, ErrRunNotFound)

	for _, bad := range []string{"", "nope", "00000000-0000-4000-8000-00000000000", "zz000000-0000-4000-8000-000000000000"} {
		_, err = c.GetRun(ctx, bad)
		require.ErrorIs(t, err, ErrInvalidRunID, bad)
		_, err = c.WaitRun(ctx, bad)
		require.ErrorIs(t, err, ErrInvalidRunID, bad)
		_, err = c.Subscribe(ctx, bad)
		require.ErrorIs(t, err, ErrInvalidRunID, bad)
	}
}

func TestClientClose(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	clFlows(t, db.Pool)
	c := clClient(t, db, ClientConfig{PollInterval: time.Hour})
	ctx := clCtx(t)

	run, err := c.StartRunJSON(ctx, "chain", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	events, err := c.Subscribe(ctx, run.ID)
	require.NoError(t, err)
	waitDone := make(chan error, 1)
	go func() {
		_, err := c.WaitRun(ctx, run.ID)
		waitDone <- err
	}()

	c.Close()
	clDrain(t, events)
	require.ErrorIs(t, <-waitDone, ErrClientClosed)
	_, err = c.WaitRun(ctx, run.ID)
	require.ErrorIs(t, err, ErrClientClosed)
	_, err = c.Subscribe(ctx, run.ID)
	require.ErrorIs(t, err, ErrClientClosed)
	c.Close()

	// Reads and starts keep working: they only use the pool.
	_, err = c.GetRun(ctx, run.ID)
	require.NoError(t, err)
}

func TestCanonicalRunID(t *testing.T) {
	t.Parallel()
	const want = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
	for _, in := range []string{
		want,
		"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
		"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
		"a0eebc999c0b4ef8bb6d6bb9bd380a11",
		"a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
	} {
		got, err := canonicalRunID(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "{}", "a0eebc99", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11a"} {
		_, err := canonicalRunID(in)
		require.ErrorIs(t, err, ErrInvalidRunID, in)
		require.ErrorContains(t, err, fmt.Sprintf("%q", in))
	}
}

// The client with a real worker: typed start, WaitRun, typed outputs that are falsy.
func TestClientWithWorker(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	c := clClient(t, db, ClientConfig{PollInterval: time.Hour})
	ctx := clCtx(t)

	f, zero, no, empty, nothing := clFalsyFlow()
	w, err := newWorkerFor(t, db.Pool, f, WorkerConfig{
		MaxPollWait:  200 * time.Millisecond,
		PollInterval: 20 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(t.Output(), nil)),
	})

	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-workerDone)
	})

	// The worker compiles the flow at startup; start as soon as it exists.
	var run *Run
	deadline := time.Now().Add(clWait)
	for {
		run, err = StartRun(ctx, c, f, clInput{Name: "x"}, nil)
		if !errors.Is(err, ErrFlowNotFound) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the worker never compiled the flow")
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err)

	run, err = c.WaitRun(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, RunCompleted, run.Status)
	require.JSONEq(t, `{"zero": 0, "no": false, "empty": "", "nothing": null}`, string(run.Output))
	z, err := StepOutput(run, zero)
	require.NoError(t, err)
	require.Equal(t, 0, z)
	b, err := StepOutput(run, no)
	require.NoError(t, err)
	require.False(t, b)
	s, err := StepOutput(run, empty)
	require.NoError(t, err)
	require.Equal(t, "", s)
	p, err := StepOutput(run, nothing)
	require.NoError(t, err)
	require.Nil(t, p)
}
