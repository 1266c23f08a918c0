create or replace function pgflow.complete_tasks(
  run_ids      uuid[],
  step_slugs   text[],
  task_indexes integer[],
  outputs      jsonb[],
  attempts     integer[] default null
)
returns table (task_position integer, task_status text, outcome text)
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
-- Generic plans: every statement finds its rows by key or by address, so one plan fits every batch, and a call
-- with a handful of tasks (a lone result) does not pay for planning each of its statements again (PL/pgSQL keeps
-- re-planning when a generic plan looks dearer than a small custom one: about 2.5 ms of CPU per call measured).
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
  v_n         integer := coalesce(cardinality(complete_tasks.run_ids), 0);
  v_fast      integer[];
  v_slow      integer[];
  v_open_runs uuid[];
  v_events    jsonb[];
  v_cascaded  uuid[] := '{}';
  v_ready     uuid[];
  v_run_events jsonb[];
  v_run_id    uuid;
  v_queue     record;
  v_pos       integer;
  v_status    text;
  v_outcomes  text[];
  v_before    text[];
  v_c_steps   text[];
  v_c_flows   text[];
  v_c_outputs jsonb[];
  v_started_runs  uuid[];
  v_started_slugs text[];
  v_started_flows  text[];
  v_started_queues text[];
  v_started_delays integer[];
  v_started_counts integer[];
  v_children   integer;
  v_realtime   boolean;
  v_done_runs  uuid[];
  v_done_flows text[];
  v_c_runs     uuid[];
  v_dependents boolean;
  v_msg_ids    bigint[];
  v_msg_queues text[];
  v_queue_count integer;
  v_pair_flows text[];
  v_pair_steps text[];
  v_defs       jsonb;
begin
  if v_n <> coalesce(cardinality(complete_tasks.step_slugs), 0)
     or v_n <> coalesce(cardinality(complete_tasks.task_indexes), 0)
     or v_n <> coalesce(cardinality(complete_tasks.outputs), 0)
     or (complete_tasks.attempts is not null and v_n <> coalesce(cardinality(complete_tasks.attempts), 0)) then
    raise exception 'complete_tasks: the arrays differ in length: % run_ids, % step_slugs, % task_indexes, % outputs, % attempts',
      v_n, coalesce(cardinality(complete_tasks.step_slugs), 0), coalesce(cardinality(complete_tasks.task_indexes), 0),
      coalesce(cardinality(complete_tasks.outputs), 0),
      case when complete_tasks.attempts is null then 'no' else coalesce(cardinality(complete_tasks.attempts), 0)::text end
      using errcode = '22023';
  end if;
  if v_n = 0 then
    return;
  end if;

  -- Lock order: runs, step states, tasks (as complete_task), each sorted, one key at a time (lateral lookups in key
  -- order). Every later statement finds its rows by key, one index lookup per row (this function plans nested
  -- loops only). An earlier version kept the locked rows' addresses and matched "ctid = any (addresses)", which a
  -- nested loop evaluates against every address for every row: 125,000 comparisons per batch of 500 map tasks.
  -- No statement joins step_states to steps by flow_slug either: with a generic plan's guess of a few rows, the
  -- planner reached the states through idx_step_states_flow_slug, reading every state of the flow for each
  -- completed task (135,000 rows per batch of 100 with 3,000 chain runs).
  -- One statement takes the three sets of locks, in that order: the arms of a UNION ALL run one after the other,
  -- each to its end (three statements paid a statement's fixed cost three times). It also yields the flow and
  -- step of every step state it locked, for the definitions below (FILTER, not WHERE: a condition outside the
  -- arms could be pushed into them and drop an arm's locks).
  select array_agg(locks.flow_slug) filter (where locks.flow_slug is not null),
         array_agg(locks.step_slug) filter (where locks.flow_slug is not null)
    into v_pair_flows, v_pair_steps
    from (
      select null::text as flow_slug, null::text as step_slug
        from (select distinct x.run_id from unnest(complete_tasks.run_ids) as x (run_id) order by x.run_id) as k
        cross join lateral (select from pgflow.runs as r where r.run_id = k.run_id for update) as l
      union all
      select l.flow_slug, l.step_slug
        from (select distinct x.run_id, x.step_slug
                from unnest(complete_tasks.run_ids, complete_tasks.step_slugs) as x (run_id, step_slug)
               order by x.run_id, x.step_slug) as k
        cross join lateral (
          select ss.flow_slug, ss.step_slug from pgflow.step_states as ss
           where ss.run_id = k.run_id and ss.step_slug = k.step_slug
             for update) as l
      union all
      select null, null
        from (select distinct x.run_id, x.step_slug, x.task_index
                from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.task_indexes)
                       as x (run_id, step_slug, task_index)
               order by x.run_id, x.step_slug, x.task_index) as k
        cross join lateral (
          select from pgflow.step_tasks as t
           where t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
             for update) as l
    ) as locks;

  -- The definitions the statements below need, read once per call instead of once per task (v0.20.0: 10-20
  -- buffer accesses per task before, on the pages every worker reads, which two workers contend for). One JSON
  -- object, whose keys are found by binary search (no join of the tasks against the definitions, whatever their
  -- numbers; slugs have no spaces):
  --   '<flow>'        [whether the flow has a step with a condition pattern,
  --                    its steps that have dependents, as the keys of an object];
  --   '<flow> <step>' for each step with a task in this call: [step_type, step_index,
  --                    its dependents as [slug, step_type, step_index, queue_name, start delay] ordered by slug,
  --                    whether one of them is a map].
  select coalesce(jsonb_object_agg(d.k, d.v), '{}')
    into v_defs
    from (
      select p.flow_slug || ' ' || p.step_slug as k,
             jsonb_build_array(s.step_type, s.step_index, coalesce(ch.dependents, '[]'),
                               coalesce(ch.map_dependent, false)) as v
        from (select distinct x.flow_slug, x.step_slug
                from unnest(v_pair_flows, v_pair_steps) as x (flow_slug, step_slug)) as p
        cross join lateral (
          select s.step_type, s.step_index from pgflow.steps as s
           where s.flow_slug = p.flow_slug and s.step_slug = p.step_slug limit 1) as s
        cross join lateral (
          select jsonb_agg(jsonb_build_array(d.step_slug, c.step_type, c.step_index, c.queue_name,
                                             coalesce(c.opt_start_delay, 0)) order by d.step_slug) as dependents,
                 bool_or(c.step_type = 'map') as map_dependent
            from pgflow.deps as d
            cross join lateral (
              select c.step_type, c.step_index, c.queue_name, c.opt_start_delay from pgflow.steps as c
               where c.flow_slug = d.flow_slug and c.step_slug = d.step_slug limit 1) as c
           where d.flow_slug = p.flow_slug and d.dep_slug = p.step_slug) as ch
      union all
      select f.flow_slug,
             jsonb_build_array(
               exists (
                 select 1
                   from pgflow.steps as cs
                  where cs.flow_slug = f.flow_slug
                    and (cs.required_input_pattern is not null or cs.forbidden_input_pattern is not null)),
               -- One scan of the flow's dependencies: the steps that are not leaves.
               coalesce((select jsonb_object_agg(d.dep_slug, true)
                           from pgflow.deps as d
                          where d.flow_slug = f.flow_slug), '{}'))
        from (select distinct x.flow_slug from unnest(v_pair_flows) as x (flow_slug)) as f
    ) as d;

  -- Sort out what cannot be recorded (unknown, duplicate, stale, no longer started) and split the rest into the
  -- plainly completable tasks and the others. A run with any task of the others has all its recordable tasks of
  -- this call completed one by one, so their order within the run is kept.
  select coalesce(array_agg(c.pos order by c.pos) filter (where c.pre_outcome is null and c.fast_run), '{}'),
         coalesce(array_agg(c.pos order by c.run_id, c.step_slug, c.task_index, c.pos)
                    filter (where c.pre_outcome is null and not c.fast_run), '{}'),
         array_agg(c.pre_outcome order by c.pos),
         array_agg(c.task_status order by c.pos)
    into v_fast, v_slow, v_outcomes, v_before
    from (
      select f.*, bool_and(f.fast) filter (where f.pre_outcome is null) over (partition by f.run_id) as fast_run
        from (
      select x.pos, x.run_id, x.step_slug, x.task_index, t.status as task_status,
             case
               when t.run_id is null then 'unknown'
               when x.pos <> min(x.pos) over (partition by x.run_id, x.step_slug, x.task_index) then 'duplicate'
               when x.attempt is not null and t.attempts_count <> x.attempt then 'stale'
               when x.attempt is not null and t.status <> 'started' then 'ignored'
             end as pre_outcome,
             coalesce(
               r.status = 'started'
               and ss.status = 'started'
               and t.status = 'started'
               and not (def.flow ->> 0)::boolean
               and not (
                 (def.step ->> 0) = 'single'
                 and jsonb_typeof(x.output) is distinct from 'array'
                 and (def.step ->> 3)::boolean
                 and exists (
                   select 1
                     from jsonb_array_elements(def.step -> 2) as c (d)
                     join pgflow.step_states as cst on cst.run_id = x.run_id and cst.step_slug = c.d ->> 0
                    where c.d ->> 1 = 'map'
                      and cst.status = 'created'
                      and cst.initial_tasks is null)),
               false) as fast
        from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.task_indexes, complete_tasks.outputs,
                    coalesce(complete_tasks.attempts, array_fill(null::integer, array[v_n])))
               with ordinality as x (run_id, step_slug, task_index, output, attempt, pos)
        -- One lookup per element for each row (LIMIT keeps each a lookup, whatever the plan's estimates).
        left join lateral (
          select r.flow_slug, r.status from pgflow.runs as r where r.run_id = x.run_id limit 1) as r on true
        left join lateral (
          select ss.status from pgflow.step_states as ss
           where ss.run_id = x.run_id and ss.step_slug = x.step_slug limit 1) as ss on true
        left join lateral (
          select t.run_id, t.status, t.attempts_count from pgflow.step_tasks as t
           where t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
           limit 1) as t on true
        -- The run's flow's and the step's definitions, found once per element.
        left join lateral (
          select v_defs -> r.flow_slug as flow, v_defs -> (r.flow_slug || ' ' || x.step_slug) as step offset 0) as def
          on true
        ) as f
    ) as c;

  if cardinality(v_fast) > 0 then
    -- Event payloads (JSON) are built only for realtime.send; the notifications are made from the fields.
    v_realtime := pgflow._trusted_realtime_send() is not null;

    -- The tasks, and their messages for the archive below (sorted by id; v_msg_queues pairs each with its queue).
    with updated as (
      update pgflow.step_tasks as t
         set status = 'completed',
             completed_at = now(),
             output = x.output
        from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.task_indexes, complete_tasks.outputs)
               with ordinality as x (run_id, step_slug, task_index, output, pos)
       where x.pos = any (v_fast)
         and t.run_id = x.run_id
         and t.step_slug = x.step_slug
         and t.task_index = x.task_index
      returning t.queue_name, t.message_id
    )
    select array_agg(u.message_id order by u.message_id, u.queue_name) filter (where u.message_id is not null),
           array_agg(u.queue_name order by u.message_id, u.queue_name) filter (where u.message_id is not null),
           count(distinct u.queue_name) filter (where u.message_id is not null)
      into v_msg_ids, v_msg_queues, v_queue_count
      from updated as u;

    -- Their step states: remaining_tasks drops by the tasks completed; a step whose last task completed becomes
    -- 'completed' in the same row version, with its output (single: the task's output; map: all task outputs as
    -- one array ordered by task_index).
    with counts as (
      -- first_output: a single step's one task (index 0) completes in this call when the step does, so its output
      -- is here and need not be read back from step_tasks.
      select x.run_id, x.step_slug, count(*)::integer as n, (array_agg(x.output order by x.pos))[1] as first_output
        from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.outputs)
               with ordinality as x (run_id, step_slug, output, pos)
       where x.pos = any (v_fast)
       group by x.run_id, x.step_slug
    ),
    updated as (
      update pgflow.step_states as ss
         set remaining_tasks = ss.remaining_tasks - c.n,
             status = case when ss.remaining_tasks - c.n = 0 then 'completed' else ss.status end,
             completed_at = case when ss.remaining_tasks - c.n = 0 then now() else ss.completed_at end,
             output = case
                        when ss.remaining_tasks - c.n <> 0 then ss.output
                        when (v_defs -> (ss.flow_slug || ' ' || ss.step_slug) ->> 0) = 'map' then (
                          select coalesce(jsonb_agg(t.output order by t.task_index), '[]'::jsonb)
                            from pgflow.step_tasks as t
                           where t.run_id = ss.run_id and t.step_slug = ss.step_slug and t.status = 'completed')
                        else c.first_output
                      end
        from counts as c
       where ss.run_id = c.run_id
         and ss.step_slug = c.step_slug
      returning ss.flow_slug, ss.run_id, ss.step_slug, ss.status, ss.output, ss.completed_at,
                (v_defs -> (ss.flow_slug || ' ' || ss.step_slug) ->> 1)::integer as step_index
    )
    select array_agg(u.run_id order by u.run_id, u.step_index),
           array_agg(u.step_slug order by u.run_id, u.step_index),
           array_agg(u.flow_slug order by u.run_id, u.step_index),
           array_agg(u.output order by u.run_id, u.step_index),
           array_agg(case when v_realtime then jsonb_build_object(
                       'event_type', 'step:completed',
                       'run_id', u.run_id,
                       'flow_slug', u.flow_slug,
                       'step_slug', u.step_slug,
                       'status', u.status,
                       'output', u.output,
                       'completed_at', u.completed_at) end order by u.run_id, u.step_index),
           -- Whether any completed step has dependents.
           coalesce(bool_or(jsonb_array_length(v_defs -> (u.flow_slug || ' ' || u.step_slug) -> 2) > 0), false)
      into v_c_runs, v_c_steps, v_c_flows, v_c_outputs, v_events, v_dependents
      from updated as u
     where u.status = 'completed';

    if v_c_runs is not null then
      -- Dependents of the completed steps: one dependency fewer per completed parent; a dependent map learns its
      -- task count from its parent's array. A dependent that becomes ready with tasks to run becomes 'started' in
      -- the same row version (these flows have no conditions to resolve first); its messages, tasks and
      -- step:started event follow below, with the other steps that start. The dependents are locked first (key
      -- order, as above). Completed leaf steps have none: then neither statement runs.
      v_children := 0;
      if v_dependents then
        select count(*)
          into v_children
          from (select distinct x.run_id, d.e ->> 0 as step_slug
                    from unnest(v_c_runs, v_c_steps, v_c_flows) as x (run_id, step_slug, flow_slug)
                    cross join lateral jsonb_array_elements(v_defs -> (x.flow_slug || ' ' || x.step_slug) -> 2) as d (e)
                   order by x.run_id, d.e ->> 0) as k
            cross join lateral (
              select from pgflow.step_states as cs
               where cs.run_id = k.run_id and cs.step_slug = k.step_slug
                 for update) as l;
      end if;
      if v_children > 0 then
        with upd as (
          update pgflow.step_states as cs
             set remaining_deps = cs.remaining_deps - p.n,
                 initial_tasks = case
                                   when p.child_type = 'map' and cs.initial_tasks is null then p.output_len
                                   else cs.initial_tasks
                                 end,
                 status = case
                            when cs.status = 'created' and cs.remaining_deps - p.n = 0
                                 and coalesce(case
                                                when p.child_type = 'map' and cs.initial_tasks is null then p.output_len
                                                else cs.initial_tasks
                                              end, 0) > 0
                            then 'started'
                            else cs.status
                          end,
                 started_at = case
                                when cs.status = 'created' and cs.remaining_deps - p.n = 0
                                     and coalesce(case
                                                    when p.child_type = 'map' and cs.initial_tasks is null then p.output_len
                                                    else cs.initial_tasks
                                                  end, 0) > 0
                                then now()
                                else cs.started_at
                              end,
                 remaining_tasks = case
                                     when cs.status = 'created' and cs.remaining_deps - p.n = 0
                                          and coalesce(case
                                                         when p.child_type = 'map' and cs.initial_tasks is null then p.output_len
                                                         else cs.initial_tasks
                                                       end, 0) > 0
                                     then case
                                            when p.child_type = 'map' and cs.initial_tasks is null then p.output_len
                                            else cs.initial_tasks
                                          end
                                     else cs.remaining_tasks
                                   end
            from (
              select x.run_id, d.e ->> 0 as child_slug, d.e ->> 1 as child_type, (d.e ->> 2)::integer as child_index,
                     d.e ->> 3 as child_queue, (d.e ->> 4)::integer as child_delay,
                     count(*)::integer as n,
                     max(case when jsonb_typeof(x.output) = 'array' then jsonb_array_length(x.output) end) as output_len
                from unnest(v_c_runs, v_c_steps, v_c_flows, v_c_outputs) as x (run_id, step_slug, flow_slug, output)
                -- Each completed step's dependents, from the definitions read above.
                cross join lateral jsonb_array_elements(v_defs -> (x.flow_slug || ' ' || x.step_slug) -> 2) as d (e)
               group by x.run_id, d.e
            ) as p
           where cs.run_id = p.run_id
             and cs.step_slug = p.child_slug
          returning cs.run_id, cs.step_slug, cs.flow_slug, cs.remaining_deps, cs.status, cs.initial_tasks,
                    p.child_index, p.child_queue, p.child_delay
        )
        -- The started dependents by run, then step_index (the order of their step:started events), with what
        -- _send_step_tasks needs to send their tasks without reading them back.
        select array_agg(distinct u.run_id) filter (where u.remaining_deps = 0 and u.status = 'created'),
               array_agg(u.run_id order by u.run_id, u.child_index) filter (where u.status = 'started'),
               array_agg(u.step_slug order by u.run_id, u.child_index) filter (where u.status = 'started'),
               array_agg(u.flow_slug order by u.run_id, u.child_index) filter (where u.status = 'started'),
               array_agg(u.child_queue order by u.run_id, u.child_index) filter (where u.status = 'started'),
               array_agg(u.child_delay order by u.run_id, u.child_index) filter (where u.status = 'started'),
               array_agg(u.initial_tasks order by u.run_id, u.child_index) filter (where u.status = 'started')
          into v_ready, v_started_runs, v_started_slugs, v_started_flows, v_started_queues, v_started_delays,
               v_started_counts
          from upd as u;
      end if;

      -- The runs: one step fewer per completed step. A run left without steps is complete (nothing can start
      -- or cascade in it any more): it becomes 'completed' in the same row version, with the outputs of its
      -- completed leaf steps, as maybe_complete_run does.
      with counts as (
        select x.run_id, count(*)::integer as n from unnest(v_c_runs) as x (run_id) group by x.run_id
      ),
      updated as (
        update pgflow.runs as r
           set remaining_steps = r.remaining_steps - c.n,
               status = case when r.remaining_steps - c.n = 0 then 'completed' else r.status end,
               completed_at = case when r.remaining_steps - c.n = 0 then now() else r.completed_at end,
               output = case
                          when r.remaining_steps - c.n <> 0 then r.output
                          else (
                            select jsonb_object_agg(ss.step_slug, ss.output)
                              from pgflow.step_states as ss
                             where ss.run_id = r.run_id
                               and ss.status = 'completed'
                               -- A leaf: no dependents (from the definitions of the run's flow, read above).
                               and coalesce(
                                     not (v_defs -> r.flow_slug -> 1) ? ss.step_slug,
                                     not exists (
                                       select 1 from pgflow.deps as d
                                        where d.flow_slug = r.flow_slug and d.dep_slug = ss.step_slug)))
                        end
          from counts as c
         where r.run_id = c.run_id
        returning r.run_id, r.flow_slug, r.status, r.output, r.completed_at
      )
      select array_agg(u.run_id order by u.run_id) filter (where u.status <> 'completed'),
             array_agg(u.run_id order by u.run_id) filter (where u.status = 'completed'),
             array_agg(u.flow_slug order by u.run_id) filter (where u.status = 'completed'),
             array_agg(case when v_realtime then jsonb_build_object(
                         'event_type', 'run:completed',
                         'run_id', u.run_id,
                         'flow_slug', u.flow_slug,
                         'status', u.status,
                         'output', u.output,
                         'completed_at', u.completed_at) end order by u.run_id) filter (where u.status = 'completed')
        into v_open_runs, v_done_runs, v_done_flows, v_run_events
        from updated as u;

      -- One call for all events: every step:completed (by run, then step_index), then every run:completed, so
      -- each run's steps come before the run itself (no sort: sorting the payloads cost more than emitting them).
      -- The step slugs stop after the step events: the run events that follow have none.
      perform pgflow._emit_envelopes(
        array_fill('step:completed'::text, array[cardinality(v_c_runs)])
          || array_fill('run:completed'::text, array[coalesce(cardinality(v_done_runs), 0)]),
        v_c_runs || v_done_runs,
        v_c_flows || v_done_flows,
        v_c_steps,
        array_fill('completed'::text, array[cardinality(v_c_runs) + coalesce(cardinality(v_done_runs), 0)]),
        case when v_realtime then v_events || coalesce(v_run_events, '{}') end);

      -- Taskless steps (maps over an empty array) that became ready complete by cascade. (The flows of these
      -- runs have no conditions, so resolving conditions first would change nothing.) Only a dependent updated
      -- above can have become ready.
      if v_ready is not null then
        v_cascaded := array(
          select r.run_id
            from (select distinct x.run_id from unnest(v_open_runs) as x (run_id) order by x.run_id) as r
           where exists (
             select 1
               from pgflow.step_states as ss
              where ss.run_id = r.run_id
                and ss.status = 'created'
                and ss.remaining_deps = 0
                and ss.initial_tasks = 0)
           order by r.run_id);
        foreach v_run_id in array v_cascaded loop
          perform pgflow.cascade_complete_taskless_steps(v_run_id);
        end loop;
      end if;
    end if;

    -- The completed tasks' messages, one archive call per queue (in the order of the queues' names).
    if v_queue_count = 1 then
      perform pgmq.archive(v_msg_queues[1], v_msg_ids);
    elsif v_queue_count > 1 then
      for v_queue in
        select m.queue_name, array_agg(m.message_id order by m.message_id) as msg_ids
          from unnest(v_msg_queues, v_msg_ids) as m (queue_name, message_id)
         group by m.queue_name
         order by m.queue_name
      loop
        perform pgmq.archive(v_queue.queue_name, v_queue.msg_ids);
      end loop;
    end if;

    -- Only runs where a dependent became ready or a cascade ran can have steps to start. Without either, the only
    -- steps to start are the dependents the update above started, and their fields are at hand.
    if v_ready is not null or cardinality(v_cascaded) > 0 then
      perform pgflow._start_ready_steps_batch(coalesce(v_ready, '{}') || v_cascaded, v_started_runs, v_started_slugs);
      perform pgflow._maybe_complete_runs(v_cascaded);
    elsif v_started_runs is not null then
      perform pgflow._send_step_tasks(v_started_runs, v_started_slugs, v_started_flows, v_started_queues,
                                      v_started_delays, v_started_counts);
    end if;

    foreach v_pos in array v_fast loop
      v_outcomes[v_pos] := 'recorded';
    end loop;
  end if;

  -- Everything else, one complete_task call per task.
  foreach v_pos in array v_slow loop
    v_status := null;
    select t.status into v_status
      from pgflow.complete_task(complete_tasks.run_ids[v_pos], complete_tasks.step_slugs[v_pos],
                                complete_tasks.task_indexes[v_pos], complete_tasks.outputs[v_pos],
                                complete_tasks.attempts[v_pos]) as t;
    v_outcomes[v_pos] := case
                           when v_before[v_pos] = 'started' and v_status is distinct from 'started' then 'recorded'
                           else 'ignored'
                         end;
  end loop;

  -- Every element reports its task's status as it is now: when every element was recorded here, 'completed' (nothing
  -- after the update above changes a completed task), without reading the tasks again.
  if cardinality(v_fast) = v_n then
    for v_pos in 1 .. v_n loop
      task_position := v_pos;
      task_status := 'completed';
      outcome := 'recorded';
      return next;
    end loop;
    return;
  end if;
  return query
    select x.pos::integer, t.status, v_outcomes[x.pos]
      from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.task_indexes)
             with ordinality as x (run_id, step_slug, task_index, pos)
      left join lateral (
        select t.status
          from pgflow.step_tasks as t
         where t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
         limit 1) as t on true
     order by x.pos;
end;
$$;

comment on function pgflow.complete_tasks(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[]) is $doc$
pgflow.complete_tasks(run_ids, step_slugs, task_indexes, outputs, attempts) completes many tasks in one call (one
transaction), element i of the arrays naming one task, its output and (optionally) the attempt that produced it.
It guarantees:
  * attempt fencing (v0.20.0): an element whose attempts[i] is given and is not the task's current attempt, or
    whose task is not 'started', changes nothing (outcome 'stale' or 'ignored'); the same task named again later
    in the call changes nothing either (outcome 'duplicate', not a second 'completed'); attempts NULL (or a NULL
    element) is not fenced;
  * the outcome is the one of calling pgflow.complete_task(run_ids[i], step_slugs[i], task_indexes[i],
    outputs[i]) for every i, in the order of (run_id, step_slug, task_index): every guarantee of complete_task
    holds for every task (one result recorded per task; late, replayed and unknown callbacks, failed runs and
    type violations behave exactly as there);
  * rows are locked in the order runs, step states, tasks, each set sorted by key, so concurrent calls (batches
    or single complete_task calls) never wait on each other in a cycle;
  * the cost grows with the number of elements only, never with the size of the tables, whatever the planner's
    statistics or cached generic plans say: every row is looked up by key, one index lookup per row, in nested
    loops only (v0.20.0; before, a generic plan could read every step state of the flow for each completed task,
    or a whole table through its primary key when the plan was made while the table was small); the
    definitions (steps, dependencies) are read once per call for the steps named in it, not once per task;
  * tasks that are plainly completable - run, step state and task 'started', first mention of the task in the
    call, the flow has no step with a condition pattern, no type violation is possible, and the same holds for
    every other task of the same run in the call - are completed together: one UPDATE of their tasks, one of
    their step states (a step whose last task completes becomes 'completed' with its output in the same row
    version), one of the dependents (remaining_deps, map task counts), one UPDATE of the runs (a run left
    without steps becomes 'completed' in the same row version), step:completed and run:completed events in one
    call (every step:completed by run and step_index, then every run:completed: per run, its steps in
    step_index order, then the run), taskless steps cascade, one pgmq.archive call
    per queue for their messages, ready steps of the runs where a dependent became ready or a cascade ran start
    through pgflow._start_ready_steps_batch, and runs finished by a cascade complete through
    pgflow._maybe_complete_runs; every other task goes through pgflow.complete_task itself, afterwards. Events of one run keep their causal order (a dependent's step:started may follow the
    completion of a sibling completed in the same call);
  * returns one row per array element: its 1-based position, the task's status afterwards ('completed' when
    recorded; the status complete_task reports otherwise; NULL when no such task exists) and the outcome:
    'recorded' (this call recorded the result: the task completed, or failed with a type violation), 'stale',
    'ignored' (the task, its step or its run is no longer 'started': nothing recorded), 'duplicate' or 'unknown'
    (no such task);
  * arrays of different lengths raise an error naming the lengths before anything changes; NULL or empty
    arrays complete nothing and return nothing. An error in any task rolls the whole call back: callers that
    must not lose the other results call complete_task per task then.
$doc$;
