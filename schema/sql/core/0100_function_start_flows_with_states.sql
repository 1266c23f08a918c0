create or replace function pgflow.start_flows_with_states(flow_slug text, inputs jsonb[])
returns setof jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
-- As start_flow_with_states: one plan per session, never a sequential scan (docs/performance.md).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
-- Nested loops only: a hash or merge join reads one side whole, and a plan made while a table was small (a fresh
-- database, a session that began early) reads the whole table through its primary key on every later call, for as
-- long as the session keeps the plan (v0.20.0: 139,000 buffers per lone completion at 20,000 runs). Every join
-- here is by key, one lookup per row.
set enable_hashjoin = off
set enable_mergejoin = off
as $$
begin
  -- start_flows returns when it is done; each get_run_with_states then reads what it wrote.
  return query
    select pgflow.get_run_with_states(r.run_id)
      from pgflow.start_flows(start_flows_with_states.flow_slug, start_flows_with_states.inputs)
             with ordinality as r
     order by r.ordinality;
end;
$$;

comment on function pgflow.start_flows_with_states(flow_slug text, inputs jsonb[]) is $doc$
pgflow.start_flows_with_states(flow_slug, inputs) guarantees (v0.20.0): exactly pgflow.start_flows(flow_slug,
inputs) (same checks, effects and errors; new run ids; one transaction: all runs start or none), then returns, in
the order of inputs, pgflow.get_run_with_states of each new run as it is at the end of the call. SECURITY DEFINER
like start_flow_with_states, so the role that may start runs one at a time (roles.sql's pgflow_client) may also
start several in one call: the Go client coalesces concurrent starts of one flow into one such call.
$doc$;
