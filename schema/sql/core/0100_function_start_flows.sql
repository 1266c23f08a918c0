create or replace function pgflow.start_flows(flow_slug text, inputs jsonb[], run_ids uuid[] default null)
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
  v_n          integer := coalesce(cardinality(start_flows.inputs), 0);
  v_ids        uuid[];
  v_step_count integer;
  v_root_maps  integer;
  v_conditions boolean;
  v_bad        record;
  v_run        record;
  v_fold       boolean;
  v_started_runs  uuid[];
  v_started_slugs text[];
  v_started_flows text[];
  v_started_queues text[];
  v_started_delays integer[];
  v_started_counts integer[];
begin
  if v_n = 0 then
    return;
  end if;

  -- Shares the flow's compilation lock (create_flow, ensure_flow_compiled and delete_flow_and_data hold it
  -- exclusively): a start waits for a compilation in progress and then reads the whole flow. Without it a start
  -- could count no steps (compilation not yet visible) yet find the flow's row (pgflow._lock_flow_for_start
  -- reads the newest rows) and complete the run at once with output NULL.
  perform pg_advisory_xact_lock_shared(1, hashtext(lower(start_flows.flow_slug)));

  perform pgflow._lock_flow_for_start(start_flows.flow_slug);
  if start_flows.run_ids is not null and cardinality(start_flows.run_ids) <> v_n then
    raise exception 'start_flows: % run_ids given for % inputs', cardinality(start_flows.run_ids), v_n;
  end if;

  select count(*),
         count(*) filter (where s.step_type = 'map' and s.deps_count = 0),
         coalesce(bool_or(s.required_input_pattern is not null or s.forbidden_input_pattern is not null), false)
    into v_step_count, v_root_maps, v_conditions
    from pgflow.steps as s
   where s.flow_slug = start_flows.flow_slug;

  if v_root_maps > 0 then
    select x.pos, jsonb_typeof(x.input) as type into v_bad
      from unnest(start_flows.inputs) with ordinality as x (input, pos)
     where jsonb_typeof(x.input) is distinct from 'array'
     order by x.pos
     limit 1;
    if found and v_bad.type is null then
      raise exception 'Flow % has root map steps but input % is NULL', start_flows.flow_slug, v_bad.pos;
    elsif found then
      raise exception 'Flow % has root map steps but input % is not an array (got %)',
        start_flows.flow_slug, v_bad.pos, v_bad.type;
    end if;
  end if;

  -- One call makes every new id (a call per id cost more than making the id: each call sets search_path).
  v_ids := pgflow._new_run_ids(v_n);
  if start_flows.run_ids is not null then
    v_ids := array(
      select coalesce(start_flows.run_ids[p.pos], v_ids[p.pos])
        from generate_series(1, v_n) as p (pos)
       order by p.pos);
  end if;

  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps)
  select x.run_id, start_flows.flow_slug, x.input, v_step_count
    from unnest(v_ids, start_flows.inputs) with ordinality as x (run_id, input, pos)
   order by x.pos;

  -- Without conditions and root maps nothing can happen to a root step between its creation and its start (no
  -- condition to resolve, no taskless step to cascade): it is written 'started' right away, one row version
  -- instead of two, and _send_step_tasks below sends its messages and events as if it had been started.
  v_fold := not v_conditions and v_root_maps = 0;
  insert into pgflow.step_states (flow_slug, run_id, step_slug, remaining_deps, initial_tasks, status, started_at,
                                  remaining_tasks)
  select s.flow_slug,
         x.run_id,
         s.step_slug,
         s.deps_count,
         case
           when s.step_type = 'map' and s.deps_count = 0 then jsonb_array_length(x.input)
           when s.step_type = 'map' then null
           else 1
         end,
         case when v_fold and s.deps_count = 0 then 'started' else 'created' end,
         case when v_fold and s.deps_count = 0 then now() end,
         case when v_fold and s.deps_count = 0 then 1 end
    from unnest(v_ids, start_flows.inputs) with ordinality as x (run_id, input, pos)
    cross join pgflow.steps as s
   where s.flow_slug = start_flows.flow_slug
   order by x.pos, s.step_index;

  -- run:started of every run, in input order (a new run is 'started'). The JSON payload is built only for
  -- realtime.send: the notifications carry a small envelope made from the fields.
  perform pgflow._emit_envelopes(
    array_fill('run:started'::text, array[v_n]),
    v_ids,
    array_fill(start_flows.flow_slug, array[v_n]),
    null,
    array_fill('started'::text, array[v_n]),
    case
      when pgflow._trusted_realtime_send() is not null then array(
        select jsonb_build_object(
                 'event_type', 'run:started',
                 'run_id', r.run_id,
                 'flow_slug', r.flow_slug,
                 'input', r.input,
                 'status', r.status,
                 'remaining_steps', r.remaining_steps,
                 'started_at', r.started_at)
          from unnest(v_ids) with ordinality as x (run_id, pos)
          cross join lateral (select r.* from pgflow.runs as r where r.run_id = x.run_id limit 1) as r
         order by x.pos)
    end);

  if v_fold and v_step_count > 0 then
    -- Every step without dependencies was inserted 'started' with one task and every other step waits for one:
    -- nothing is taskless, skipped or ready at the start, and no run can finish here. Only the started steps need
    -- their events, tasks and messages, and their fields are the steps' own: nothing is read back. (The same
    -- order as _start_ready_steps_batch: by run, then step_index.)
    select array_agg(r.run_id), array_agg(r.step_slug), array_agg(r.flow_slug), array_agg(r.queue_name),
           array_agg(r.start_delay), array_agg(1)
      into v_started_runs, v_started_slugs, v_started_flows, v_started_queues, v_started_delays, v_started_counts
      from (select k.run_id, s.step_slug, s.flow_slug, s.queue_name, coalesce(s.opt_start_delay, 0) as start_delay
              from unnest(v_ids) as k (run_id)
              cross join pgflow.steps as s
             where s.flow_slug = start_flows.flow_slug
               and s.deps_count = 0
             order by k.run_id, s.step_index) as r;
    perform pgflow._send_step_tasks(v_started_runs, v_started_slugs, v_started_flows, v_started_queues,
                                    v_started_delays, v_started_counts);
  else
    if v_conditions then
      -- As start_flow: conditions first, then taskless steps, run by run.
      for v_run in select x.run_id from unnest(v_ids) with ordinality as x (run_id, pos) order by x.pos loop
        if pgflow.cascade_resolve_conditions(v_run.run_id) then
          perform pgflow.cascade_complete_taskless_steps(v_run.run_id);
        end if;
      end loop;
    else
      -- Without conditions only runs with a ready taskless step (a root map over an empty array) have anything to
      -- cascade.
      for v_run in
        select distinct ss.run_id
          from pgflow.step_states as ss
         where ss.run_id = any (v_ids)
           and ss.status = 'created'
           and ss.remaining_deps = 0
           and ss.initial_tasks = 0
         order by ss.run_id
      loop
        perform pgflow.cascade_complete_taskless_steps(v_run.run_id);
      end loop;
    end if;

    -- Runs whose conditions failed them are no longer 'started': both calls leave them alone.
    perform pgflow._start_ready_steps_batch(v_ids);
    perform pgflow._maybe_complete_runs(v_ids);
  end if;

  -- The new runs by key, one lookup each (LIMIT keeps it one, whatever the plan's estimates).
  return query
    select r.*
      from unnest(v_ids) with ordinality as x (run_id, pos)
      cross join lateral (select r.* from pgflow.runs as r where r.run_id = x.run_id limit 1) as r
     order by x.pos;
end;
$$;

comment on function pgflow.start_flows(flow_slug text, inputs jsonb[], run_ids uuid[]) is $doc$
pgflow.start_flows(flow_slug, inputs, run_ids) starts one run per element of inputs in one call (one
transaction). It guarantees:
  * for every input exactly what pgflow.start_flow(flow_slug, inputs[i], run_ids[i]) guarantees: the run row
    (run_id = run_ids[i] when given, else pgflow._new_run_id(), time-ordered; remaining_steps = number of steps) and one 'created' step
    state per step, run:started, conditions resolved (flows with condition patterns resolve them run by run,
    with the same functions start_flow calls), taskless steps completed, ready steps started with tasks and
    messages, and the run completed when nothing is left;
  * set-based work: one INSERT for all runs, one for all step states, and the ready steps of all runs start
    through pgflow._start_ready_steps_batch (one pgmq.send_batch per queue and delay; root steps of a flow
    without conditions and root maps are inserted 'started' and go straight to pgflow._send_step_tasks),
    finished runs complete through pgflow._maybe_complete_runs; events of one run keep start_flow's order;
  * a flow with root map steps needs an array input for every run: SQL NULL raises
    'Flow <slug> has root map steps but input <n> is NULL', any other JSON type raises
    'Flow <slug> has root map steps but input <n> is not an array (got <type>)' (P0001, n counting from 1),
    before anything is written;
  * run_ids, when not NULL, must have one element per input (NULL elements mean new time-ordered ids), else an error
    names both lengths; an existing or repeated run id fails the whole call (runs_pkey), an unknown flow fails
    it with runs_flow_slug_fkey, a NULL input of a flow without root maps with the not-null violation on
    runs.input - the call is atomic: all runs start or none;
  * waits while the flow is being compiled or deleted (shared flow lock) and then sees the whole flow; locks the
    flow's row FOR KEY SHARE once per call (v0.20.0: the insert side of runs_flow_slug_fkey, which the schema
    leaves out; an unknown flow raises that key's 23503 error before anything is written);
  * returns the run rows as they are at the end, in the order of inputs; NULL or empty inputs start nothing.
$doc$;
