create or replace function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid default null)
returns setof pgflow.runs
language plpgsql
volatile
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
  v_run_id     uuid;
  v_step_count integer;
  v_root_maps  integer;
  v_run        pgflow.runs;
  v_input_len  integer;
  v_conditions boolean;
begin
  -- Shares the flow's compilation lock (create_flow, ensure_flow_compiled and delete_flow_and_data hold it
  -- exclusively): a start waits for a compilation in progress and then reads the whole flow. Without it a start
  -- could count no steps (compilation not yet visible) yet find the flow's row (pgflow._lock_flow_for_start
  -- reads the newest rows) and complete the run at once with output NULL.
  perform pg_advisory_xact_lock_shared(1, hashtext(lower(start_flow.flow_slug)));

  select count(*), count(*) filter (where s.step_type = 'map' and s.deps_count = 0),
         coalesce(bool_or(s.required_input_pattern is not null or s.forbidden_input_pattern is not null), false)
    into v_step_count, v_root_maps, v_conditions
    from pgflow.steps as s
   where s.flow_slug = start_flow.flow_slug;

  -- A flow whose root steps start at once (steps, no conditions, no root map) starts as start_flows starts it: the
  -- root steps' states are written 'started' in one row version, and nothing is searched for that cannot be there.
  -- The checks and errors are the same (no root map to check the input of; the run's insert raises the rest).
  if v_step_count > 0 and v_root_maps = 0 and not v_conditions then
    return query select r.* from pgflow.start_flows(start_flow.flow_slug, array[start_flow.input],
                                                    array[start_flow.run_id]) as r;
    return;
  end if;

  perform pgflow._lock_flow_for_start(start_flow.flow_slug);

  if v_root_maps > 0 then
    if start_flow.input is null then
      raise exception 'Flow % has root map steps but input is NULL', start_flow.flow_slug;
    elsif jsonb_typeof(start_flow.input) <> 'array' then
      raise exception 'Flow % has root map steps but input is not an array (got %)',
        start_flow.flow_slug, jsonb_typeof(start_flow.input);
    end if;
  end if;

  -- Computed here, not inside the CASE below: the planner may fold a CASE arm with constant arguments even when
  -- the arm is never taken, and jsonb_array_length raises on a non-array.
  if jsonb_typeof(start_flow.input) = 'array' then
    v_input_len := jsonb_array_length(start_flow.input);
  end if;

  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps)
  values (coalesce(start_flow.run_id, (pgflow._new_run_ids(1))[1]), start_flow.flow_slug, start_flow.input, v_step_count)
  returning * into v_run;
  v_run_id := v_run.run_id;

  insert into pgflow.step_states (flow_slug, run_id, step_slug, remaining_deps, initial_tasks)
  select s.flow_slug,
         v_run_id,
         s.step_slug,
         s.deps_count,
         case
           when s.step_type = 'map' and s.deps_count = 0 then v_input_len
           when s.step_type = 'map' then null
           else 1
         end
    from pgflow.steps as s
   where s.flow_slug = v_run.flow_slug
   order by s.step_index;

  perform pgflow._emit_event(
    jsonb_build_object(
      'event_type', 'run:started',
      'run_id', v_run.run_id,
      'flow_slug', v_run.flow_slug,
      'input', v_run.input,
      'status', v_run.status,
      'remaining_steps', v_run.remaining_steps,
      'started_at', v_run.started_at),
    'run:started',
    v_run_id);

  if pgflow.cascade_resolve_conditions(v_run_id) then
    perform pgflow.cascade_complete_taskless_steps(v_run_id);
    perform pgflow.start_ready_steps(v_run_id);
    perform pgflow.maybe_complete_run(v_run_id);
  end if;

  return query select r.* from pgflow.runs as r where r.run_id = v_run_id;
end;
$$;

comment on function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid) is $doc$
pgflow.start_flow(flow_slug, input, run_id) guarantees:
  * a flow with root map steps only starts with an array input: SQL NULL raises
    'Flow <slug> has root map steps but input is NULL', any other JSON type raises
    'Flow <slug> has root map steps but input is not an array (got <type>)' (P0001), before anything is written;
  * one run row (run_id = the given one, else pgflow._new_run_id(), time-ordered; remaining_steps = number of steps)
    and one step state per step ('created'; v0.20.0: a root step of a flow with steps, no condition and no root map
    is written 'started' at once, as start_flows writes it, since nothing could happen to it in between)
    (remaining_deps = deps_count; initial_tasks = 1 for single steps, the input array length for root maps, NULL for
    dependent maps until their parent completes) are written in this transaction;
  * run:started is emitted, then conditions of ready steps are resolved (a 'fail' condition fails the run and no
    task is ever created), taskless steps complete, ready steps start (tasks and messages are created) and the
    run completes if nothing is left (e.g. a flow without steps);
  * returns the run row as it is at the end ('started', 'completed' or 'failed').
A start waits while the flow is being compiled or deleted (shared flow lock) and then sees the whole flow; it locks
the flow's row FOR KEY SHARE (v0.20.0: the insert side of runs_flow_slug_fkey, which the schema leaves out).
Errors: unknown flow -> runs_flow_slug_fkey (23503, the key's message and constraint name, nothing written); an
existing run_id -> runs_pkey (a retried start with the same run_id therefore never creates a second run); NULL
input without root maps -> not-null violation on runs.input.
$doc$;
