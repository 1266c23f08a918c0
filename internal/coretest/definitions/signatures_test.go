package definitions_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Argument names, defaults, return types and volatility are API: callers use named notation, and the planner relies
// on volatility. One line per definition-side function (spec section 4.0 plus pgflow-go's worker functions).
func TestDefinitionFunctionSignatures(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	want := []string{
		"_compare_flow_shapes(p_local jsonb, p_db jsonb) text[] stable",
		"_create_flow_from_shape(p_flow_slug text, p_shape jsonb, p_queue_mode text DEFAULT NULL::text, " +
			"p_message_retention text DEFAULT NULL::text) void volatile",
		"_default_queue_name(flow_slug text) text immutable parallel-safe",
		"_get_flow_shape(p_flow_slug text) jsonb stable",
		"add_step(flow_slug text, step_slug text, deps_slugs text[] DEFAULT '{}'::text[], " +
			"max_attempts integer DEFAULT NULL::integer, base_delay integer DEFAULT NULL::integer, " +
			"timeout integer DEFAULT NULL::integer, start_delay integer DEFAULT NULL::integer, " +
			"step_type text DEFAULT 'single'::text, required_input_pattern jsonb DEFAULT NULL::jsonb, " +
			"forbidden_input_pattern jsonb DEFAULT NULL::jsonb, when_unmet text DEFAULT 'skip'::text, " +
			"when_exhausted text DEFAULT 'fail'::text) pgflow.steps volatile",
		"calculate_retry_delay(base_delay numeric, attempts_count integer) integer immutable parallel-safe",
		"create_flow(flow_slug text, max_attempts integer DEFAULT NULL::integer, base_delay integer DEFAULT NULL::integer, " +
			"timeout integer DEFAULT NULL::integer, queue_mode text DEFAULT NULL::text, " +
			"message_retention text DEFAULT NULL::text) pgflow.flows volatile",
		"delete_flow_and_data(p_flow_slug text) void volatile",
		"ensure_flow_compiled(flow_slug text, shape jsonb, allow_data_loss boolean DEFAULT false, " +
			"queue_mode text DEFAULT NULL::text, message_retention text DEFAULT NULL::text) jsonb volatile",
		"heartbeat_worker(worker_id uuid, listener_pid integer DEFAULT NULL::integer) boolean volatile",
		"is_local() boolean stable parallel-safe",
		"is_valid_slug(slug text) boolean immutable",
		"mark_worker_stopped(worker_id uuid) void volatile",
		"register_worker(worker_id uuid, queue_name text, function_name text) pgflow.workers volatile",
		"track_worker_function(function_name text) void volatile",
	}
	got := queryVal[[]string](t, pool, `
		select array_agg(
		         p.proname || '(' || pg_get_function_arguments(p.oid) || ') ' || pg_get_function_result(p.oid) || ' ' ||
		         case p.provolatile when 'i' then 'immutable' when 's' then 'stable' else 'volatile' end ||
		         case when p.proparallel = 's' then ' parallel-safe' else '' end
		         order by p.proname collate "C")
		from pg_proc p
		where p.pronamespace = 'pgflow'::regnamespace and p.proname = any($1)`,
		[]string{"_compare_flow_shapes", "_create_flow_from_shape", "_default_queue_name", "_get_flow_shape", "add_step",
			"calculate_retry_delay", "create_flow", "delete_flow_and_data", "ensure_flow_compiled", "heartbeat_worker",
			"is_local", "is_valid_slug", "mark_worker_stopped", "register_worker", "track_worker_function"})
	require.Equal(t, want, got, "exactly one overload of each, with these signatures")
}

// Every pgflow function, definitions and runtime alike, pins search_path to pg_catalog, pg_temp (temporary schema
// explicitly last), so it behaves the same under any caller's search_path and a caller's temporary objects never
// shadow the names it uses (hard project rule; pgflow leaves a few functions unpinned, and an empty search_path
// still searches the temporary schema first). reliability_searchpath_test.go proves the property by attacking.
// Every one also runs with JIT compilation off (v0.20.0): its statements are short, and a generic plan whose
// estimate grows with the tables (an index keeps its pages after a prune) would otherwise compile on every call
// (sqlapi's TestEngineStatementsNeverJITCompile proves it by watching the plans).
// The other settings a function may carry, together, are plan_cache_mode = force_generic_plan, enable_seqscan =
// off, enable_hashjoin = off and enable_mergejoin = off (v0.20.0: the entry points of the start, claim and
// completion paths, and stalled-task recovery, whose statements find rows by key or address only, one lookup per
// row; the settings hold for the functions they call and the foreign-key checks they run too).
func TestEveryFunctionPinsSearchPath(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	unpinned := queryVal[[]string](t, pool, `
		select coalesce(array_agg(p.oid::regprocedure::text order by p.oid::regprocedure::text), '{}')
		from pg_proc p
		where p.pronamespace = 'pgflow'::regnamespace
		  and p.proconfig is distinct from array['search_path=pg_catalog, pg_temp', 'jit=off']
		  and p.proconfig is distinct from array['search_path=pg_catalog, pg_temp', 'jit=off', 'plan_cache_mode=force_generic_plan',
		                                         'enable_seqscan=off', 'enable_hashjoin=off', 'enable_mergejoin=off']`)
	require.Empty(t, unpinned)
	require.ElementsMatch(t, []string{"complete_task", "complete_tasks", "fail_task", "read_and_start_tasks", "start_flow",
		"requeue_stalled_tasks", "start_flow_with_states", "start_flows", "start_flows_with_states", "start_tasks"}, queryVal[[]string](t, pool, `
		select coalesce(array_agg(p.proname::text), '{}') from pg_proc p
		where p.pronamespace = 'pgflow'::regnamespace and 'plan_cache_mode=force_generic_plan' = any (p.proconfig)
		  and 'enable_seqscan=off' = any (p.proconfig) and 'enable_hashjoin=off' = any (p.proconfig)
		  and 'enable_mergejoin=off' = any (p.proconfig)`),
		"generic plans only where every statement finds its rows by key or address")
	require.Positive(t, count(t, pool, `select 1 from pg_proc where pronamespace = 'pgflow'::regnamespace`))
}
