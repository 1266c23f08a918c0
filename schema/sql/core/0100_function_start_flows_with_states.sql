create or replace function pgflow.start_flows_with_states(flow_slug text, inputs jsonb[])
returns setof jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
set jit = off
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
declare
  v_ids uuid[];
begin
  -- start_flows returns when it is done; the statement below then reads what it wrote, every run's document in one
  -- statement (v0.20.0 ninth round: a get_run_with_states call per run was a SECURITY DEFINER function call and
  -- an executor start-up per run; this is 13 % less CPU per run at 16 runs per call, docs/performance.md). The
  -- document is get_run_with_states' (its comment says what it holds): the same expression, run for the new ids
  -- in the order of inputs. It is written out here rather than shared through a function over an array of ids,
  -- which gave back most of the saving.
  select coalesce(array_agg(r.run_id order by r.ordinality), '{}')
    into v_ids
    from pgflow.start_flows(start_flows_with_states.flow_slug, start_flows_with_states.inputs) with ordinality as r;
  return query
    select jsonb_build_object(
             'run', to_jsonb(r),
             'steps', coalesce(
               (select jsonb_agg(to_jsonb(ss) order by s.step_index)
                  from pgflow.step_states as ss
                  cross join lateral (
                    select s.step_index from pgflow.steps as s
                     where s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug limit 1) as s
                 where ss.run_id = r.run_id),
               '[]'::jsonb))
      from unnest(v_ids) with ordinality as x (run_id, pos)
      cross join lateral (select r.* from pgflow.runs as r where r.run_id = x.run_id limit 1) as r
     order by x.pos;
end;
$$;

comment on function pgflow.start_flows_with_states(flow_slug text, inputs jsonb[]) is $doc$
pgflow.start_flows_with_states(flow_slug, inputs) guarantees (v0.20.0): exactly pgflow.start_flows(flow_slug,
inputs) (same checks, effects and errors; new run ids; one transaction: all runs start or none), then returns, in
the order of inputs, pgflow.get_run_with_states of each new run as it is at the end of the call. SECURITY DEFINER
like start_flow_with_states, so the role that may start runs one at a time (roles.sql's pgflow_client) may also
start several in one call: the Go client coalesces concurrent starts of one flow into one such call.
$doc$;
