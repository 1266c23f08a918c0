create or replace function pgflow._finish_run_steps(run_id uuid, skip_reason text)
returns integer
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_events  jsonb[];
  v_skipped integer;
  v_queue   record;
begin
  if _finish_run_steps.skip_reason is null or _finish_run_steps.skip_reason not in ('run_failed', 'run_cancelled') then
    raise exception '_finish_run_steps: skip_reason must be run_failed or run_cancelled, got %',
      coalesce(_finish_run_steps.skip_reason, 'NULL')
      using errcode = '22023';
  end if;

  -- Step states first, then tasks: the lock order of complete_task, fail_task and requeue_stalled_tasks (the
  -- caller holds the run).
  with skipped as (
    update pgflow.step_states as ss
       set status = 'skipped',
           skip_reason = _finish_run_steps.skip_reason,
           skipped_at = now(),
           remaining_tasks = null
     where ss.run_id = _finish_run_steps.run_id
       and ss.status in ('created', 'started')
    returning ss.*
  )
  select count(*)::integer,
         array_agg(jsonb_build_object(
                     'event_type', 'step:skipped',
                     'run_id', sk.run_id,
                     'flow_slug', sk.flow_slug,
                     'step_slug', sk.step_slug,
                     'status', sk.status,
                     'skip_reason', sk.skip_reason,
                     'skipped_at', sk.skipped_at) order by s.step_index)
    into v_skipped, v_events
    from skipped as sk
    join pgflow.steps as s on s.flow_slug = sk.flow_slug and s.step_slug = sk.step_slug;

  if v_skipped > 0 then
    update pgflow.runs as r
       set remaining_steps = greatest(r.remaining_steps - v_skipped, 0)
     where r.run_id = _finish_run_steps.run_id;
    perform pgflow._emit_events(v_events);
  end if;

  for v_queue in
    with locked as (
      select t.step_slug, t.task_index, t.status as old_status
        from pgflow.step_tasks as t
       where t.run_id = _finish_run_steps.run_id
         and t.status in ('queued', 'started')
       order by t.step_slug, t.task_index
         for update
    ),
    cancelled as (
      update pgflow.step_tasks as t
         set status = 'cancelled'
        from locked as l
       where t.run_id = _finish_run_steps.run_id
         and t.step_slug = l.step_slug
         and t.task_index = l.task_index
      returning t.queue_name, t.message_id, l.old_status
    )
    select c.queue_name,
           array_agg(c.message_id order by c.message_id) filter (where c.message_id is not null) as msg_ids,
           bool_or(c.old_status = 'started') as had_started
      from cancelled as c
     group by c.queue_name
     order by c.queue_name
  loop
    if v_queue.msg_ids is not null then
      perform pgmq.archive(v_queue.queue_name, v_queue.msg_ids);
    end if;
    if v_queue.had_started then
      perform pgflow._notify(array['pgflow:queue:' || v_queue.queue_name],
                             array['{"cancel_run":"' || _finish_run_steps.run_id::text || '"}']);
    end if;
  end loop;

  return v_skipped;
end;
$$;

comment on function pgflow._finish_run_steps(run_id uuid, skip_reason text) is $doc$
pgflow._finish_run_steps(run_id, skip_reason) guarantees (v0.20.0; the one place where a run that fails or is
cancelled makes its unfinished work look finished; the caller holds the run row and changes the run's own status
afterwards):
  * skip_reason must be 'run_failed' or 'run_cancelled', else SQLSTATE 22023 naming the value, before anything
    changes;
  * every step state of the run that is 'created' or 'started' becomes 'skipped' with that skip_reason
    (skipped_at now, remaining_tasks NULL); failed and completed steps keep their status; the run's
    remaining_steps drops by their number; step:skipped is emitted per step, in step_index order (one
    _emit_events call);
  * every task of the run that is 'queued' or 'started' becomes 'cancelled' (its other columns are kept, so a
    report of its attempt is fenced: complete_task, complete_tasks and fail_task change nothing for it); failed
    and completed tasks keep their status;
  * their messages are archived from the queues the tasks stored (step_tasks.queue_name), one batch
    pgmq.archive call per queue;
  * for every queue that had a 'started' task of the run, pg_notify('pgflow:queue:<queue>',
    '{"cancel_run":"<run_id>"}') tells the workers to cancel the handlers still running for the run (at commit);
  * returns the number of steps skipped. Rows are locked in the order step states, then tasks.
$doc$;
