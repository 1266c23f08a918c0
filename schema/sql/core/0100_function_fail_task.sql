create or replace function pgflow.fail_task(
  run_id        uuid,
  step_slug     text,
  task_index    integer,
  error_message text,
  attempt       integer default null,
  permanent     boolean default false,
  retry_delay   integer default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
-- Every statement here finds its rows by key or by address: one plan per session instead of one per call, and
-- never a sequential scan, also in the foreign-key checks its writes run, whose plans PostgreSQL caches too (a
-- plan made while a table was empty would scan it whole on every check as it grows: docs/performance.md).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
-- Nested loops only: a hash or merge join reads one side whole, and a plan made while a table was small (a fresh
-- database, a session that began early) reads the whole table through its primary key on every later call, for as
-- long as the session keeps the plan (v0.20.0: 139,000 buffers per lone completion at 20,000 runs). Every join
-- here is by key, one lookup per row.
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  v_run            pgflow.runs;
  v_state          pgflow.step_states;
  v_task           pgflow.step_tasks;
  v_max_attempts   integer;
  v_base_delay     integer;
  v_when_exhausted text;
  v_queue          record;
  v_delay          integer;
  v_retry_at       timestamptz;
begin
  if fail_task.error_message is null then
    raise exception 'fail_task: error_message must not be NULL (run %, step %, task %)',
      fail_task.run_id, fail_task.step_slug, fail_task.task_index
      using errcode = '22004';
  end if;
  if fail_task.retry_delay < 0 then
    raise exception 'fail_task: retry_delay must be >= 0 seconds, got % (run %, step %, task %)',
      fail_task.retry_delay, fail_task.run_id, fail_task.step_slug, fail_task.task_index
      using errcode = '22023';
  end if;

  select r.* into v_run from pgflow.runs as r where r.run_id = fail_task.run_id for update;
  if not found then
    return;
  end if;

  select ss.* into v_state
    from pgflow.step_states as ss
   where ss.run_id = fail_task.run_id and ss.step_slug = fail_task.step_slug
     for update;

  select t.* into v_task
    from pgflow.step_tasks as t
   where t.run_id = fail_task.run_id
     and t.step_slug = fail_task.step_slug
     and t.task_index = fail_task.task_index
     for update;
  if not found then
    return;
  end if;

  -- A report from an attempt that is no longer current changes nothing.
  if fail_task.attempt is not null
     and (v_task.status <> 'started' or v_task.attempts_count <> fail_task.attempt) then
    return next v_task;
    return;
  end if;

  -- Failed or cancelled run: its unfinished tasks were cancelled and their messages archived; nothing changes.
  if v_run.status in ('failed', 'cancelled') then
    return next v_task;
    return;
  end if;

  -- Late or replayed callback for a step that is no longer running.
  if v_state.status is distinct from 'started' then
    if v_task.message_id is not null then
      perform pgmq.archive(v_task.queue_name, v_task.message_id);
    end if;
    return next v_task;
    return;
  end if;

  -- Only a started task can fail.
  if v_task.status <> 'started' then
    return next v_task;
    return;
  end if;

  select coalesce(s.opt_max_attempts, f.opt_max_attempts),
         coalesce(s.opt_base_delay, f.opt_base_delay),
         s.when_exhausted
    into v_max_attempts, v_base_delay, v_when_exhausted
    from pgflow.steps as s
    join pgflow.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v_run.flow_slug and s.step_slug = fail_task.step_slug;

  -- Retry.
  if v_task.attempts_count - v_task.attempts_before_retry < v_max_attempts and v_task.permanently_stalled_at is null
     and not coalesce(fail_task.permanent, false) then
    v_delay := coalesce(fail_task.retry_delay,
                        pgflow.calculate_retry_delay(v_base_delay, v_task.attempts_count - v_task.attempts_before_retry));
    -- The message, still in the queue or deleted at the claim (message_retention 'delete'), becomes readable
    -- after the delay; a message sent again gives the task a new message_id, which the update below returns.
    if v_task.message_id is not null then
      select m.vt into v_retry_at
        from pgflow._make_task_messages_visible(v_task.queue_name, array[v_task.message_id], array[v_delay]) as m;
    end if;
    v_retry_at := coalesce(v_retry_at, clock_timestamp() + make_interval(secs => v_delay));

    update pgflow.step_tasks as t
       set status = 'queued',
           started_at = null,
           failed_at = null,
           error_message = fail_task.error_message,
           retry_at = v_retry_at
     where t.run_id = fail_task.run_id
       and t.step_slug = fail_task.step_slug
       and t.task_index = fail_task.task_index
    returning t.* into v_task;

    -- Wake the workers of the queue: now, or when the message becomes visible.
    if v_task.message_id is not null then
      if v_delay = 0 then
        perform pgflow._wake_queue(v_task.queue_name, 0);
      else
        perform pgflow._notify_queue_visible_at(v_task.queue_name, v_retry_at);
      end if;
    end if;
    return next v_task;
    return;
  end if;

  -- Exhausted.
  update pgflow.step_tasks as t
     set status = 'failed',
         failed_at = now(),
         error_message = fail_task.error_message
   where t.run_id = fail_task.run_id
     and t.step_slug = fail_task.step_slug
     and t.task_index = fail_task.task_index
  returning t.* into v_task;

  if v_task.message_id is not null then
    perform pgmq.archive(v_task.queue_name, v_task.message_id);
  end if;

  if v_when_exhausted = 'fail' then
    update pgflow.step_states as ss
       set status = 'failed',
           failed_at = now(),
           error_message = fail_task.error_message
     where ss.run_id = fail_task.run_id and ss.step_slug = fail_task.step_slug
    returning ss.* into v_state;

    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'step:failed',
        'run_id', v_state.run_id,
        'flow_slug', v_state.flow_slug,
        'step_slug', v_state.step_slug,
        'status', v_state.status,
        'error_message', v_state.error_message,
        'failed_at', v_state.failed_at),
      'step:' || v_state.step_slug || ':failed',
      v_state.run_id);

    -- The rest of the run will not run: unfinished steps skipped, unfinished tasks cancelled, messages archived.
    perform pgflow._finish_run_steps(fail_task.run_id, 'run_failed');

    update pgflow.runs as r
       set status = 'failed',
           failed_at = now()
     where r.run_id = fail_task.run_id
    returning r.* into v_run;

    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'run:failed',
        'run_id', v_run.run_id,
        'flow_slug', v_run.flow_slug,
        'status', v_run.status,
        'error_message', fail_task.error_message,
        'failed_at', v_run.failed_at),
      'run:failed',
      v_run.run_id);

    return next v_task;
    return;
  end if;

  -- when_exhausted 'skip' or 'skip-cascade': the step is skipped, the run goes on.
  update pgflow.step_states as ss
     set status = 'skipped',
         skip_reason = 'handler_failed',
         skipped_at = now(),
         error_message = fail_task.error_message,
         remaining_tasks = null,
         failed_at = null
   where ss.run_id = fail_task.run_id and ss.step_slug = fail_task.step_slug
  returning ss.* into v_state;

  update pgflow.runs as r
     set remaining_steps = r.remaining_steps - 1
   where r.run_id = fail_task.run_id;

  for v_queue in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as msg_ids
      from pgflow.step_tasks as t
     where t.run_id = fail_task.run_id
       and t.step_slug = fail_task.step_slug
       and t.status in ('queued', 'started')
       and t.message_id is not null
     group by t.queue_name
     order by t.queue_name
  loop
    perform pgmq.archive(v_queue.queue_name, v_queue.msg_ids);
  end loop;

  perform pgflow._emit_event(
    jsonb_build_object(
      'event_type', 'step:skipped',
      'run_id', v_state.run_id,
      'flow_slug', v_state.flow_slug,
      'step_slug', v_state.step_slug,
      'status', v_state.status,
      'skip_reason', v_state.skip_reason,
      'error_message', v_state.error_message,
      'skipped_at', v_state.skipped_at),
    'step:' || v_state.step_slug || ':skipped',
    v_state.run_id);

  if v_when_exhausted = 'skip-cascade' then
    perform pgflow._cascade_force_skip_steps(fail_task.run_id, fail_task.step_slug, 'handler_failed');
  else
    update pgflow.step_states as cs
       set remaining_deps = cs.remaining_deps - 1,
           initial_tasks = case
                             when c.step_type = 'map' and c.deps_count = 1 and cs.status = 'created' then 0
                             else cs.initial_tasks
                           end
      from pgflow.deps as d
      join pgflow.steps as c on c.flow_slug = d.flow_slug and c.step_slug = d.step_slug
     where d.flow_slug = v_run.flow_slug
       and d.dep_slug = fail_task.step_slug
       and cs.run_id = fail_task.run_id
       and cs.step_slug = d.step_slug;

    if not pgflow.cascade_resolve_conditions(fail_task.run_id) then
      perform pgflow._archive_task_message(fail_task.run_id, fail_task.step_slug, fail_task.task_index);
      return next v_task;
      return;
    end if;

    perform pgflow.cascade_complete_taskless_steps(fail_task.run_id);
    perform pgflow.start_ready_steps(fail_task.run_id);
  end if;

  perform pgflow.maybe_complete_run(fail_task.run_id);

  return next v_task;
end;
$$;

comment on function pgflow.fail_task(run_id uuid, step_slug text, task_index integer, error_message text, attempt integer, permanent boolean, retry_delay integer) is $doc$
pgflow.fail_task(run_id, step_slug, task_index, error_message, attempt, permanent, retry_delay) guarantees
(returns the task row; none if unknown):
  * a NULL error_message is refused (SQLSTATE 22004, naming the task), and so is a negative retry_delay
    (SQLSTATE 22023, naming the value and the task), before anything changes;
  * attempt fencing (v0.20.0): when attempt is given and the task is not 'started' or its attempts_count is not
    attempt, the report comes from an attempt that is no longer current: nothing changes at all (no message is
    touched) and the row is returned as it is. A NULL attempt (pgflow's four-argument call) is not fenced;
  * permanent => true (the handler said the error will not go away): the task does not retry, whatever attempts
    are left; it is failed as an exhausted task (below);
  * rows are locked in the order run, step state, task (as in complete_task and requeue_stalled_tasks);
  * failed or cancelled run (v0.20.0): nothing changes - its unfinished tasks were cancelled and their messages
    archived when it ended, so a late failure is fenced like a late result;
  * step not 'started' (late or replayed callback): this task's message is archived, nothing else changes (no
    double decrement, no event);
  * task not 'started': nothing changes at all, the message keeps its visibility (upstream pgflow pushed it by
    the retry delay);
  * attempts left (attempts_count - attempts_before_retry < coalesce(step, flow) opt_max_attempts, and the task
    was not given up as permanently stalled): the task goes back to 'queued' (started_at NULL, error_message
    kept) and its message becomes visible after retry_delay seconds from now when given (v0.20.0: the handler's
    choice, e.g. an HTTP Retry-After; at most 2147483647, the integer range; it still spends the attempt), else
    after pgflow.calculate_retry_delay(coalesce(step, flow) opt_base_delay, attempts_count -
    attempts_before_retry); retry_at records that time (the message's new vt). A message deleted at the claim
    (flows.message_retention 'delete') is sent again and the task stores its new message_id
    (pgflow._make_task_messages_visible). The queue's workers are told:
    pgflow._wake_queue(queue, 0) for a delay of 0 (one alive worker of the queue, else a broadcast), else
    pgflow._notify_queue_visible_at (payload {"visible_at": ...}); no event;
  * exhausted: the task becomes 'failed' and its message is archived, then per the step's when_exhausted:
    'fail' -> the step fails (step:failed), pgflow._finish_run_steps(run_id, 'run_failed') skips the run's
    unfinished steps (step:skipped each), cancels its unfinished tasks, archives their messages and tells the
    workers of started ones ({"cancel_run": ...}), then the run fails (run:failed, last);
    'skip' -> step skipped (handler_failed, error_message kept), sibling messages archived, step:skipped,
    dependents released (map dependents get 0 tasks), conditions, taskless cascade, ready steps start, the run
    may complete; 'skip-cascade' -> like 'skip' but every dependent is skipped (dependency_skipped).
Every message operation uses the queue the task stored (step_tasks.queue_name): single-message pgmq.archive and
pgflow._make_task_messages_visible calls for this task, one batch pgmq.archive call per queue when several tasks' messages are archived.
$doc$;
