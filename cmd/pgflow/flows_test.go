package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

func TestFlowsCommand(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	out := mustCLI(t, "--database-url", db.URL, "flows")
	require.Contains(t, out, "no flows yet")
	require.Equal(t, "[]\n", mustCLI(t, "--database-url", db.URL, "flows", "--json"))

	compileFlow(t, db.Pool, squaresFlow("squares"))
	compileFlow(t, db.Pool, failingFlow("fragile"))
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer client.Close()
	for range 2 {
		_, err := client.StartRunJSON(context.Background(), "squares", json.RawMessage(`[1, 2, 3]`), nil)
		require.NoError(t, err)
	}

	docs := decodeJSON[[]flowJSON](t, mustCLI(t, "--database-url", db.URL, "flows", "--json"))
	require.Len(t, docs, 2)
	fr, sq := docs[0], docs[1] // flow_slug order
	require.Equal(t, "fragile", fr.FlowSlug)
	require.Equal(t, 1, fr.OptMaxAttempts)
	require.Equal(t, 2, fr.StepCount)
	require.Equal(t, 0, fr.MapStepCount)
	require.EqualValues(t, 0, fr.ActiveRuns)
	require.Equal(t, &queueJSON{Name: "fragile"}, fr.Queue)
	queue := "fragile" // steps.queue_name
	require.Equal(t, []sqlapi.FlowStep{
		{StepSlug: "ok", StepType: "single", StepIndex: 0, Deps: []string{}, QueueName: &queue},
		{StepSlug: "boom", StepType: "single", StepIndex: 1, Deps: []string{"ok"}, QueueName: &queue},
	}, fr.Steps)

	require.Equal(t, "squares", sq.FlowSlug)
	require.Equal(t, 2, sq.OptMaxAttempts)
	require.Equal(t, 1, sq.OptBaseDelay)
	require.Equal(t, 10, sq.OptTimeout)
	require.Equal(t, 2, sq.StepCount)
	require.Equal(t, 1, sq.MapStepCount)
	require.EqualValues(t, 2, sq.ActiveRuns)
	require.Equal(t, &queueJSON{Name: "squares", Length: 6, Visible: 6}, sq.Queue) // 2 runs × 3 map tasks
	require.False(t, sq.CreatedAt.IsZero())

	out = mustCLI(t, "--database-url", db.URL, "flows")
	require.Regexp(t, `FLOW\s+STEPS\s+MAX_ATTEMPTS\s+BASE_DELAY\s+TIMEOUT\s+ACTIVE_RUNS\s+QUEUED\s+CREATED`, out)
	require.Regexp(t, `fragile\s+2\s+1\s+5s\s+60s\s+0\s+0 \(0 visible\)`, out)
	require.Regexp(t, `squares\s+2 \(1 map\)\s+2\s+1s\s+10s\s+2\s+6 \(6 visible\)`, out)

	out = mustCLI(t, "--database-url", db.URL, "flows", "--steps")
	require.Regexp(t, `\nsquares\n\s+0\s+square\s+map\s+queue squares\s*\n\s+1\s+sum\s+single\s+queue squares\s+depends on square\n`, out)
	require.Regexp(t, `\nfragile\n\s+0\s+ok\s+single\s+queue fragile\s*\n\s+1\s+boom\s+single\s+queue fragile\s+depends on ok\n`, out)
}

// A camelCase flow's queue is recorded in lower case; flows reads its depth all the same.
func TestFlowsCommandMixedCaseSlug(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	compileFlow(t, db.Pool, squaresFlow("sumOfSquares"))
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer client.Close()
	_, err = client.StartRunJSON(context.Background(), "sumOfSquares", json.RawMessage(`[1, 2]`), nil)
	require.NoError(t, err)

	docs := decodeJSON[[]flowJSON](t, mustCLI(t, "--database-url", db.URL, "flows", "--json"))
	require.Len(t, docs, 1)
	require.Equal(t, "sumOfSquares", docs[0].FlowSlug)
	require.Equal(t, "flow", docs[0].QueueMode)
	require.Equal(t, "archive", docs[0].MessageRetention)
	require.NotNil(t, docs[0].Queue)
	require.Equal(t, "sumofsquares", docs[0].Queue.Name) // steps.queue_name is lower(flow_slug)
	require.EqualValues(t, 2, docs[0].Queue.Length)
}

func TestFlowsCommandUnreadableQueue(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	compileFlow(t, db.Pool, squaresFlow("squares"))
	_, err := db.Pool.Exec(context.Background(), `select pgmq.drop_queue('squares')`)
	require.NoError(t, err)

	docs := decodeJSON[[]flowJSON](t, mustCLI(t, "--database-url", db.URL, "flows", "--json"))
	require.Len(t, docs, 1)
	require.Nil(t, docs[0].Queue)
	require.Regexp(t, `squares\s+2 \(1 map\)\s+2\s+1s\s+10s\s+0\s+\?`, mustCLI(t, "--database-url", db.URL, "flows"))
}

// A flow with per-step queues: flows shows every step's queue and its depth.
func TestFlowsCommandPerStepQueues(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for _, stmt := range []string{
		`select pgflow.create_flow('routed', queue_mode => 'step', message_retention => 'delete')`,
		`select pgflow.add_step('routed', 'first')`,
		`select pgflow.add_step('routed', 'second')`,
		`select pgflow.add_step('routed', 'after', array['first'])`,
	} {
		_, err := db.Pool.Exec(context.Background(), stmt)
		require.NoError(t, err)
	}
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer client.Close()
	for range 2 {
		_, err := client.StartRunJSON(context.Background(), "routed", json.RawMessage(`{}`), nil)
		require.NoError(t, err)
	}

	docs := decodeJSON[[]flowJSON](t, mustCLI(t, "--database-url", db.URL, "flows", "--json"))
	require.Len(t, docs, 1)
	require.Equal(t, "step", docs[0].QueueMode)
	require.Equal(t, "delete", docs[0].MessageRetention)
	require.Nil(t, docs[0].Queue)
	require.Equal(t, []*queueJSON{
		{Name: "routed__first", Length: 2, Visible: 2}, {Name: "routed__second", Length: 2, Visible: 2}, {Name: "routed__after"},
	}, docs[0].Queues)

	require.Regexp(t, `routed\s+3\s+3\s+5s\s+60s\s+2\s+4 \(4 visible\) in 3 queues`, mustCLI(t, "--database-url", db.URL, "flows"))
	out := mustCLI(t, "--database-url", db.URL, "flows", "--steps")
	require.Regexp(t, `\s+0\s+first\s+single\s+queue routed__first: 2 \(2 visible\)\s*\n`, out)
	require.Regexp(t, `\s+1\s+second\s+single\s+queue routed__second: 2 \(2 visible\)\s*\n`, out)
	require.Regexp(t, `\s+2\s+after\s+single\s+queue routed__after: 0 \(0 visible\)\s+depends on first\n`, out)
}
