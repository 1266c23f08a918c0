-- pgflow.start_tasks(flow_slug, msg_ids, worker_id) guarantees (phase 2 of polling, after pgmq.read*):
--   * claims exactly the tasks of flow_slug whose message_id is in msg_ids, that are 'queued', whose run is
--     'started' and whose step is 'started'; each claimed task becomes 'started' (attempts_count + 1, started_at
--     now, last_worker_id = worker_id, which must be a row of pgflow.workers);
--   * a task is claimed at most once: rows are locked with FOR UPDATE SKIP LOCKED and re-checked, so of two
--     concurrent calls naming the same ids each task goes to one caller only, and only rows this call actually
--     claimed are returned;
--   * every claimed message's visibility is set to the effective step timeout (steps.opt_timeout, else
--     flows.opt_timeout) + 2 seconds from now (upstream pgflow documented this but never executed it);
--   * returns one step_task_record per claimed task, ordered by msg_id: input = the element task_index of the run
--     input (root map), of the dependency's stored output (dependent map), or {<dep_slug>: <output>} over the
--     completed dependencies ({} for root steps); flow_input = the run input for single steps without
--     dependencies, NULL otherwise;
--   * NULL or empty msg_ids, unknown ids and ids of ineligible tasks claim nothing and return nothing.
create or replace function pgflow.start_tasks(flow_slug text, msg_ids bigint[], worker_id uuid)
returns setof pgflow.step_task_record
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_claimed bigint[];
  v_offsets integer[];
begin
  if start_tasks.msg_ids is null or cardinality(start_tasks.msg_ids) = 0 then
    return;
  end if;

  with candidates as (
    select t.run_id, t.step_slug, t.task_index
      from pgflow.step_tasks as t
      join pgflow.runs as r on r.run_id = t.run_id
      join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
     where t.flow_slug = start_tasks.flow_slug
       and t.message_id = any (start_tasks.msg_ids)
       and t.status = 'queued'
       and r.status = 'started'
       and ss.status = 'started'
     order by t.message_id
       for update of t skip locked
  ),
  claimed as (
    update pgflow.step_tasks as t
       set status = 'started',
           attempts_count = t.attempts_count + 1,
           started_at = now(),
           last_worker_id = start_tasks.worker_id
      from candidates as c
     where t.run_id = c.run_id
       and t.step_slug = c.step_slug
       and t.task_index = c.task_index
       and t.status = 'queued'
    returning t.flow_slug, t.step_slug, t.message_id
  )
  select array_agg(c.message_id order by c.message_id),
         array_agg(coalesce(s.opt_timeout, f.opt_timeout) + 2 order by c.message_id)
    into v_claimed, v_offsets
    from claimed as c
    join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
    join pgflow.flows as f on f.flow_slug = c.flow_slug;

  if v_claimed is null then
    return;
  end if;

  perform pgflow.set_vt_batch(start_tasks.flow_slug, v_claimed, v_offsets);

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
     where t.flow_slug = start_tasks.flow_slug
       and t.message_id = any (v_claimed)
     order by t.message_id;
end;
$$;
