create or replace function pgflow.get_run_with_states(run_id uuid)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
set jit = off
-- PL/pgSQL rather than SQL (v0.20.0): PostgreSQL 15 plans the body of an SQL function that it cannot inline (this
-- one is SECURITY DEFINER and pins its search_path) on every call; PL/pgSQL keeps the plan for the session. Every
-- start of the Go client reads its run through this function: about a tenth of a lone start's CPU.
-- start_flows_with_states builds the same document for all its runs in one statement: a change here is a change
-- there (TestStartFlowsWithStatesReturnsWhatGetRunWithStatesReads compares the two).
as $$
begin
  return (
    select jsonb_build_object(
             'run', to_jsonb(r),
             'steps', coalesce(
               (select jsonb_agg(to_jsonb(ss) order by s.step_index)
                  from pgflow.step_states as ss
                  -- A lookup per state (LIMIT keeps it one): as a join, a nested loop may read every step of every
                  -- flow for each run.
                  cross join lateral (
                    select s.step_index from pgflow.steps as s
                     where s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug limit 1) as s
                 where ss.run_id = r.run_id),
               '[]'::jsonb))
      from pgflow.runs as r
     where r.run_id = get_run_with_states.run_id);
end;
$$;

comment on function pgflow.get_run_with_states(run_id uuid) is $doc$
pgflow.get_run_with_states(run_id) guarantees: one consistent read of a run and all its step states as
{"run": <runs row as jsonb>, "steps": [<step_states rows as jsonb>, ...]}, the steps in step_index order
([] when the flow has no steps); keys are the column names. Returns SQL NULL for an unknown run_id.
Changes nothing. SECURITY DEFINER so an operator can grant API users this one function instead of the tables.
$doc$;
