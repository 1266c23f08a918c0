create or replace function pgflow.cascade_complete_taskless_steps(run_id uuid)
returns integer
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_flow_slug  text;
  v_total      integer := 0;
  v_iterations integer := 0;
  v_completed  text[];
  v_step       record;
begin
  select r.flow_slug into v_flow_slug
    from pgflow.runs as r
   where r.run_id = cascade_complete_taskless_steps.run_id
     and (r.status = 'started') is true;  -- by primary key, never through idx_runs_status (_start_ready_steps_batch)
  if v_flow_slug is null then
    return 0;
  end if;

  loop
    v_iterations := v_iterations + 1;
    if v_iterations > 50 then
      raise exception 'Cascade loop exceeded safety limit of 50 iterations (run %)',
        cascade_complete_taskless_steps.run_id;
    end if;

    exit when not pgflow.cascade_resolve_conditions(cascade_complete_taskless_steps.run_id);

    v_completed := '{}';
    for v_step in
      with done as (
        update pgflow.step_states as ss
           set status = 'completed',
               started_at = now(),
               completed_at = now(),
               remaining_tasks = 0,
               output = case when s.step_type = 'map' then '[]'::jsonb end
          from pgflow.steps as s
         where ss.run_id = cascade_complete_taskless_steps.run_id
           and ss.status = 'created'
           and ss.remaining_deps = 0
           and ss.initial_tasks = 0
           and s.flow_slug = ss.flow_slug
           and s.step_slug = ss.step_slug
        returning ss.*, s.step_index
      )
      select d.* from done as d order by d.step_index
    loop
      v_completed := v_completed || v_step.step_slug;
      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'step:completed',
          'run_id', v_step.run_id,
          'flow_slug', v_step.flow_slug,
          'step_slug', v_step.step_slug,
          'status', v_step.status,
          'started_at', v_step.started_at,
          'completed_at', v_step.completed_at,
          'remaining_tasks', v_step.remaining_tasks,
          'remaining_deps', v_step.remaining_deps,
          'output', v_step.output),
        'step:' || v_step.step_slug || ':completed',
        v_step.run_id);
    end loop;

    exit when cardinality(v_completed) = 0;

    update pgflow.step_states as child
       set remaining_deps = child.remaining_deps - parents.n,
           initial_tasks = case when parents.step_type = 'map' and child.status = 'created' then 0
                                else child.initial_tasks end
      from (
        select d.step_slug, s.step_type, count(*)::integer as n
          from pgflow.deps as d
          join pgflow.steps as s on s.flow_slug = d.flow_slug and s.step_slug = d.step_slug
         where d.flow_slug = v_flow_slug
           and d.dep_slug = any (v_completed)
         group by d.step_slug, s.step_type
      ) as parents
     where child.run_id = cascade_complete_taskless_steps.run_id
       and child.step_slug = parents.step_slug;

    update pgflow.runs as r
       set remaining_steps = r.remaining_steps - cardinality(v_completed)
     where r.run_id = cascade_complete_taskless_steps.run_id;

    v_total := v_total + cardinality(v_completed);
  end loop;

  return v_total;
end;
$$;

comment on function pgflow.cascade_complete_taskless_steps(run_id uuid) is $doc$
pgflow.cascade_complete_taskless_steps(run_id) guarantees:
  * completes, in waves, every step state of the run that is 'created' with remaining_deps 0 and
    initial_tasks 0 (a map over an empty array): started_at = completed_at = now(), remaining_tasks 0, output
    '[]' for maps (NULL for single steps, which are never taskless); step:completed is emitted per step in
    step_index order within a wave, and waves run in dependency order;
  * for each completed step its dependents get remaining_deps decremented, and dependent maps get
    initial_tasks 0 (their input array is empty); the run's remaining_steps drops by the number completed;
  * before every wave the conditions of ready steps are resolved (pgflow.cascade_resolve_conditions), so a step
    that becomes ready through this cascade is skipped or fails by its condition exactly like any other step
    (upstream pgflow skipped that check); if a condition fails the run, the cascade stops;
  * a run that is not 'started' is left alone; returns the number of steps completed;
  * at most 50 iterations (each wave and the final empty one count): more raises
    'Cascade loop exceeded safety limit of 50 iterations (run <run_id>)', which rolls back the caller.
The run itself is not completed here; callers call pgflow.maybe_complete_run.
$doc$;
