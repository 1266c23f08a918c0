create or replace function pgflow.cascade_resolve_conditions(run_id uuid)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_run        record;
  v_iteration  integer := 0;
  v_fail_slug  text;
  v_skip       text[];
  v_cascade    text[];
  v_skipped    text[];
  v_slug       text;
  v_step       record;
  v_status     text;
begin
  select r.flow_slug, r.status, r.input into v_run
    from pgflow.runs as r
   where r.run_id = cascade_resolve_conditions.run_id;
  if not found or v_run.status = 'completed' then
    return true;
  elsif v_run.status in ('failed', 'cancelled') then
    return false;
  end if;

  loop
    v_iteration := v_iteration + 1;
    if v_iteration > 50 then
      raise exception 'cascade_resolve_conditions exceeded safety limit of 50 iterations (run %)',
        cascade_resolve_conditions.run_id;
    end if;

    with candidates as (
      select ss.step_slug,
             s.step_index,
             s.when_unmet,
             s.required_input_pattern,
             s.forbidden_input_pattern,
             case
               when s.deps_count = 0 then v_run.input
               else coalesce(
                 (select jsonb_object_agg(d.dep_slug, dss.output)
                    from pgflow.deps as d
                    join pgflow.step_states as dss
                      on dss.run_id = ss.run_id and dss.step_slug = d.dep_slug
                   where d.flow_slug = ss.flow_slug
                     and d.step_slug = ss.step_slug
                     and dss.status = 'completed'),
                 '{}'::jsonb)
             end as condition_input
        from pgflow.step_states as ss
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
       where ss.run_id = cascade_resolve_conditions.run_id
         and ss.status = 'created'
         and ss.remaining_deps = 0
         and (s.required_input_pattern is not null or s.forbidden_input_pattern is not null)
    ),
    unmet as (
      select c.*
        from candidates as c
       where not (
               (c.required_input_pattern is null or c.condition_input @> c.required_input_pattern)
           and (c.forbidden_input_pattern is null or not (c.condition_input @> c.forbidden_input_pattern)))
    )
    select (select u.step_slug from unmet as u where u.when_unmet = 'fail' order by u.step_index limit 1),
           array(select u.step_slug from unmet as u where u.when_unmet = 'skip' order by u.step_index),
           array(select u.step_slug from unmet as u where u.when_unmet = 'skip-cascade' order by u.step_index)
      into v_fail_slug, v_skip, v_cascade;

    -- Phase fail: one unmet 'fail' condition fails the step and the whole run.
    if v_fail_slug is not null then
      update pgflow.step_states as ss
         set status = 'failed',
             failed_at = now(),
             error_message = 'Condition not met'
       where ss.run_id = cascade_resolve_conditions.run_id
         and ss.step_slug = v_fail_slug
      returning ss.* into v_step;

      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'step:failed',
          'run_id', v_step.run_id,
          'flow_slug', v_step.flow_slug,
          'step_slug', v_step.step_slug,
          'status', v_step.status,
          'error_message', v_step.error_message,
          'failed_at', v_step.failed_at),
        'step:' || v_step.step_slug || ':failed',
        v_step.run_id);

      -- The rest of the run will not run: unfinished steps skipped, unfinished tasks cancelled, messages archived.
      perform pgflow._finish_run_steps(cascade_resolve_conditions.run_id, 'run_failed');

      update pgflow.runs as r
         set status = 'failed',
             failed_at = now()
       where r.run_id = cascade_resolve_conditions.run_id
      returning r.* into v_step;

      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'run:failed',
          'run_id', v_step.run_id,
          'flow_slug', v_step.flow_slug,
          'status', v_step.status,
          'error_message', 'Condition not met',
          'failed_at', v_step.failed_at),
        'run:failed',
        v_step.run_id);

      return false;
    end if;

    -- Phase skip: skip the steps, release their dependents.
    v_skipped := '{}';
    if cardinality(v_skip) > 0 then
      for v_step in
        with skipped as (
          update pgflow.step_states as ss
             set status = 'skipped',
                 skip_reason = 'condition_unmet',
                 skipped_at = now()
           where ss.run_id = cascade_resolve_conditions.run_id
             and ss.step_slug = any (v_skip)
             and ss.status = 'created'
          returning ss.*
        )
        select sk.*, s.step_index
          from skipped as sk
          join pgflow.steps as s on s.flow_slug = sk.flow_slug and s.step_slug = sk.step_slug
         order by s.step_index
      loop
        v_skipped := v_skipped || v_step.step_slug;
        perform pgflow._emit_event(
          jsonb_build_object(
            'event_type', 'step:skipped',
            'run_id', v_step.run_id,
            'flow_slug', v_step.flow_slug,
            'step_slug', v_step.step_slug,
            'status', v_step.status,
            'skip_reason', v_step.skip_reason,
            'skipped_at', v_step.skipped_at),
          'step:' || v_step.step_slug || ':skipped',
          v_step.run_id);
      end loop;

      if cardinality(v_skipped) > 0 then
        update pgflow.step_states as child
           set remaining_deps = child.remaining_deps - parents.n,
               initial_tasks = case
                                 when parents.step_type = 'map' and parents.deps_count = 1
                                      and child.status = 'created' then 0
                                 else child.initial_tasks
                               end
          from (
            select d.step_slug, s.step_type, s.deps_count, count(*)::integer as n
              from pgflow.deps as d
              join pgflow.steps as s on s.flow_slug = d.flow_slug and s.step_slug = d.step_slug
             where d.flow_slug = v_run.flow_slug
               and d.dep_slug = any (v_skipped)
             group by d.step_slug, s.step_type, s.deps_count
          ) as parents
         where child.run_id = cascade_resolve_conditions.run_id
           and child.step_slug = parents.step_slug;

        update pgflow.runs as r
           set remaining_steps = r.remaining_steps - cardinality(v_skipped)
         where r.run_id = cascade_resolve_conditions.run_id;
      end if;
    end if;

    -- Phase skip-cascade: skip the step and everything downstream of it.
    foreach v_slug in array v_cascade loop
      perform pgflow._cascade_force_skip_steps(cascade_resolve_conditions.run_id, v_slug, 'condition_unmet');
    end loop;

    select r.status into v_status from pgflow.runs as r where r.run_id = cascade_resolve_conditions.run_id;
    if v_status <> 'started' then
      return v_status not in ('failed', 'cancelled');
    end if;

    exit when cardinality(v_skipped) = 0;
  end loop;

  return true;
end;
$$;

comment on function pgflow.cascade_resolve_conditions(run_id uuid) is $doc$
pgflow.cascade_resolve_conditions(run_id) guarantees: the if/ifNot conditions of every step of the run that is
'created' with remaining_deps 0 and has a pattern are evaluated, repeatedly until nothing changes:
  * condition input: the run input for steps without dependencies, otherwise {<dep_slug>: <output>} over the
    dependencies that completed (skipped ones are absent); met <=> (required pattern NULL or input @> it) and
    (forbidden pattern NULL or not input @> it);
  * when_unmet 'fail': the unmet step with the lowest step_index fails ('Condition not met'), the run fails,
    step:failed is emitted, pgflow._finish_run_steps(run_id, 'run_failed') skips the run's other unfinished
    steps, cancels its unfinished tasks and archives their messages, run:failed is emitted last, and the function
    returns false (only that one step is failed);
  * when_unmet 'skip': the step is skipped (condition_unmet, step:skipped emitted in step_index order), its
    dependents' remaining_deps drop, map dependents get initial_tasks 0, the run's remaining_steps drops;
  * when_unmet 'skip-cascade': pgflow._cascade_force_skip_steps(run_id, step, 'condition_unmet'), in step_index
    order;
  * returns false when the run is (or becomes) 'failed' or is 'cancelled', true otherwise (also for 'completed' and unknown runs,
    where nothing is evaluated). More than 50 rounds raise
    'cascade_resolve_conditions exceeded safety limit of 50 iterations (run <run_id>)'.
$doc$;
