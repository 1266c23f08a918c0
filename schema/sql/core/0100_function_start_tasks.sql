create or replace function pgflow.start_tasks(
  flow_slug  text,
  msg_ids    bigint[],
  worker_id  uuid,
  queue_name text default null
)
returns setof pgflow.step_task_record
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
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

comment on function pgflow.start_tasks(flow_slug text, msg_ids bigint[], worker_id uuid, queue_name text) is $doc$
pgflow.start_tasks(flow_slug, msg_ids, worker_id, queue_name) guarantees (phase 2 of polling, after pgmq.read*):
  * queue_name is the queue the worker actually read msg_ids from; NULL (a v0.16.0 worker calling with three
    arguments) means the flow's default queue, pgflow._default_queue_name(flow_slug). It is compared in lower
    case, the canonical form tasks store;
  * claims exactly the tasks whose stored identity (step_tasks.queue_name, message_id) is (that queue, one of
    msg_ids), that belong to flow_slug, are 'queued', and whose run and step are 'started'; each claimed task
    becomes 'started' (attempts_count + 1, started_at now, last_worker_id = worker_id, which must be a row of
    pgflow.workers). The message body is never read: it does not authorise a claim;
  * everything else named in msg_ids is left untouched - a task that is already started (not claimed again, no
    attempt consumed), terminal or otherwise ineligible, a task of another flow, or an id no task has in that
    queue: no row changes, no message is archived, deleted or made visible earlier or later;
  * a task is claimed at most once: rows are locked with FOR UPDATE SKIP LOCKED and re-checked, so of two
    concurrent calls naming the same ids each task goes to one caller only, and only rows this call actually
    claimed are returned. No PGMQ row is locked;
  * every claimed message's visibility is set to the effective step timeout (steps.opt_timeout, else
    flows.opt_timeout) + 2 seconds from now, at most 2147483647 s (a timeout near the integer limit cannot make
    the claim fail with "integer out of range", as in v0.17.0), in the queue the task stored (one set_vt_batch
    call per queue);
  * returns one step_task_record per claimed task, ordered by msg_id: input = the element task_index of the run
    input (root map), of the dependency's stored output (dependent map), or {<dep_slug>: <output>} over the
    completed dependencies ({} for root steps); flow_input = the run input for single steps without
    dependencies, NULL otherwise;
  * the cost of a claim grows with the number of msg_ids only, never with the number of queued tasks, whatever the
    planner's statistics say: each id is looked up by the unique key (queue_name, message_id) and each row is then
    locked and updated by its physical address (since v0.19.0; stale statistics made v0.18.0 quadratic);
  * NULL or empty msg_ids claim nothing and return nothing.
$doc$;
