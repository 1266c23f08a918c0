create or replace function pgflow.maybe_complete_run(run_id uuid)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_run pgflow.runs;
begin
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
   where r.run_id = maybe_complete_run.run_id
     and (r.status = 'started') is true  -- by primary key, never through idx_runs_status (_start_ready_steps_batch)
     and r.remaining_steps = 0
  returning r.* into v_run;

  if found then
    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'run:completed',
        'run_id', v_run.run_id,
        'flow_slug', v_run.flow_slug,
        'status', v_run.status,
        'output', v_run.output,
        'completed_at', v_run.completed_at),
      'run:completed',
      v_run.run_id);
  end if;
end;
$$;

comment on function pgflow.maybe_complete_run(run_id uuid) is $doc$
pgflow.maybe_complete_run(run_id) guarantees: a 'started' run whose remaining_steps is 0 becomes 'completed'
(completed_at now) with output = {<leaf step slug>: <stored step output>} over the leaf steps (no dependents)
that completed (skipped leaves are absent; NULL when no leaf completed), and run:completed is emitted. Outputs
are copied as stored, so 0, false, "" and null stay exactly that. A run that is already completed or failed,
or still has steps left, is not touched (upstream only excluded 'completed').
$doc$;
