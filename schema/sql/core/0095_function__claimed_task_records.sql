create or replace function pgflow._claimed_task_records(p_rows tid[])
returns table (flow_slug text, run_id uuid, step_slug text, input jsonb, message_id bigint, task_index integer,
               flow_input jsonb, attempt integer, timeout integer, max_attempts integer)
language plpgsql
stable
set search_path = pg_catalog, pg_temp
set jit = off
as $$
begin
  return query
    -- The tasks first, one at a time by address (LIMIT keeps each a lookup: a condition "ctid = any (p_rows)" on
    -- the table lets the planner read the whole primary key instead, which is what it chooses when the plan is
    -- made while the table is small).
    with tasks as materialized (
      select t.*
        from unnest(p_rows) as k (row_address)
        cross join lateral (
          select t.* from pgflow.step_tasks as t where t.ctid = k.row_address limit 1) as t
    ),
    -- The definitions once per step, not once per task (v0.20.0), one lookup each, gathered in a JSON object that
    -- each task reads by '<flow> <step>' (a binary search: joins of the tasks to the definitions may read every
    -- step of every flow and scan the tasks again for each one): [step_type, deps_count, timeout, max_attempts,
    -- the slugs of its dependencies].
    definitions as (
      select jsonb_object_agg(
               k.flow_slug || ' ' || k.step_slug,
               jsonb_build_array(s.step_type, s.deps_count, coalesce(s.opt_timeout, f.opt_timeout),
                                 coalesce(s.opt_max_attempts, f.opt_max_attempts),
                                 case
                                   when s.deps_count > 0 then (
                                     select jsonb_agg(d.dep_slug order by d.dep_slug)
                                       from pgflow.deps as d
                                      where d.flow_slug = k.flow_slug and d.step_slug = k.step_slug)
                                   else '[]'::jsonb
                                 end)) as by_step
        from (select distinct t.flow_slug, t.step_slug from tasks as t) as k
        cross join lateral (
          select s.step_type, s.deps_count, s.opt_timeout, s.opt_max_attempts
            from pgflow.steps as s
           where s.flow_slug = k.flow_slug and s.step_slug = k.step_slug
           limit 1) as s
        cross join lateral (
          select f.opt_timeout, f.opt_max_attempts from pgflow.flows as f where f.flow_slug = k.flow_slug limit 1) as f
    )
    select t.flow_slug,
           t.run_id,
           t.step_slug,
           case
             when s.step_type = 'map' and s.deps_count = 0 then (
               select r.input -> t.task_index from pgflow.runs as r where r.run_id = t.run_id)
             -- A dependent map's one dependency; each dependency's state by key (LIMIT keeps it a lookup).
             when s.step_type = 'map' then (
               select dss.output -> t.task_index
                 from pgflow.step_states as dss
                where dss.run_id = t.run_id and dss.step_slug = s.deps ->> 0
                limit 1)
             when s.deps_count = 0 then '{}'::jsonb
             else coalesce(
               (select jsonb_object_agg(d.dep_slug, dss.output)
                  from jsonb_array_elements_text(s.deps) as d (dep_slug)
                  cross join lateral (
                    select dss.output from pgflow.step_states as dss
                     where dss.run_id = t.run_id and dss.step_slug = d.dep_slug and dss.status = 'completed'
                     limit 1) as dss),
               '{}'::jsonb)
           end,
           t.message_id,
           t.task_index,
           -- The run's input only where it is the task's: its run is looked up for root steps only.
           case
             when s.step_type = 'single' and s.deps_count = 0 then (
               select r.input from pgflow.runs as r where r.run_id = t.run_id)
           end,
           t.attempts_count,
           s.timeout,
           s.max_attempts
      from tasks as t
      cross join definitions as defs
      cross join lateral (
        select x.def ->> 0 as step_type, (x.def ->> 1)::integer as deps_count, (x.def ->> 2)::integer as timeout,
               (x.def ->> 3)::integer as max_attempts, x.def -> 4 as deps
          from (select defs.by_step -> (t.flow_slug || ' ' || t.step_slug) as def offset 0) as x  -- one lookup per task
      ) as s
     order by t.message_id;
end;
$$;

comment on function pgflow._claimed_task_records(p_rows tid[]) is $doc$
pgflow._claimed_task_records(p_rows) guarantees (v0.20.0): what a worker needs to run each task at the given
physical addresses (as pgflow._claim_tasks returned them, in the same transaction), ordered by message id:
flow_slug, run_id, step_slug, input = the element task_index of the run input (root map), of the dependency's
stored output (dependent map), or {<dep_slug>: <output>} over the completed dependencies ({} for root steps);
message_id, task_index; flow_input = the run input for single steps without dependencies, NULL otherwise; attempt
(attempts_count), timeout and max_attempts (the step's, else the flow's). Read-only. Each task is read by its
address, its run by key for root steps only, the definitions once per step (v0.20.0).
$doc$;
