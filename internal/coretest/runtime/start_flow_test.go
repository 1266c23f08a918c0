package runtime_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

func TestStartFlowCreatesRunAndStepStates(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'root')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'items', array['root'], step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'join', array['root', 'items'])")

	run := fx.StartFlow(t, db, "f", `{"a": 1}`)
	require.Equal(t, "started", run.Status)
	require.Equal(t, "f", run.FlowSlug)
	require.Equal(t, 3, run.RemainingSteps)
	require.Equal(t, fx.JSON(t, db, `{"a": 1}`), run.Input)
	require.Empty(t, run.Output)

	root := fx.GetStep(t, db, run.RunID, "root")
	require.Equal(t, "started", root.Status)
	require.Equal(t, ptr(1), root.InitialTasks)
	require.Equal(t, ptr(1), root.RemainingTasks)
	require.Equal(t, 0, root.RemainingDeps)
	require.NotNil(t, root.StartedAt)

	items := fx.GetStep(t, db, run.RunID, "items")
	require.Equal(t, "created", items.Status)
	require.Nil(t, items.InitialTasks, "a dependent map learns its task count only when its parent completes")
	require.Nil(t, items.RemainingTasks)
	require.Equal(t, 1, items.RemainingDeps)

	join := fx.GetStep(t, db, run.RunID, "join")
	require.Equal(t, "created", join.Status)
	require.Equal(t, ptr(1), join.InitialTasks)
	require.Equal(t, 2, join.RemainingDeps)

	tasks := fx.GetTasks(t, db, run.RunID, "")
	require.Len(t, tasks, 1)
	require.Equal(t, "root", tasks[0].StepSlug)
	require.Equal(t, "queued", tasks[0].Status)
	require.NotNil(t, tasks[0].MessageID)
	require.Len(t, fx.QueueMessages(t, db, "f"), 1)
}

func TestStartFlowWithCallerRunID(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "sequential")
	const id = "5e1e5a3c-8f55-4b54-9d3e-2a9a2b0c0f01"
	got := fx.Val[string](t, db, "select run_id::text from pgflow.start_flow('sequential', '{}'::jsonb, run_id => $1)", id)
	require.Equal(t, id, got)

	// A retried start with the same run_id never creates a second run.
	_, err := db.Exec(fx.Ctx(t), "select pgflow.start_flow('sequential', '{}'::jsonb, $1)", id)
	requirePgError(t, err, "23505", `duplicate key value violates unique constraint "runs_pkey"`)
	require.Equal(t, 1, fx.Val[int](t, db, "select count(*)::int from pgflow.runs"))
}

func TestStartFlowErrors(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('plain')")
	fx.Exec(t, db, "select pgflow.add_step('plain', 'a')")
	fx.Exec(t, db, "select pgflow.create_flow('mapped')")
	fx.Exec(t, db, "select pgflow.add_step('mapped', 'm', step_type => 'map')")

	cases := []struct {
		flow, input string // input "" = SQL NULL
		code, msg   string
	}{
		{"mapped", "", "P0001", "Flow mapped has root map steps but input is NULL"},
		{"mapped", `{"a": 1}`, "P0001", "Flow mapped has root map steps but input is not an array (got object)"},
		{"mapped", `"s"`, "P0001", "Flow mapped has root map steps but input is not an array (got string)"},
		{"mapped", `1`, "P0001", "Flow mapped has root map steps but input is not an array (got number)"},
		{"mapped", `true`, "P0001", "Flow mapped has root map steps but input is not an array (got boolean)"},
		{"mapped", `null`, "P0001", "Flow mapped has root map steps but input is not an array (got null)"},
		{"missing", `{}`, "23503", `insert or update on table "runs" violates foreign key constraint "runs_flow_slug_fkey"`},
		{"plain", "", "23502", `null value in column "input" of relation "runs" violates not-null constraint`},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%s", c.flow, c.input), func(t *testing.T) {
			var input any
			if c.input != "" {
				input = c.input
			}
			_, err := db.Exec(fx.Ctx(t), "select pgflow.start_flow($1, $2::jsonb)", c.flow, input)
			requirePgError(t, err, c.code, c.msg)
		})
	}
	require.Equal(t, 0, fx.Val[int](t, db, "select count(*)::int from pgflow.runs"), "a rejected start writes nothing")
	require.Empty(t, fx.QueueMessages(t, db, "mapped"))
}

func TestStartFlowRootMapInitialTasks(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm1', step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm2', step_type => 'map')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'single')")

	// Only top-level elements count: nested arrays, objects, nulls and duplicates are one task each.
	run := fx.StartFlow(t, db, "f", `[1, [2, 3], {"a": [4]}, null, 1]`)
	for _, slug := range []string{"m1", "m2"} {
		s := fx.GetStep(t, db, run.RunID, slug)
		require.Equal(t, ptr(5), s.InitialTasks, slug)
		require.Equal(t, ptr(5), s.RemainingTasks, slug)
		require.Equal(t, "started", s.Status, slug)
	}
	require.Equal(t, ptr(1), fx.GetStep(t, db, run.RunID, "single").InitialTasks)
	require.Len(t, fx.GetTasks(t, db, run.RunID, ""), 11)
}

func TestStartFlowLargeRootMap(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('f')")
	fx.Exec(t, db, "select pgflow.add_step('f', 'm', step_type => 'map')")
	run := fx.Val[string](t, db, "select run_id::text from pgflow.start_flow('f', (select jsonb_agg(i) from generate_series(1, 1000) i))")
	require.Equal(t, 1000, fx.Val[int](t, db, "select count(*)::int from pgflow.step_tasks where run_id = $1", run))
	// Task i carries message i of the batch, whose body names task_index i.
	require.Equal(t, 0, fx.Val[int](t, db, `select count(*)::int from pgflow.step_tasks t
		join pgmq.q_f q on q.msg_id = t.message_id
		where t.run_id = $1 and (q.message->>'task_index')::int <> t.task_index`, run))
}

func TestStartFlowEmptyFlowCompletesAtOnce(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('empty')")
	run := fx.StartFlow(t, db, "empty", `{"x": 1}`)
	require.Equal(t, "completed", run.Status)
	require.Equal(t, 0, run.RemainingSteps)
	require.Empty(t, run.Output, "no leaf completed, so the output is NULL")
	require.NotNil(t, run.CompletedAt)
}

func TestStartFlowWithStatesAndGetRunWithStates(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "two_roots")

	raw := fx.Val[string](t, db, "select pgflow.start_flow_with_states('two_roots', '{\"k\": 1}'::jsonb)::text")
	var doc struct {
		Run   map[string]any   `json:"run"`
		Steps []map[string]any `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &doc))
	require.Equal(t, "two_roots", doc.Run["flow_slug"])
	require.Equal(t, "started", doc.Run["status"])
	require.Len(t, doc.Steps, 3)
	slugs := []string{}
	for _, s := range doc.Steps {
		slugs = append(slugs, s["step_slug"].(string))
		require.Contains(t, s, "remaining_deps")
		require.Contains(t, s, "initial_tasks")
	}
	require.Equal(t, []string{"root_a", "root_b", "last"}, slugs)
	require.Equal(t, "started", doc.Steps[0]["status"])
	require.Equal(t, "created", doc.Steps[2]["status"])

	runID := doc.Run["run_id"].(string)
	again := fx.Val[string](t, db, "select pgflow.get_run_with_states($1)::text", runID)
	require.Equal(t, fx.JSON(t, db, raw), again, "get_run_with_states reads the same state back")

	var missing *string
	require.NoError(t, db.QueryRow(fx.Ctx(t), "select pgflow.get_run_with_states(gen_random_uuid())::text").Scan(&missing))
	require.Nil(t, missing, "unknown run gives SQL NULL")

	fx.Exec(t, db, "select pgflow.create_flow('nosteps')")
	empty := fx.Val[string](t, db, "select (pgflow.start_flow_with_states('nosteps', '1'::jsonb) -> 'steps')::text")
	require.Equal(t, "[]", empty)

	// Both are SECURITY DEFINER so operators can grant just these functions to API roles.
	defs := fx.Val[int](t, db, `select count(*)::int from pg_proc p join pg_namespace n on n.oid = p.pronamespace
		where n.nspname = 'pgflow' and p.proname in ('start_flow_with_states', 'get_run_with_states') and p.prosecdef`)
	require.Equal(t, 2, defs)
}

// TestStartFlowsWithStatesReturnsWhatGetRunWithStatesReads: start_flows_with_states builds its documents in one
// statement, not through get_run_with_states; each must still be exactly what get_run_with_states reads of that
// run at the end of the call, in the order of the inputs: a run still going, one a root map over an empty array
// has completed at once (step and run finished during the start), and a flow without steps.
func TestStartFlowsWithStatesReturnsWhatGetRunWithStatesReads(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "two_roots")
	fx.Exec(t, db, "select pgflow.create_flow('only_map')")
	fx.Exec(t, db, "select pgflow.add_step('only_map', 'items', step_type => 'map')")
	fx.Exec(t, db, "select pgflow.create_flow('nosteps')")

	for _, c := range []struct {
		flow   string
		inputs []string
		status []string
	}{
		{"two_roots", []string{`{"i": 1}`, `{"i": 2}`, `{"i": 3}`}, []string{"started", "started", "started"}},
		{"only_map", []string{`[1, 2]`, `[]`, `[3]`}, []string{"started", "completed", "started"}},
		{"nosteps", []string{`{"i": 1}`, `{"i": 2}`}, []string{"completed", "completed"}},
	} {
		var docs []string
		rows, err := db.Query(fx.Ctx(t), `select s::text from pgflow.start_flows_with_states($1, $2::jsonb[]) as s`,
			c.flow, c.inputs)
		require.NoError(t, err)
		for rows.Next() {
			var d string
			require.NoError(t, rows.Scan(&d))
			docs = append(docs, d)
		}
		require.NoError(t, rows.Err())
		require.Len(t, docs, len(c.inputs), c.flow)
		for i, d := range docs {
			var doc struct {
				Run struct {
					RunID  string          `json:"run_id"`
					Input  json.RawMessage `json:"input"`
					Status string          `json:"status"`
				} `json:"run"`
			}
			require.NoError(t, json.Unmarshal([]byte(d), &doc))
			require.JSONEq(t, c.inputs[i], string(doc.Run.Input), "%s: document %d belongs to input %d", c.flow, i, i)
			require.Equal(t, c.status[i], doc.Run.Status, "%s: run %d as it is at the end of the call", c.flow, i)
			again := fx.Val[string](t, db, "select pgflow.get_run_with_states($1)::text", doc.Run.RunID)
			require.Equal(t, again, d, "%s: document %d is get_run_with_states' of its run", c.flow, i)
		}
	}
}

func TestStartFlowsWithStatesIsOneTransaction(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgflow.create_flow('only_map')")
	fx.Exec(t, db, "select pgflow.add_step('only_map', 'items', step_type => 'map')")
	_, err := db.Exec(fx.Ctx(t), `select pgflow.start_flows_with_states('only_map', array['[1]', '{"not": "an array"}']::jsonb[])`)
	require.Error(t, err, "a root map step's input must be an array")
	require.Equal(t, 0, fx.Val[int](t, db, "select count(*)::int from pgflow.runs"), "no run of the call stays")
}

func TestStartFlowStartsRootsAndSendsMessages(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.SetupFlow(t, db, "two_roots_left_right")
	run := fx.StartFlow(t, db, "two_roots_left_right", `{}`)
	st := fx.StepStatuses(t, db, run.RunID)
	require.Equal(t, map[string]string{
		"connected_root": "started", "disconnected_root": "started", "left": "created", "right": "created",
	}, st)
	msgs := fx.QueueMessages(t, db, "two_roots_left_right")
	require.Len(t, msgs, 2)
	var bodies []string
	for _, m := range msgs {
		var body map[string]any
		require.NoError(t, json.Unmarshal([]byte(m.Message), &body))
		require.Equal(t, run.RunID, body["run_id"])
		require.Equal(t, "two_roots_left_right", body["flow_slug"])
		require.EqualValues(t, 0, body["task_index"])
		require.Len(t, body, 4, "message body is exactly flow_slug, run_id, step_slug, task_index")
		bodies = append(bodies, body["step_slug"].(string))
	}
	require.ElementsMatch(t, []string{"connected_root", "disconnected_root"}, bodies)
	require.True(t, strings.HasPrefix(msgs[0].Message, "{"))
}
