create or replace function pgflow._maybe_complete_runs(run_ids uuid[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_events jsonb[];
begin
  if _maybe_complete_runs.run_ids is null or cardinality(_maybe_complete_runs.run_ids) = 0 then
    return;
  end if;

  with done as (
    update pgflow.runs as r
       set status = 'completed',
           completed_at = now(),
           output = (
             select jsonb_object_agg(ss.step_slug, ss.output)
               from pgflow.step_states as ss
              where ss.run_id = r.run_id
                and ss.status = 'completed'
                and not exists (
                  select 1 from pgflow.deps as d where d.flow_slug = r.flow_slug and d.dep_slug = ss.step_slug))
     where r.run_id = any (_maybe_complete_runs.run_ids)
       and (r.status = 'started') is true  -- by primary key, never through idx_runs_status (_start_ready_steps_batch)
       and r.remaining_steps = 0
    returning r.run_id, r.flow_slug, r.status, r.output, r.completed_at
  )
  select array_agg(jsonb_build_object(
                     'event_type', 'run:completed',
                     'run_id', d.run_id,
                     'flow_slug', d.flow_slug,
                     'status', d.status,
                     'output', d.output,
                     'completed_at', d.completed_at) order by d.run_id)
    into v_events
    from done as d;

  perform pgflow._emit_events(v_events);
end;
$$;

comment on function pgflow._maybe_complete_runs(run_ids uuid[]) is $doc$
pgflow._maybe_complete_runs(run_ids) guarantees: for every run of run_ids exactly what
pgflow.maybe_complete_run(run_id) guarantees, done with one UPDATE for all of them: a 'started' run whose
remaining_steps is 0 becomes 'completed' (completed_at now) with output = {<leaf step slug>: <stored step
output>} over its completed leaf steps (NULL when none completed), and run:completed is emitted for it, runs in
run_id order. Runs that are completed, failed, still have steps left, or do not exist are not touched; NULL or
empty run_ids do nothing.
$doc$;
