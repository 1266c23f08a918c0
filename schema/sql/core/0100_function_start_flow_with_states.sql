create or replace function pgflow.start_flow_with_states(flow_slug text, input jsonb, run_id uuid default null)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
set jit = off
-- Every statement here finds its rows by key or by address: one plan per session instead of one per call, and
-- never a sequential scan, also in the foreign-key checks its writes run, whose plans PostgreSQL caches too (a
-- plan made while a table was empty would scan it whole on every check as it grows: docs/performance.md).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
-- Nested loops only: a hash or merge join reads one side whole, and a plan made while a table was small (a fresh
-- database, a session that began early) reads the whole table through its primary key on every later call, for as
-- long as the session keeps the plan (v0.20.0: 139,000 buffers per lone completion at 20,000 runs). Every join
-- here is by key, one lookup per row.
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  v_run_id uuid;
begin
  select r.run_id
    into v_run_id
    from pgflow.start_flow(start_flow_with_states.flow_slug, start_flow_with_states.input,
                           start_flow_with_states.run_id) as r
   limit 1;

  return pgflow.get_run_with_states(v_run_id);
end;
$$;

comment on function pgflow.start_flow_with_states(flow_slug text, input jsonb, run_id uuid) is $doc$
pgflow.start_flow_with_states(flow_slug, input, run_id) guarantees: exactly pgflow.start_flow (same checks,
same errors, same effects), then returns pgflow.get_run_with_states of the new run, i.e.
{"run": <run row>, "steps": [<step state rows>]} as it is at the end of the start. SECURITY DEFINER so an
operator can grant API users this one function instead of the tables.
$doc$;
