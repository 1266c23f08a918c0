package pgflow

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// Queue identity (v0.17.0) as the Go worker sees it: it polls its flow's queue, passes that queue to
// start_tasks, claims only tasks stored under (queue, message id) for its own flow, and leaves every other
// message exactly as it found it while the rest of the batch runs.

// jsonLogs returns a logger writing JSON lines (as an application would ship them) and the buffer behind it.
func jsonLogs(t *testing.T) (*slog.Logger, *logBuffer) {
	t.Helper()
	lb := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker logs:\n%s", lb.String())
		}
	})
	return slog.New(slog.NewJSONHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

// logRecords parses JSON log lines.
func logRecords(t *testing.T, lb *logBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(lb.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		out = append(out, rec)
	}
	return out
}

func TestWorkerClaimsFromItsQueueAndLeavesForeignMessagesUntouched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)

	// Flow "other" has a step routed (by an internal test fixture, not a public API) into the queue of flow
	// "mine", so a worker of "mine" reads a message whose task belongs to "other".
	_, err := db.Pool.Exec(ctx, `select pgflow.create_flow('other');
		select pgflow.add_step('other', 'work');
		update pgflow.steps set queue_name = 'mine' where flow_slug = 'other';`)
	require.NoError(t, err)

	mine := NewFlow[int]("mine")
	Step(mine, "double", func(ctx context.Context, tk *Task[int]) (int, error) {
		in, err := tk.FlowInput(ctx)
		return in * 2, err
	})
	_, err = db.Pool.Exec(ctx, `select pgflow.create_flow('mine'); select pgflow.add_step('mine', 'double')`)
	require.NoError(t, err)

	foreignRun := startRun(t, db.Pool, "other", map[string]string{"secret": "do-not-log-me"})
	var foreignMsg int64
	require.NoError(t, db.Pool.QueryRow(ctx,
		`select message_id from pgflow.step_tasks where run_id = $1`, foreignRun).Scan(&foreignMsg))
	// A message no task knows about, sent straight into the flow's queue.
	var strayMsg int64
	require.NoError(t, db.Pool.QueryRow(ctx,
		`select pgmq.send('mine', '{"flow_slug":"mine","step_slug":"double","secret":"do-not-log-me"}'::jsonb)`).Scan(&strayMsg))
	runs := []string{startRun(t, db.Pool, "mine", 1), startRun(t, db.Pool, "mine", 2)}

	logger, lb := jsonLogs(t)
	cfg, _ := testConfig(t)
	cfg.Logger = logger
	cfg.BatchSize = 10
	rw := startWorker(t, db.Pool, mine, cfg)

	// The valid part of the batch runs.
	for i, run := range runs {
		res := waitRun(t, db.Pool, run)
		require.Equal(t, "completed", res.Status)
		require.JSONEq(t, `{"double": `+strconv.Itoa((i+1)*2)+`}`, string(res.Output))
	}
	waitFor(t, "warnings for both unclaimed messages", func() bool {
		s := lb.String()
		return strings.Contains(s, `"msg_id":"`+strconv.FormatInt(foreignMsg, 10)+`"`) &&
			strings.Contains(s, `"msg_id":"`+strconv.FormatInt(strayMsg, 10)+`"`)
	})
	require.NoError(t, rw.stop(t))

	// The foreign task was never claimed or touched.
	var status string
	var attempts int
	var lastWorker *string
	require.NoError(t, db.Pool.QueryRow(ctx,
		`select status, attempts_count, last_worker_id::text from pgflow.step_tasks where run_id = $1`, foreignRun).
		Scan(&status, &attempts, &lastWorker))
	require.Equal(t, "queued", status)
	require.Zero(t, attempts)
	require.Nil(t, lastWorker)

	// Both messages are still in the queue and not archived.
	for _, id := range []int64{foreignMsg, strayMsg} {
		var inQueue, archived bool
		require.NoError(t, db.Pool.QueryRow(ctx, `select exists (select 1 from pgmq.q_mine where msg_id = $1)`, id).Scan(&inQueue))
		require.NoError(t, db.Pool.QueryRow(ctx, `select exists (select 1 from pgmq.a_mine where msg_id = $1)`, id).Scan(&archived))
		require.True(t, inQueue, "message %d must stay in the queue", id)
		require.False(t, archived, "message %d must not be archived", id)
	}

	// Warnings carry identifiers as strings, never message bodies.
	var warned = map[string]map[string]any{}
	for _, rec := range logRecords(t, lb) {
		if rec["level"] == "WARN" && rec["msg_id"] != nil {
			warned[rec["msg_id"].(string)] = rec
		}
	}
	foreign := warned[strconv.FormatInt(foreignMsg, 10)]
	require.NotNil(t, foreign, "no warning for the other flow's message")
	require.Equal(t, "other", foreign["task_flow"])
	require.Equal(t, "mine", foreign["queue"])
	require.Equal(t, "mine", foreign["flow"])
	stray := warned[strconv.FormatInt(strayMsg, 10)]
	require.NotNil(t, stray, "no warning for the unmatched message")
	require.Equal(t, "mine", stray["queue"])
	require.NotContains(t, lb.String(), "do-not-log-me", "a message body reached the logs")
}

func TestWorkerReportsMessageIDsBeyondJSONSafeIntegersExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)

	const firstID int64 = 1<<53 + 1 // 9007199254740993: not representable as a float64
	f := NewFlow[[]int]("huge_ids")
	var mu sync.Mutex
	seen := map[int64]bool{}
	MapInput(f, "each", func(ctx context.Context, tk *Task[[]int], item int) (int, error) {
		mu.Lock()
		seen[tk.MessageID] = true
		mu.Unlock()
		tk.Logger.Info("handled", "queue", tk.QueueName)
		return item, nil
	})
	_, err := db.Pool.Exec(ctx, `select pgflow.create_flow('huge_ids'); select pgflow.add_step('huge_ids', 'each', step_type => 'map');
		alter table pgmq.q_huge_ids alter column msg_id restart with `+strconv.FormatInt(firstID, 10))
	require.NoError(t, err)
	run := startRun(t, db.Pool, "huge_ids", []int{1, 2, 3})

	logger, lb := jsonLogs(t)
	cfg, _ := testConfig(t)
	cfg.Logger = logger
	rw := startWorker(t, db.Pool, f, cfg)
	require.Equal(t, "completed", waitRun(t, db.Pool, run).Status)
	require.NoError(t, rw.stop(t))

	var stored []int64
	require.NoError(t, db.Pool.QueryRow(ctx,
		`select array_agg(message_id order by task_index) from pgflow.step_tasks where run_id = $1`, run).Scan(&stored))
	require.Len(t, stored, 3)
	for _, id := range stored {
		require.GreaterOrEqual(t, id, firstID)
		require.True(t, seen[id], "handler saw message id %d exactly", id)
	}
	var logged []string
	for _, rec := range logRecords(t, lb) {
		if rec["msg"] == "handled" {
			s, ok := rec["msg_id"].(string)
			require.True(t, ok, "msg_id must be a JSON string, got %T", rec["msg_id"])
			logged = append(logged, s)
			require.Equal(t, "huge_ids", rec["queue"])
		}
	}
	require.Len(t, logged, 3)
	for _, id := range stored {
		require.Contains(t, logged, strconv.FormatInt(id, 10))
	}
}
