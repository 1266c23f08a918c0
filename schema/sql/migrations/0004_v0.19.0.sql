-- pgflow-go schema v0.19.0: changes since v0.18.0.
set local check_function_bodies = off;

-- Fewer index entries per task: every index of step_tasks and step_states gets an entry for every row version, and
-- their status updates cannot be HOT. These three are covered by other indexes: idx_step_tasks_message_id by
-- step_tasks_queue_name_message_id_key, idx_step_tasks_flow_run_step and idx_step_states_run_id by the primary keys
-- (lookups by run). Measured: 10-20 % less database CPU per task.
drop index pgflow.idx_step_tasks_message_id;
drop index pgflow.idx_step_tasks_flow_run_step;
drop index pgflow.idx_step_states_run_id;

-- start_tasks: a claim costs the same whatever the statistics say (stale statistics made the v0.18.0 claim a nested
-- loop over every queued task).
-- pgflow.start_tasks(flow_slug, msg_ids, worker_id, queue_name) guarantees (phase 2 of polling, after pgmq.read*):
--   * queue_name is the queue the worker actually read msg_ids from; NULL (a v0.16.0 worker calling with three
--     arguments) means the flow's default queue, pgflow._default_queue_name(flow_slug). It is compared in lower
--     case, the canonical form tasks store;
--   * claims exactly the tasks whose stored identity (step_tasks.queue_name, message_id) is (that queue, one of
--     msg_ids), that belong to flow_slug, are 'queued', and whose run and step are 'started'; each claimed task
--     becomes 'started' (attempts_count + 1, started_at now, last_worker_id = worker_id, which must be a row of
--     pgflow.workers). The message body is never read: it does not authorise a claim;
--   * everything else named in msg_ids is left untouched - a task that is already started (not claimed again, no
--     attempt consumed), terminal or otherwise ineligible, a task of another flow, or an id no task has in that
--     queue: no row changes, no message is archived, deleted or made visible earlier or later;
--   * a task is claimed at most once: rows are locked with FOR UPDATE SKIP LOCKED and re-checked, so of two
--     concurrent calls naming the same ids each task goes to one caller only, and only rows this call actually
--     claimed are returned. No PGMQ row is locked;
--   * every claimed message's visibility is set to the effective step timeout (steps.opt_timeout, else
--     flows.opt_timeout) + 2 seconds from now, at most 2147483647 s (a timeout near the integer limit cannot make
--     the claim fail with "integer out of range", as in v0.17.0), in the queue the task stored (one set_vt_batch
--     call per queue);
--   * returns one step_task_record per claimed task, ordered by msg_id: input = the element task_index of the run
--     input (root map), of the dependency's stored output (dependent map), or {<dep_slug>: <output>} over the
--     completed dependencies ({} for root steps); flow_input = the run input for single steps without
--     dependencies, NULL otherwise;
--   * the cost of a claim grows with the number of msg_ids only, never with the number of queued tasks, whatever the
--     planner's statistics say: each id is looked up by the unique key (queue_name, message_id) and each row is then
--     locked and updated by its physical address (since v0.19.0; stale statistics made v0.18.0 quadratic);
--   * NULL or empty msg_ids claim nothing and return nothing.
create or replace function pgflow.start_tasks(
  flow_slug  text,
  msg_ids    bigint[],
  worker_id  uuid,
  queue_name text default null
)
returns setof pgflow.step_task_record
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queue_name text;
  v_claimed    tid[] := '{}';
  v_rows       tid[];
  v_group      record;
begin
  if start_tasks.msg_ids is null or cardinality(start_tasks.msg_ids) = 0 then
    return;
  end if;

  v_queue_name := lower(coalesce(start_tasks.queue_name, pgflow._default_queue_name(start_tasks.flow_slug)));

  -- Every statement below finds rows by key: one unique-index lookup per message id, then the rows themselves by
  -- physical address. A join of the id set to step_tasks, or a status condition the planner could answer from a
  -- partial index, lets stale statistics (say, analyzed before a burst of queued tasks) turn the claim into a
  -- nested loop over every queued task: quadratic, 100 ms per claim of 100 tasks with 5,000 queued.
  v_rows := array(
    select t.row_address
      from (select distinct m.id from unnest(start_tasks.msg_ids) as m (id)) as m
      cross join lateral (
        select t.ctid as row_address
          from pgflow.step_tasks as t
         where t.queue_name = v_queue_name
           and t.message_id = m.id
         limit 1) as t);  -- the key is unique; LIMIT keeps the planner from turning the lookups into a join

  for v_group in
    -- Re-checked under the row lock (FOR UPDATE SKIP LOCKED: never waits, so no lock order is needed): a row that
    -- changed since the lookup has a new address and is left to whoever changed it.
    with candidates as (
      select l.row_address
        from unnest(v_rows) as k (row_address)
        cross join lateral (
          select t.ctid as row_address
            from pgflow.step_tasks as t
           where t.ctid = k.row_address
             and t.queue_name = v_queue_name
             and t.message_id = any (start_tasks.msg_ids)
             and t.flow_slug = start_tasks.flow_slug
             and t.status = 'queued'
             and (select r.status from pgflow.runs as r where r.run_id = t.run_id) = 'started'
             and (select ss.status
                    from pgflow.step_states as ss
                   where ss.run_id = t.run_id and ss.step_slug = t.step_slug) = 'started'
             for update of t skip locked) as l
    ),
    claimed as (
      update pgflow.step_tasks as t
         set status = 'started',
             attempts_count = t.attempts_count + 1,
             started_at = now(),
             last_worker_id = start_tasks.worker_id
       where t.ctid = any (array(select c.row_address from candidates as c))
      returning t.ctid as row_address, t.flow_slug, t.step_slug, t.queue_name, t.message_id
    )
    select c.queue_name,
           array_agg(c.message_id order by c.message_id) as msg_ids,
           array_agg(least(coalesce(s.opt_timeout, f.opt_timeout), 2147483645) + 2 order by c.message_id) as vt_offsets,
           array_agg(c.row_address) as row_addresses
      from claimed as c
      join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
      join pgflow.flows as f on f.flow_slug = c.flow_slug
     group by c.queue_name
     order by c.queue_name
  loop
    perform pgflow.set_vt_batch(v_group.queue_name, v_group.msg_ids, v_group.vt_offsets);
    v_claimed := v_claimed || v_group.row_addresses;
  end loop;

  if cardinality(v_claimed) = 0 then
    return;
  end if;

  return query
    select t.flow_slug,
           t.run_id,
           t.step_slug,
           case
             when s.step_type = 'map' and s.deps_count = 0 then r.input -> t.task_index
             when s.step_type = 'map' then (
               select dss.output -> t.task_index
                 from pgflow.deps as d
                 join pgflow.step_states as dss on dss.run_id = t.run_id and dss.step_slug = d.dep_slug
                where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug
                limit 1)
             else coalesce(
               (select jsonb_object_agg(d.dep_slug, dss.output)
                  from pgflow.deps as d
                  join pgflow.step_states as dss on dss.run_id = t.run_id and dss.step_slug = d.dep_slug
                 where d.flow_slug = t.flow_slug
                   and d.step_slug = t.step_slug
                   and dss.status = 'completed'),
               '{}'::jsonb)
           end,
           t.message_id,
           t.task_index,
           case when s.step_type = 'single' and s.deps_count = 0 then r.input end
      from pgflow.step_tasks as t
      join pgflow.runs as r on r.run_id = t.run_id
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
     where t.ctid = any (v_claimed)
     order by t.message_id;
end;
$$;

-- delete_flow_and_data: tasks found through their runs (no index of step_tasks starts with flow_slug any more).
-- pgflow.delete_flow_and_data(p_flow_slug) guarantees: removes the flow completely in the caller's transaction:
--   * the flow's queues are its persisted routes (the distinct steps.queue_name of its steps), or its default queue
--     pgflow._default_queue_name(p_flow_slug) when the flow exists but has no steps;
--   * each of those queues is resolved to the spelling PGMQ lists for it (pgmq.list_queues(), compared in lower
--     case, so a mixed-case queue created by v0.16.0 is found); a queue listed under more than one spelling is
--     ambiguous and raises an error naming the flow, the queue and the spellings BEFORE anything is deleted;
--     a queue PGMQ does not list is already gone and is skipped;
--   * then all of the flow's step_tasks, step_states, runs, deps, steps and the flow row are deleted, and every
--     resolved queue is dropped with its archive by pgmq.drop_queue(listed spelling), which also removes that
--     spelling's metadata. Messages are not archived one by one before their queue is dropped;
--   * any failing PGMQ call fails the function, so the caller's transaction rolls back as a whole;
--   * calls for one normalized slug are serialised with create_flow and ensure_flow_compiled by the
--     transaction-level advisory lock (1, hashtext(lower(p_flow_slug)));
--   * destructive and irreversible; meant for development and for recompiling a changed flow. Workers rows are
--     not touched. An unknown flow is not an error and touches no queue.
create or replace function pgflow.delete_flow_and_data(p_flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queue  record;
  v_listed text[];
  v_drop   text[] := '{}';
begin
  perform pg_advisory_xact_lock(1, hashtext(lower(p_flow_slug)));

  for v_queue in
    select distinct s.queue_name
      from pgflow.steps as s
     where s.flow_slug = p_flow_slug
    union
    select pgflow._default_queue_name(f.flow_slug)
      from pgflow.flows as f
     where f.flow_slug = p_flow_slug
       and not exists (select 1 from pgflow.steps as s where s.flow_slug = f.flow_slug)
     order by 1
  loop
    select coalesce(array_agg(q.queue_name::text order by q.queue_name), '{}') into v_listed
      from pgmq.list_queues() as q
     where lower(q.queue_name) = v_queue.queue_name;

    if cardinality(v_listed) > 1 then
      raise exception using
        errcode = '55000',
        message = format(
          'Cannot delete flow "%s": its queue "%s" is listed by PGMQ under %s spellings (%s); nothing was deleted',
          p_flow_slug, v_queue.queue_name, cardinality(v_listed), array_to_string(v_listed, ', ')),
        hint = 'The spellings share one set of PGMQ tables. pgflow manages its queues exclusively and does not repair PGMQ metadata; resolve the duplicate listing by hand, then retry.';
    end if;
    v_drop := v_drop || v_listed;
  end loop;

  -- Tasks are found through their runs (idx_runs_flow_slug, then step_tasks_pkey): step_tasks has no index that
  -- starts with flow_slug.
  delete from pgflow.step_tasks as t
   where t.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = p_flow_slug)
     and t.flow_slug = p_flow_slug;
  delete from pgflow.step_states as ss where ss.flow_slug = p_flow_slug;
  delete from pgflow.runs as r where r.flow_slug = p_flow_slug;
  delete from pgflow.deps as d where d.flow_slug = p_flow_slug;
  delete from pgflow.steps as s where s.flow_slug = p_flow_slug;
  delete from pgflow.flows as f where f.flow_slug = p_flow_slug;

  for i in 1 .. coalesce(cardinality(v_drop), 0) loop
    perform pgmq.drop_queue(v_drop[i]);
  end loop;
end;
$$;

-- A step that becomes ready with tasks to run is written 'started' in the row version that makes it ready: root
-- steps at start_flows (flows without conditions and root maps) and dependents at complete_tasks. One step_states
-- row version fewer per started step; _start_ready_steps_batch takes the steps started that way.
drop function pgflow._start_ready_steps_batch(uuid[]);

-- pgflow._start_ready_steps_batch(run_ids, started_run_ids, started_step_slugs) guarantees: for every run of run_ids
-- exactly what pgflow.start_ready_steps(run_id) guarantees, done set-based:
--   * only runs that are 'started' are touched; NULL or empty run_ids do nothing;
--   * every step state of those runs that is 'created' with remaining_deps 0 and initial_tasks > 0 becomes
--     'started' (started_at now, remaining_tasks = initial_tasks), exactly once even when called concurrently
--     (one UPDATE starts them all);
--   * step:started is emitted per started step, ordered by run_id, then step_index;
--   * one message per task {"flow_slug", "run_id", "step_slug", "task_index"} goes to the step's queue
--     (steps.queue_name), delayed by the step's opt_start_delay seconds (NULL = 0), with one pgmq.send_batch call
--     per (queue, delay) for all the runs together, and one 'queued' step_tasks row per message is written with
--     its message_id and that queue_name (task_index 0 .. initial_tasks-1, paired with the message carrying that
--     index); no queue is created here (no DDL);
--   * after sending undelayed messages to a queue, pg_notify('pgflow:queue:<queue_name>', '') wakes the workers
--     listening for that queue (at commit; folded into one notification per queue and transaction);
--   * steps with initial_tasks NULL or 0 are never started here, and conditions are not evaluated here (as in
--     start_ready_steps);
--   * the step states named by the pairs (started_run_ids[i], started_step_slugs[i]) were made 'started' by the
--     caller in this transaction (in the same row version that made them ready, one row version fewer than
--     'created' -> ready -> 'started'): they get exactly what a step started here gets - its step:started event in
--     the same order, its messages and tasks - and are not updated again. NULL arrays name none.
create or replace function pgflow._start_ready_steps_batch(
  run_ids            uuid[],
  started_run_ids    uuid[] default null,
  started_step_slugs text[] default null
)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_group  record;
  v_runs   uuid[];
  v_slugs  text[];
  v_flows  text[];
  v_queues text[];
  v_delays integer[];
  v_counts integer[];
  v_events jsonb[];
  v_live   uuid[];
begin
  if coalesce(cardinality(_start_ready_steps_batch.run_ids), 0) = 0
     and coalesce(cardinality(_start_ready_steps_batch.started_run_ids), 0) = 0 then
    return;
  end if;

  -- Every table is filtered with "= any (array)" on its key, never joined to a set of ids: with statistics that
  -- do not know a backlog of thousands of started runs, a join can turn into a nested loop over all of them.
  v_live := array(
    select r.run_id from pgflow.runs as r where r.run_id = any (_start_ready_steps_batch.run_ids) and r.status = 'started');

  with started as (
    update pgflow.step_states as ss
       set status = 'started',
           started_at = now(),
           remaining_tasks = ss.initial_tasks
     where ss.run_id = any (v_live)
       and ss.status = 'created'
       and ss.remaining_deps = 0
       and ss.initial_tasks > 0
    returning ss.flow_slug, ss.run_id, ss.step_slug, ss.status, ss.started_at, ss.remaining_tasks,
              ss.remaining_deps, ss.initial_tasks
  ),
  already_started as (
    -- One primary-key lookup per pair (LIMIT keeps the planner from turning the lookups into a join).
    select ss.*
      from unnest(_start_ready_steps_batch.started_run_ids, _start_ready_steps_batch.started_step_slugs)
             as k (run_id, step_slug)
      cross join lateral (
        select x.flow_slug, x.run_id, x.step_slug, x.status, x.started_at, x.remaining_tasks, x.remaining_deps,
               x.initial_tasks
          from pgflow.step_states as x
         where x.run_id = k.run_id and x.step_slug = k.step_slug
         limit 1) as ss
  ),
  steps as (
    select st.*, s.step_index, s.queue_name, coalesce(s.opt_start_delay, 0) as start_delay
      from (select * from started union all select * from already_started) as st
      join pgflow.steps as s on s.flow_slug = st.flow_slug and s.step_slug = st.step_slug
  )
  select array_agg(x.run_id order by x.run_id, x.step_index),
         array_agg(x.step_slug order by x.run_id, x.step_index),
         array_agg(x.flow_slug order by x.run_id, x.step_index),
         array_agg(x.queue_name order by x.run_id, x.step_index),
         array_agg(x.start_delay order by x.run_id, x.step_index),
         array_agg(x.initial_tasks order by x.run_id, x.step_index),
         array_agg(jsonb_build_object(
                     'event_type', 'step:started',
                     'run_id', x.run_id,
                     'flow_slug', x.flow_slug,
                     'step_slug', x.step_slug,
                     'status', x.status,
                     'started_at', x.started_at,
                     'remaining_tasks', x.remaining_tasks,
                     'remaining_deps', x.remaining_deps) order by x.run_id, x.step_index)
    into v_runs, v_slugs, v_flows, v_queues, v_delays, v_counts, v_events
    from steps as x;

  if v_runs is null then
    return;
  end if;
  perform pgflow._emit_events(v_events);

  -- One send_batch per (queue, delay). send_batch returns the new ids in array order and ids increase along the
  -- array, so the n-th smallest id belongs to the n-th message of the array, which is ordered by
  -- (run_id, step_slug, task_index) exactly like the numbering of the tasks.
  for v_group in
    select distinct x.queue_name, x.start_delay
      from unnest(v_queues, v_delays) as x (queue_name, start_delay)
     order by x.queue_name, x.start_delay
  loop
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name)
    select m.flow_slug, m.run_id, m.step_slug, m.task_index, sent.msg_id, v_group.queue_name
      from (
        select x.flow_slug, x.run_id, x.step_slug, i.i as task_index,
               row_number() over (order by x.run_id, x.step_slug, i.i) as n
          from unnest(v_flows, v_runs, v_slugs, v_queues, v_delays, v_counts)
                 as x (flow_slug, run_id, step_slug, queue_name, start_delay, initial_tasks)
          cross join lateral generate_series(0, x.initial_tasks - 1) as i (i)
         where x.queue_name = v_group.queue_name
           and x.start_delay = v_group.start_delay
      ) as m
      join (
        select s.msg_id, row_number() over (order by s.msg_id) as n
          from pgmq.send_batch(
                 v_group.queue_name,
                 array(
                   select jsonb_build_object(
                            'flow_slug', x.flow_slug,
                            'run_id', x.run_id,
                            'step_slug', x.step_slug,
                            'task_index', i.i)
                     from unnest(v_flows, v_runs, v_slugs, v_queues, v_delays, v_counts)
                            as x (flow_slug, run_id, step_slug, queue_name, start_delay, initial_tasks)
                     cross join lateral generate_series(0, x.initial_tasks - 1) as i (i)
                    where x.queue_name = v_group.queue_name
                      and x.start_delay = v_group.start_delay
                    order by x.run_id, x.step_slug, i.i),
                 v_group.start_delay) as s (msg_id)
      ) as sent on sent.n = m.n;

    -- Wake the workers waiting on this queue (one notification per queue and transaction: PostgreSQL folds
    -- identical notifications of one transaction). Delayed messages are not visible yet: no wake-up.
    if v_group.start_delay = 0 then
      perform pg_notify('pgflow:queue:' || v_group.queue_name, '');
    end if;
  end loop;
end;
$$;

-- pgflow.start_flows(flow_slug, inputs, run_ids) starts one run per element of inputs in one call (one
-- transaction). It guarantees:
--   * for every input exactly what pgflow.start_flow(flow_slug, inputs[i], run_ids[i]) guarantees: the run row
--     (run_id = run_ids[i] when given, else random; remaining_steps = number of steps) and one 'created' step
--     state per step, run:started, conditions resolved (flows with condition patterns resolve them run by run,
--     with the same functions start_flow calls), taskless steps completed, ready steps started with tasks and
--     messages, and the run completed when nothing is left;
--   * set-based work: one INSERT for all runs, one for all step states, and the ready steps of all runs start
--     through pgflow._start_ready_steps_batch (one pgmq.send_batch per queue and delay), finished runs complete
--     through pgflow._maybe_complete_runs; events of one run keep start_flow's order;
--   * a flow with root map steps needs an array input for every run: SQL NULL raises
--     'Flow <slug> has root map steps but input <n> is NULL', any other JSON type raises
--     'Flow <slug> has root map steps but input <n> is not an array (got <type>)' (P0001, n counting from 1),
--     before anything is written;
--   * run_ids, when not NULL, must have one element per input (NULL elements mean random ids), else an error
--     names both lengths; an existing or repeated run id fails the whole call (runs_pkey), an unknown flow fails
--     it with runs_flow_slug_fkey, a NULL input of a flow without root maps with the not-null violation on
--     runs.input - the call is atomic: all runs start or none;
--   * waits while the flow is being compiled or deleted (shared flow lock) and then sees the whole flow;
--   * returns the run rows as they are at the end, in the order of inputs; NULL or empty inputs start nothing.
create or replace function pgflow.start_flows(flow_slug text, inputs jsonb[], run_ids uuid[] default null)
returns setof pgflow.runs
language plpgsql
volatile
set search_path = ''
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
begin
  if v_n = 0 then
    return;
  end if;

  -- Shares the flow's compilation lock (create_flow, ensure_flow_compiled and delete_flow_and_data hold it
  -- exclusively): a start waits for a compilation in progress and then reads the whole flow. Without it a start
  -- could count no steps (compilation not yet visible) yet pass the foreign-key check (which reads the newest
  -- rows) and complete the run at once with output NULL.
  perform pg_advisory_xact_lock_shared(1, hashtext(lower(start_flows.flow_slug)));
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

  v_ids := array(
    select coalesce(start_flows.run_ids[p.pos], gen_random_uuid())
      from generate_series(1, v_n) as p (pos)
     order by p.pos);

  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps)
  select x.run_id, start_flows.flow_slug, x.input, v_step_count
    from unnest(v_ids, start_flows.inputs) with ordinality as x (run_id, input, pos)
   order by x.pos;

  -- Without conditions and root maps nothing can happen to a root step between its creation and its start (no
  -- condition to resolve, no taskless step to cascade): it is written 'started' right away, one row version
  -- instead of two, and _start_ready_steps_batch below sends its messages and events as if it had started it.
  v_fold := not v_conditions and v_root_maps = 0;
  with inserted as (
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
     order by x.pos, s.step_index
    returning step_states.run_id, step_states.step_slug, step_states.status
  )
  select array_agg(i.run_id), array_agg(i.step_slug)
    into v_started_runs, v_started_slugs
    from inserted as i
   where i.status = 'started';

  perform pgflow._emit_events(array(
    select jsonb_build_object(
             'event_type', 'run:started',
             'run_id', r.run_id,
             'flow_slug', r.flow_slug,
             'input', r.input,
             'status', r.status,
             'remaining_steps', r.remaining_steps,
             'started_at', r.started_at)
      from unnest(v_ids) with ordinality as x (run_id, pos)
      join pgflow.runs as r on r.run_id = x.run_id
     order by x.pos));

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
  perform pgflow._start_ready_steps_batch(v_ids, v_started_runs, v_started_slugs);
  perform pgflow._maybe_complete_runs(v_ids);

  return query
    select r.*
      from unnest(v_ids) with ordinality as x (run_id, pos)
      join pgflow.runs as r on r.run_id = x.run_id
     order by x.pos;
end;
$$;

-- pgflow.complete_tasks(run_ids, step_slugs, task_indexes, outputs) completes many tasks in one call (one
-- transaction), element i of the four arrays naming one task and its output. It guarantees:
--   * the outcome is the one of calling pgflow.complete_task(run_ids[i], step_slugs[i], task_indexes[i],
--     outputs[i]) for every i, in the order of (run_id, step_slug, task_index): every guarantee of complete_task
--     holds for every task (one result recorded per task; late, replayed and unknown callbacks, failed runs and
--     type violations behave exactly as there);
--   * rows are locked in the order runs, step states, tasks, each set sorted by key, so concurrent calls (batches
--     or single complete_task calls) never wait on each other in a cycle;
--   * tasks that are plainly completable - run, step state and task 'started', first mention of the task in the
--     call, the flow has no step with a condition pattern, no type violation is possible, and the same holds for
--     every other task of the same run in the call - are completed together: one UPDATE of their tasks, one of
--     their step states (a step whose last task completes becomes 'completed' with its output in the same row
--     version), one of the dependents (remaining_deps, map task counts), one UPDATE of the runs (a run left
--     without steps becomes 'completed' in the same row version), step:completed and run:completed events in one
--     call (per run: its steps in step_index order, then the run), taskless steps cascade, one pgmq.archive call
--     per queue for their messages, ready steps of the runs where a dependent became ready or a cascade ran start
--     through pgflow._start_ready_steps_batch, and runs finished by a cascade complete through
--     pgflow._maybe_complete_runs; every other task goes through pgflow.complete_task itself, afterwards. Events of one run keep their causal order (a dependent's step:started may follow the
--     completion of a sibling completed in the same call);
--   * returns one row per array element: its 1-based position and the task's status afterwards ('completed' when
--     recorded; the status complete_task reports otherwise; NULL when no such task exists);
--   * arrays of different lengths raise an error naming the four lengths before anything changes; NULL or empty
--     arrays complete nothing and return nothing. An error in any task rolls the whole call back: callers that
--     must not lose the other results call complete_task per task then.
create or replace function pgflow.complete_tasks(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[])
returns table (task_position integer, task_status text)
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_n         integer := coalesce(cardinality(complete_tasks.run_ids), 0);
  v_fast      integer[];
  v_slow      integer[];
  v_runs      uuid[];
  v_events    jsonb[];
  v_cascaded  uuid[] := '{}';
  v_ready     uuid[];
  v_run_events jsonb[];
  v_run_id    uuid;
  v_queue     record;
  v_pos       integer;
  v_status    text;
  v_statuses  text[];
  v_c_steps   text[];
  v_c_flows   text[];
  v_c_outputs jsonb[];
  v_started_runs  uuid[];
  v_started_slugs text[];
begin
  if v_n <> coalesce(cardinality(complete_tasks.step_slugs), 0)
     or v_n <> coalesce(cardinality(complete_tasks.task_indexes), 0)
     or v_n <> coalesce(cardinality(complete_tasks.outputs), 0) then
    raise exception 'complete_tasks: the arrays differ in length: % run_ids, % step_slugs, % task_indexes, % outputs',
      v_n, coalesce(cardinality(complete_tasks.step_slugs), 0), coalesce(cardinality(complete_tasks.task_indexes), 0),
      coalesce(cardinality(complete_tasks.outputs), 0);
  end if;
  if v_n = 0 then
    return;
  end if;
  v_statuses := array_fill(null::text, array[v_n]);

  -- Lock order: runs, step states, tasks (as complete_task), each sorted.
  perform 1
     from pgflow.runs as r
    where r.run_id = any (complete_tasks.run_ids)
    order by r.run_id
      for update;
  -- States and tasks are locked one key at a time (lateral lookups in key order), never by a join whose plan
  -- could scan whole tables.
  perform 1
     from (select distinct x.run_id, x.step_slug
             from unnest(complete_tasks.run_ids, complete_tasks.step_slugs) as x (run_id, step_slug)
            order by x.run_id, x.step_slug) as k
     cross join lateral (
       select 1 from pgflow.step_states as ss
        where ss.run_id = k.run_id and ss.step_slug = k.step_slug
          for update) as l;
  perform 1
     from (select distinct x.run_id, x.step_slug, x.task_index
             from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.task_indexes)
                    as x (run_id, step_slug, task_index)
            order by x.run_id, x.step_slug, x.task_index) as k
     cross join lateral (
       select 1 from pgflow.step_tasks as t
        where t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
          for update) as l;

  -- Split the tasks into the plainly completable ones and the rest. A run with any task of the rest has all its
  -- tasks of this call completed one by one, so their order within the run is kept.
  select coalesce(array_agg(c.pos order by c.pos) filter (where c.fast_run), '{}'),
         coalesce(array_agg(c.pos order by c.run_id, c.step_slug, c.task_index, c.pos) filter (where not c.fast_run), '{}')
    into v_fast, v_slow
    from (
      select f.*, bool_and(f.fast) over (partition by f.run_id) as fast_run
        from (
      select x.pos, x.run_id, x.step_slug, x.task_index,
             coalesce(
               r.status = 'started'
               and ss.status = 'started'
               and t.status = 'started'
               and x.pos = min(x.pos) over (partition by x.run_id, x.step_slug, x.task_index)
               and not exists (
                 select 1
                   from pgflow.steps as cs
                  where cs.flow_slug = r.flow_slug
                    and (cs.required_input_pattern is not null or cs.forbidden_input_pattern is not null))
               and not (
                 s.step_type = 'single'
                 and jsonb_typeof(x.output) is distinct from 'array'
                 and exists (
                   select 1
                     from pgflow.deps as d
                     join pgflow.steps as c on c.flow_slug = d.flow_slug and c.step_slug = d.step_slug
                     join pgflow.step_states as cst on cst.run_id = x.run_id and cst.step_slug = c.step_slug
                    where d.flow_slug = r.flow_slug
                      and d.dep_slug = x.step_slug
                      and c.step_type = 'map'
                      and cst.status = 'created'
                      and cst.initial_tasks is null)),
               false) as fast
        from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.task_indexes, complete_tasks.outputs)
               with ordinality as x (run_id, step_slug, task_index, output, pos)
        left join pgflow.runs as r on r.run_id = x.run_id
        left join pgflow.step_states as ss on ss.run_id = x.run_id and ss.step_slug = x.step_slug
        left join pgflow.step_tasks as t
          on t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
        left join pgflow.steps as s on s.flow_slug = r.flow_slug and s.step_slug = x.step_slug
        ) as f
    ) as c;

  if cardinality(v_fast) > 0 then
    -- The tasks.
    update pgflow.step_tasks as t
       set status = 'completed',
           completed_at = now(),
           output = x.output
      from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.task_indexes, complete_tasks.outputs)
             with ordinality as x (run_id, step_slug, task_index, output, pos)
     where x.pos = any (v_fast)
       and t.run_id = x.run_id
       and t.step_slug = x.step_slug
       and t.task_index = x.task_index;

    -- Their step states: remaining_tasks drops by the tasks completed; a step whose last task completed becomes
    -- 'completed' in the same row version, with its output (single: the task's output; map: all task outputs as
    -- one array ordered by task_index).
    with counts as (
      select x.run_id, x.step_slug, count(*)::integer as n
        from unnest(complete_tasks.run_ids, complete_tasks.step_slugs) with ordinality as x (run_id, step_slug, pos)
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
                        when s.step_type = 'map' then (
                          select coalesce(jsonb_agg(t.output order by t.task_index), '[]'::jsonb)
                            from pgflow.step_tasks as t
                           where t.run_id = ss.run_id and t.step_slug = ss.step_slug and t.status = 'completed')
                        else (
                          select t.output
                            from pgflow.step_tasks as t
                           where t.run_id = ss.run_id and t.step_slug = ss.step_slug and t.task_index = 0)
                      end
        from counts as c, pgflow.steps as s
       where ss.run_id = c.run_id
         and ss.step_slug = c.step_slug
         and s.flow_slug = ss.flow_slug
         and s.step_slug = ss.step_slug
      returning ss.flow_slug, ss.run_id, ss.step_slug, ss.status, ss.output, ss.completed_at, s.step_index
    )
    select array_agg(u.run_id order by u.run_id, u.step_index),
           array_agg(u.step_slug order by u.run_id, u.step_index),
           array_agg(u.flow_slug order by u.run_id, u.step_index),
           array_agg(u.output order by u.run_id, u.step_index),
           array_agg(jsonb_build_object(
                       'event_type', 'step:completed',
                       'run_id', u.run_id,
                       'flow_slug', u.flow_slug,
                       'step_slug', u.step_slug,
                       'status', u.status,
                       'output', u.output,
                       'completed_at', u.completed_at) order by u.run_id, u.step_index)
      into v_runs, v_c_steps, v_c_flows, v_c_outputs, v_events
      from updated as u
     where u.status = 'completed';

    if v_runs is not null then
      -- Dependents of the completed steps: one dependency fewer per completed parent; a dependent map learns its
      -- task count from its parent's array. A dependent that becomes ready with tasks to run becomes 'started' in
      -- the same row version (these flows have no conditions to resolve first); its messages, tasks and
      -- step:started event follow below, with the other steps that start.
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
            select x.run_id, d.step_slug as child_slug, ch.step_type as child_type, count(*)::integer as n,
                   max(case when jsonb_typeof(x.output) = 'array' then jsonb_array_length(x.output) end) as output_len
              from unnest(v_runs, v_c_steps, v_c_flows, v_c_outputs) as x (run_id, step_slug, flow_slug, output)
              join pgflow.deps as d on d.flow_slug = x.flow_slug and d.dep_slug = x.step_slug
              join pgflow.steps as ch on ch.flow_slug = d.flow_slug and ch.step_slug = d.step_slug
             group by x.run_id, d.step_slug, ch.step_type
          ) as p
         where cs.run_id = p.run_id
           and cs.step_slug = p.child_slug
        returning cs.run_id, cs.step_slug, cs.remaining_deps, cs.status
      )
      select array_agg(distinct u.run_id) filter (where u.remaining_deps = 0 and u.status = 'created'),
             array_agg(u.run_id) filter (where u.status = 'started'),
             array_agg(u.step_slug) filter (where u.status = 'started')
        into v_ready, v_started_runs, v_started_slugs
        from upd as u;

      -- The runs: one step fewer per completed step. A run left without steps is complete (nothing can start
      -- or cascade in it any more): it becomes 'completed' in the same row version, with the outputs of its
      -- completed leaf steps, as maybe_complete_run does.
      with counts as (
        select x.run_id, count(*)::integer as n from unnest(v_runs) as x (run_id) group by x.run_id
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
                               and not exists (
                                 select 1 from pgflow.deps as d where d.flow_slug = r.flow_slug and d.dep_slug = ss.step_slug))
                        end
          from counts as c
         where r.run_id = c.run_id
        returning r.run_id, r.flow_slug, r.status, r.output, r.completed_at
      )
      select array_agg(u.run_id order by u.run_id) filter (where u.status <> 'completed'),
             array_agg(jsonb_build_object(
                         'event_type', 'run:completed',
                         'run_id', u.run_id,
                         'flow_slug', u.flow_slug,
                         'status', u.status,
                         'output', u.output,
                         'completed_at', u.completed_at) order by u.run_id) filter (where u.status = 'completed')
        into v_runs, v_run_events
        from updated as u;

      -- One call for all events: per run, its step:completed events, then its run:completed.
      perform pgflow._emit_events(array(
        select e.p
          from unnest(v_events || coalesce(v_run_events, '{}')) with ordinality as e (p, pos)
         order by (e.p ->> 'run_id')::uuid, e.pos));

      -- Taskless steps (maps over an empty array) that became ready complete by cascade. (The flows of these
      -- runs have no conditions, so resolving conditions first would change nothing.)
      v_cascaded := array(
        select distinct ss.run_id
          from pgflow.step_states as ss
         where ss.run_id = any (v_runs)
           and ss.status = 'created'
           and ss.remaining_deps = 0
           and ss.initial_tasks = 0
         order by ss.run_id);
      foreach v_run_id in array v_cascaded loop
        perform pgflow.cascade_complete_taskless_steps(v_run_id);
      end loop;
    end if;

    -- The completed tasks' messages, one archive call per queue.
    for v_queue in
      select t.queue_name, array_agg(t.message_id order by t.message_id) as msg_ids
        from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.task_indexes)
               with ordinality as x (run_id, step_slug, task_index, pos)
        join pgflow.step_tasks as t
          on t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
       where x.pos = any (v_fast)
         and t.message_id is not null
       group by t.queue_name
       order by t.queue_name
    loop
      perform pgmq.archive(v_queue.queue_name, v_queue.msg_ids);
    end loop;

    -- Only runs where a dependent became ready or a cascade ran can have steps to start.
    if v_ready is not null or cardinality(v_cascaded) > 0 or v_started_runs is not null then
      perform pgflow._start_ready_steps_batch(coalesce(v_ready, '{}') || v_cascaded, v_started_runs, v_started_slugs);
      perform pgflow._maybe_complete_runs(v_cascaded);
    end if;

    foreach v_pos in array v_fast loop
      v_statuses[v_pos] := 'completed';
    end loop;
  end if;

  -- Everything else, one complete_task call per task.
  foreach v_pos in array v_slow loop
    v_status := null;
    select t.status into v_status
      from pgflow.complete_task(complete_tasks.run_ids[v_pos], complete_tasks.step_slugs[v_pos],
                                complete_tasks.task_indexes[v_pos], complete_tasks.outputs[v_pos]) as t;
    v_statuses[v_pos] := v_status;
  end loop;

  return query select p.pos::integer, v_statuses[p.pos] from generate_series(1, v_n) as p (pos);
end;
$$;

-- _emit_events writes the envelope as text (the same bytes as before, about half the cost).
-- pgflow._emit_events(payloads) guarantees: the same as calling pgflow._emit_event(payload, event, run_id) for
-- every payload, in array order, with event = payload.event_type for run events and
-- 'step:<step_slug>:<what>' for step events (event_type 'step:<what>'), and run_id = payload.run_id:
--   * published inside the caller's transaction (seen by listeners only if it commits), in array order;
--   * per payload, pg_notify on 'pgflow' and on 'pgflow:run:<run_id>' with the same small envelope as
--     _emit_event {"event_type", "event", "run_id", "step_slug" (step events), "status", "flow_slug"};
--   * when realtime.send(jsonb, text, text, boolean) exists, every full payload also goes to
--     realtime.send(payload, event, 'pgflow:run:<run_id>', false), in array order (one dynamic statement);
--   * one statement for all notifications instead of one function call per event; NULL or empty payloads do
--     nothing.
create or replace function pgflow._emit_events(payloads jsonb[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if _emit_events.payloads is null or cardinality(_emit_events.payloads) = 0 then
    return;
  end if;

  -- pg_notify is volatile, so the planner evaluates it after the sort: notifications go out in ORDER BY order.
  -- The envelope is written as text, byte for byte what jsonb_strip_nulls(jsonb_build_object(...))::text gives
  -- (keys in jsonb's order: by length, then bytes; NULL members left out), at about half the cost.
  perform pg_notify(c.channel, e.envelope)
     from (
       select x.pos,
              x.run_id,
              '{' || array_to_string(array[
                '"event": ' || to_json(x.event)::text,
                '"run_id": ' || to_json(x.run_id)::text,
                '"status": ' || to_json(x.status)::text,
                '"flow_slug": ' || to_json(coalesce(
                  x.flow_slug,
                  (select r.flow_slug from pgflow.runs as r where r.run_id = x.run_id)))::text,
                '"step_slug": ' || to_json(x.step_slug)::text,
                '"event_type": ' || to_json(x.event_type)::text], ', ') || '}' as envelope
         from (
           select u.pos,
                  u.p ->> 'event_type' as event_type,
                  (u.p ->> 'run_id')::uuid as run_id,
                  u.p ->> 'step_slug' as step_slug,
                  u.p ->> 'status' as status,
                  u.p ->> 'flow_slug' as flow_slug,
                  case
                    when u.p ->> 'step_slug' is null then u.p ->> 'event_type'
                    else 'step:' || (u.p ->> 'step_slug') || ':' || split_part(u.p ->> 'event_type', ':', 2)
                  end as event
             from unnest(_emit_events.payloads) with ordinality as u (p, pos)
         ) as x
     ) as e
     cross join lateral (values (1, 'pgflow'), (2, 'pgflow:run:' || e.run_id::text)) as c (k, channel)
    order by e.pos, c.k;

  if to_regprocedure('realtime.send(jsonb,text,text,boolean)') is not null then
    execute 'select realtime.send(
                      x.p,
                      case
                        when x.p ->> ''step_slug'' is null then x.p ->> ''event_type''
                        else ''step:'' || (x.p ->> ''step_slug'') || '':'' || split_part(x.p ->> ''event_type'', '':'', 2)
                      end,
                      ''pgflow:run:'' || (x.p ->> ''run_id''),
                      false)
               from unnest($1) with ordinality as x (p, pos)
              order by x.pos'
      using _emit_events.payloads;
  end if;
end;
$$;

-- start_flow and start_flows share the flow's compilation lock: a start during a compilation waits for it and sees
-- the whole flow (it could complete the run at once, with output NULL).
-- pgflow.start_flow(flow_slug, input, run_id) guarantees:
--   * a flow with root map steps only starts with an array input: SQL NULL raises
--     'Flow <slug> has root map steps but input is NULL', any other JSON type raises
--     'Flow <slug> has root map steps but input is not an array (got <type>)' (P0001), before anything is written;
--   * one run row (run_id = the given one, else random; remaining_steps = number of steps) and one 'created'
--     step state per step (remaining_deps = deps_count; initial_tasks = 1 for single steps, the input array length
--     for root maps, NULL for dependent maps until their parent completes) are written in this transaction;
--   * run:started is emitted, then conditions of ready steps are resolved (a 'fail' condition fails the run and no
--     task is ever created), taskless steps complete, ready steps start (tasks and messages are created) and the
--     run completes if nothing is left (e.g. a flow without steps);
--   * returns the run row as it is at the end ('started', 'completed' or 'failed').
-- A start waits while the flow is being compiled or deleted (shared flow lock) and then sees the whole flow.
-- Errors: unknown flow -> runs_flow_slug_fkey; an existing run_id -> runs_pkey (a retried start with the same
-- run_id therefore never creates a second run); NULL input without root maps -> not-null violation on runs.input.
create or replace function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid default null)
returns setof pgflow.runs
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_run_id     uuid;
  v_step_count integer;
  v_root_maps  integer;
  v_run        pgflow.runs;
  v_input_len  integer;
begin
  -- Shares the flow's compilation lock (create_flow, ensure_flow_compiled and delete_flow_and_data hold it
  -- exclusively): a start waits for a compilation in progress and then reads the whole flow. Without it a start
  -- could count no steps (compilation not yet visible) yet pass the foreign-key check (which reads the newest
  -- rows) and complete the run at once with output NULL.
  perform pg_advisory_xact_lock_shared(1, hashtext(lower(start_flow.flow_slug)));

  select count(*), count(*) filter (where s.step_type = 'map' and s.deps_count = 0)
    into v_step_count, v_root_maps
    from pgflow.steps as s
   where s.flow_slug = start_flow.flow_slug;

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
  values (coalesce(start_flow.run_id, gen_random_uuid()), start_flow.flow_slug, start_flow.input, v_step_count)
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
