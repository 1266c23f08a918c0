create or replace function pgflow.get_run_with_states(run_id uuid)
returns jsonb
language sql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object(
           'run', to_jsonb(r),
           'steps', coalesce(
             (select jsonb_agg(to_jsonb(ss) order by s.step_index)
                from pgflow.step_states as ss
                join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
               where ss.run_id = r.run_id),
             '[]'::jsonb))
    from pgflow.runs as r
   where r.run_id = get_run_with_states.run_id;
$$;

comment on function pgflow.get_run_with_states(run_id uuid) is $doc$
pgflow.get_run_with_states(run_id) guarantees: one consistent read of a run and all its step states as
{"run": <runs row as jsonb>, "steps": [<step_states rows as jsonb>, ...]}, the steps in step_index order
([] when the flow has no steps); keys are the column names. Returns SQL NULL for an unknown run_id.
Changes nothing. SECURITY DEFINER so an operator can grant API users this one function instead of the tables.
$doc$;
