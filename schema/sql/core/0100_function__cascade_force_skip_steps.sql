create or replace function pgflow._cascade_force_skip_steps(run_id uuid, step_slug text, skip_reason text)
returns integer
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_flow_slug text;
  v_skipped   text[] := '{}';
  v_step      record;
  v_queue     record;
begin
  select r.flow_slug into v_flow_slug from pgflow.runs as r where r.run_id = _cascade_force_skip_steps.run_id;
  if not found then
    raise exception 'Run not found: %', _cascade_force_skip_steps.run_id;
  end if;

  for v_step in
    with recursive targets (slug) as (
      select _cascade_force_skip_steps.step_slug
      union
      select d.step_slug
        from pgflow.deps as d
        join targets as t on d.dep_slug = t.slug
       where d.flow_slug = v_flow_slug
    ),
    skipped as (
      update pgflow.step_states as ss
         set status = 'skipped',
             skip_reason = case when ss.step_slug = _cascade_force_skip_steps.step_slug
                                then _cascade_force_skip_steps.skip_reason
                                else 'dependency_skipped' end,
             skipped_at = now(),
             remaining_tasks = null
        from targets as t
       where ss.run_id = _cascade_force_skip_steps.run_id
         and ss.step_slug = t.slug
         and ss.status in ('created', 'started')
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

  if cardinality(v_skipped) = 0 then
    return 0;
  end if;

  for v_queue in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as msg_ids
      from pgflow.step_tasks as t
     where t.run_id = _cascade_force_skip_steps.run_id
       and t.step_slug = any (v_skipped)
       and t.status in ('queued', 'started')
       and t.message_id is not null
     group by t.queue_name
     order by t.queue_name
  loop
    perform pgmq.archive(v_queue.queue_name, v_queue.msg_ids);
  end loop;

  update pgflow.runs as r
     set remaining_steps = r.remaining_steps - cardinality(v_skipped)
   where r.run_id = _cascade_force_skip_steps.run_id;

  return cardinality(v_skipped);
end;
$$;

comment on function pgflow._cascade_force_skip_steps(run_id uuid, step_slug text, skip_reason text) is $doc$
pgflow._cascade_force_skip_steps(run_id, step_slug, skip_reason) guarantees:
  * the step and all its transitive dependents that are still 'created' or 'started' in the run become
    'skipped' (skipped_at now, remaining_tasks NULL); the trigger step gets skip_reason, every other step
    'dependency_skipped'; steps already terminal (including an already skipped trigger) are left alone;
  * step:skipped is emitted per newly skipped step in step_index order (a topological order);
  * the queued/started messages of the newly skipped steps' tasks are archived from the queues the tasks stored
    (step_tasks.queue_name), one batch pgmq.archive call per queue; their task rows keep their status (late
    callbacks are ignored by complete_task/fail_task);
  * the run's remaining_steps drops by the number newly skipped, which is returned (a second call returns 0).
It does not look at the run status and does not decrement remaining_deps (every dependent is skipped anyway).
Unknown run: raises 'Run not found: <run_id>'.
$doc$;
