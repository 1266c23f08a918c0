create or replace function pgflow._claimed_task_records(p_rows tid[])
returns table (flow_slug text, run_id uuid, step_slug text, input jsonb, message_id bigint, task_index integer,
               flow_input jsonb, attempt integer, timeout integer, max_attempts integer)
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
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
           case when s.step_type = 'single' and s.deps_count = 0 then r.input end,
           t.attempts_count,
           coalesce(s.opt_timeout, f.opt_timeout),
           coalesce(s.opt_max_attempts, f.opt_max_attempts)
      -- One row at a time: the task by its address, its run and definitions by key (LIMIT keeps each a lookup). A
      -- condition "ctid = any (p_rows)" on the table lets the planner read the whole primary key instead, which is
      -- what it chooses when the plan is made while the table is small; joins to the definitions may read every
      -- step of every flow and scan the tasks again for each one.
      from unnest(p_rows) as k (row_address)
      cross join lateral (
        select t.* from pgflow.step_tasks as t where t.ctid = k.row_address limit 1) as t
      cross join lateral (select r.input from pgflow.runs as r where r.run_id = t.run_id limit 1) as r
      cross join lateral (
        select s.step_type, s.deps_count, s.opt_timeout, s.opt_max_attempts
          from pgflow.steps as s
         where s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
         limit 1) as s
      cross join lateral (
        select f.opt_timeout, f.opt_max_attempts from pgflow.flows as f where f.flow_slug = t.flow_slug limit 1) as f
     order by t.message_id;
end;
$$;

comment on function pgflow._claimed_task_records(p_rows tid[]) is $doc$
pgflow._claimed_task_records(p_rows) guarantees (v0.20.0): what a worker needs to run each task at the given
physical addresses (as pgflow._claim_tasks returned them, in the same transaction), ordered by message id:
flow_slug, run_id, step_slug, input = the element task_index of the run input (root map), of the dependency's
stored output (dependent map), or {<dep_slug>: <output>} over the completed dependencies ({} for root steps);
message_id, task_index; flow_input = the run input for single steps without dependencies, NULL otherwise; attempt
(attempts_count), timeout and max_attempts (the step's, else the flow's). Read-only.
$doc$;
