package sqlapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// planLog collects the plans auto_explain sends a session as notices, and the statements the session's client
// sent, so that a plan can be told to be the client's own statement or one the engine's functions ran inside it.
type planLog struct {
	mu    sync.Mutex
	plans []string
	sent  []string
}

func (l *planLog) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.plans = append(l.plans, n.Message)
}

func (l *planLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, d.SQL)
	return ctx
}

func (l *planLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *planLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (l *planLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, d.SQL)
}

func (l *planLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// compiled returns the plans that were JIT-compiled, split into the client's own statements and the statements
// run inside them.
func (l *planLog) compiled() (own, nested []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.plans {
		if !strings.Contains(p, "\nJIT:") {
			continue
		}
		mine := false
		for _, s := range l.sent {
			if strings.Contains(p, "Query Text: "+s) {
				mine = true
				break
			}
		}
		if mine {
			own = append(own, p)
		} else {
			nested = append(nested, p)
		}
	}
	return own, nested
}

// The engine's statements never JIT-compile, whatever the session's settings and the planner's estimates: a
// generic plan's cost grows with the tables' and indexes' sizes (an index keeps its pages after a prune), and
// past jit_above_cost every call compiled its statements again, some 30 ms for a claim that otherwise costs about
// one (docs/performance.md, "JIT compilation"). The session here JIT-compiles every plan (jit_above_cost = 0);
// auto_explain reports each plan the server runs, nested ones included, and says when it was compiled.
func TestEngineStatementsNeverJITCompile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	for _, q := range []string{
		`select pgflow.create_flow('jit_flow', max_attempts => 1)`,
		`select pgflow.add_step('jit_flow', 'work')`,
	} {
		_, err := db.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	const worker = "cccccccc-0000-0000-0000-000000000001"
	require.NoError(t, sqlapi.RegisterWorker(ctx, db.Pool, worker, "jit_flow", "jit"))
	var available bool
	require.NoError(t, db.Pool.QueryRow(ctx, `select pg_jit_available()`).Scan(&available))
	if !available {
		t.Skip("this server has no JIT provider (llvmjit), so nothing here can be compiled")
	}

	log := &planLog{}
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 1
	cfg.ConnConfig.OnNotice = log.notice
	cfg.ConnConfig.Tracer = log
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `load 'auto_explain'; set auto_explain.log_min_duration = 0;
			set auto_explain.log_nested_statements = on; set auto_explain.log_level = notice;
			set jit = on; set jit_above_cost = 0`)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// The session compiles what it plans: its own statement here (the check can see a compiled plan).
	var n int64
	require.NoError(t, pool.QueryRow(ctx, `select count(*) from generate_series(1, 3)`).Scan(&n))
	own, nested := log.compiled()
	require.Len(t, own, 1, "the session's own statement is JIT-compiled")
	require.Empty(t, nested)

	runs, notes, err := sqlapi.StartFlowsWithStatesDeferred(ctx, pool, "jit_flow",
		[]json.RawMessage{json.RawMessage(`{"a":1}`), json.RawMessage(`{"a":2}`)})
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.NoError(t, notes.Send(ctx, pool))
	claimed, _, _, err := sqlapi.ReadAndStartTasks(ctx, pool, "jit_flow", "jit_flow", worker, 10, 30)
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	done, err := sqlapi.CompleteTasks(ctx, pool, []sqlapi.TaskResult{{RunID: claimed[0].RunID,
		StepSlug: claimed[0].StepSlug, TaskIndex: claimed[0].TaskIndex, Output: json.RawMessage(`1`),
		Attempt: claimed[0].Attempt}})
	require.NoError(t, err)
	require.Equal(t, sqlapi.OutcomeRecorded, done[0].Outcome)
	_, failNotes, err := sqlapi.FailTaskAt(ctx, pool, sqlapi.TaskRef{RunID: claimed[1].RunID,
		StepSlug: claimed[1].StepSlug, TaskIndex: claimed[1].TaskIndex, Attempt: claimed[1].Attempt}, "boom", false, nil)
	require.NoError(t, err)
	require.NoError(t, failNotes.Send(ctx, pool))
	for _, r := range runs {
		got, err := sqlapi.GetRunWithStates(ctx, pool, r.Run.RunID)
		require.NoError(t, err)
		require.NotEqual(t, "started", got.Run.Status, "run %s", r.Run.RunID)
	}

	own, nested = log.compiled()
	require.Greater(t, len(own), 1, "the client's statements stay JIT-compiled: the session's settings hold")
	require.Empty(t, nested, "statements the engine's functions ran were JIT-compiled")
}
