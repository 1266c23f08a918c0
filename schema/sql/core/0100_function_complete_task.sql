create or replace function pgflow.complete_task(
  run_id     uuid,
  step_slug  text,
  task_index integer,
  output     jsonb,
  attempt    integer default null
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
  v_run         pgflow.runs;
  v_state       pgflow.step_states;
  v_task        pgflow.step_tasks;
  v_step        pgflow.steps;
  v_child       text;
  v_type        text;
  v_step_output jsonb;
  v_output_len  integer;
begin
  select r.* into v_run from pgflow.runs as r where r.run_id = complete_task.run_id for update;
  if not found then
    return;
  end if;

  select ss.* into v_state
    from pgflow.step_states as ss
   where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug
     for update;

  select t.* into v_task
    from pgflow.step_tasks as t
   where t.run_id = complete_task.run_id
     and t.step_slug = complete_task.step_slug
     and t.task_index = complete_task.task_index
     for update;
  if not found then
    return;
  end if;

  -- A report from an attempt that is no longer current changes nothing.
  if complete_task.attempt is not null
     and (v_task.status <> 'started' or v_task.attempts_count <> complete_task.attempt) then
    return next v_task;
    return;
  end if;

  -- Failed or cancelled run: nothing to do (its unfinished tasks were cancelled, their messages archived).
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

  -- Only a started task can complete.
  if v_task.status <> 'started' then
    return next v_task;
    return;
  end if;

  select s.* into v_step
    from pgflow.steps as s
   where s.flow_slug = v_run.flow_slug and s.step_slug = complete_task.step_slug;

  -- A single step feeding a map must produce an array.
  if v_step.step_type = 'single' and jsonb_typeof(complete_task.output) is distinct from 'array' then
    select c.step_slug into v_child
      from pgflow.deps as d
      join pgflow.steps as c on c.flow_slug = d.flow_slug and c.step_slug = d.step_slug
      join pgflow.step_states as cs on cs.run_id = complete_task.run_id and cs.step_slug = c.step_slug
     where d.flow_slug = v_run.flow_slug
       and d.dep_slug = complete_task.step_slug
       and c.step_type = 'map'
       and cs.status = 'created'
       and cs.initial_tasks is null
     order by c.step_index
     limit 1;

    if v_child is not null then
      v_type := coalesce(jsonb_typeof(complete_task.output), 'null');

      update pgflow.step_tasks as t
         set status = 'failed',
             failed_at = now(),
             output = complete_task.output,
             error_message = format('[TYPE_VIOLATION] Produced %s instead of array', v_type)
       where t.run_id = complete_task.run_id
         and t.step_slug = complete_task.step_slug
         and t.task_index = complete_task.task_index
      returning t.* into v_task;

      if v_task.message_id is not null then
        perform pgmq.archive(v_task.queue_name, v_task.message_id);
      end if;

      update pgflow.step_states as ss
         set status = 'failed',
             failed_at = now(),
             error_message = format('[TYPE_VIOLATION] Map step %s expects array input but dependency %s produced %s',
                                    v_child, complete_task.step_slug, v_type)
       where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug
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
      perform pgflow._finish_run_steps(complete_task.run_id, 'run_failed');

      update pgflow.runs as r
         set status = 'failed',
             failed_at = now()
       where r.run_id = complete_task.run_id
      returning r.* into v_run;

      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'run:failed',
          'run_id', v_run.run_id,
          'flow_slug', v_run.flow_slug,
          'status', v_run.status,
          'error_message', v_state.error_message,
          'failed_at', v_run.failed_at),
        'run:failed',
        v_run.run_id);

      return next v_task;
      return;
    end if;
  end if;

  -- Complete the task.
  update pgflow.step_tasks as t
     set status = 'completed',
         completed_at = now(),
         output = complete_task.output
   where t.run_id = complete_task.run_id
     and t.step_slug = complete_task.step_slug
     and t.task_index = complete_task.task_index
  returning t.* into v_task;

  update pgflow.step_states as ss
     set remaining_tasks = ss.remaining_tasks - 1
   where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug
  returning ss.* into v_state;

  if v_state.remaining_tasks = 0 then
    if v_step.step_type = 'map' then
      select coalesce(jsonb_agg(t.output order by t.task_index), '[]'::jsonb) into v_step_output
        from pgflow.step_tasks as t
       where t.run_id = complete_task.run_id
         and t.step_slug = complete_task.step_slug
         and t.status = 'completed';
    else
      v_step_output := complete_task.output;
    end if;

    update pgflow.step_states as ss
       set status = 'completed',
           completed_at = now(),
           output = v_step_output
     where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug
    returning ss.* into v_state;

    -- Not computed inside the CASE below: the planner may fold a CASE arm with constant arguments even when the
    -- arm is never taken, and jsonb_array_length raises on a non-array.
    if jsonb_typeof(v_step_output) = 'array' then
      v_output_len := jsonb_array_length(v_step_output);
    end if;

    update pgflow.step_states as cs
       set remaining_deps = cs.remaining_deps - 1,
           initial_tasks = case
                             when c.step_type = 'map' and cs.initial_tasks is null then v_output_len
                             else cs.initial_tasks
                           end
      from pgflow.deps as d
      join pgflow.steps as c on c.flow_slug = d.flow_slug and c.step_slug = d.step_slug
     where d.flow_slug = v_run.flow_slug
       and d.dep_slug = complete_task.step_slug
       and cs.run_id = complete_task.run_id
       and cs.step_slug = d.step_slug;

    update pgflow.runs as r
       set remaining_steps = r.remaining_steps - 1
     where r.run_id = complete_task.run_id;

    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'step:completed',
        'run_id', v_state.run_id,
        'flow_slug', v_state.flow_slug,
        'step_slug', v_state.step_slug,
        'status', v_state.status,
        'output', v_state.output,
        'completed_at', v_state.completed_at),
      'step:' || v_state.step_slug || ':completed',
      v_state.run_id);

    if not pgflow.cascade_resolve_conditions(complete_task.run_id) then
      if v_task.message_id is not null then
        perform pgmq.archive(v_task.queue_name, v_task.message_id);
      end if;
      return next v_task;
      return;
    end if;

    perform pgflow.cascade_complete_taskless_steps(complete_task.run_id);
  end if;

  if v_task.message_id is not null then
    perform pgmq.archive(v_task.queue_name, v_task.message_id);
  end if;

  perform pgflow.start_ready_steps(complete_task.run_id);
  perform pgflow.maybe_complete_run(complete_task.run_id);

  return next v_task;
end;
$$;

comment on function pgflow.complete_task(run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer) is $doc$
pgflow.complete_task(run_id, step_slug, task_index, output, attempt) guarantees (returns the task row; none if
unknown):
  * attempt fencing (v0.20.0): when attempt is given and the task is not 'started' or its attempts_count is not
    attempt, the report comes from an attempt that is no longer current: nothing changes at all (no message is
    touched) and the row is returned as it is, so the caller sees that its result was not recorded. A NULL
    attempt (pgflow's four-argument call) is not fenced;
  * rows are locked in the order run, step state, task (the same order as fail_task and requeue_stalled_tasks),
    so concurrent callbacks of one run are serialised and never deadlock each other;
  * failed or cancelled run: nothing changes (its unfinished tasks were cancelled and their messages archived
    when it ended);
  * step not 'started' (late or replayed callback: completed, skipped, failed): this task's message is archived,
    nothing else changes;
  * task not 'started' (queued, completed, failed): nothing changes at all, no message is touched and no type
    check runs (upstream pgflow failed the run on a bad output even for a never-started task);
  * type violation: a single step that has a dependent map still waiting for its array ('created',
    initial_tasks NULL; a map already skipped needs no array) and produced anything but a JSON array (SQL NULL
    included) fails the task ('[TYPE_VIOLATION] Produced <type> instead of array', output stored, message
    archived) and the step ('[TYPE_VIOLATION] Map step <child> expects array input but dependency <step>
    produced <type>', step:failed), then pgflow._finish_run_steps(run_id, 'run_failed') skips the run's
    unfinished steps, cancels its unfinished tasks and archives their messages, and the run fails (run:failed,
    last, with the step's error_message); when_exhausted does not apply;
  * otherwise the task is completed with the output exactly as given, the step's remaining_tasks drops; on the
    last task the step completes with its output (single: the task output; map: the outputs of all its tasks
    as one array ordered by task_index), its dependents' remaining_deps drop, dependent maps learn their task
    count, the run's remaining_steps drops, step:completed is emitted, conditions are resolved, taskless steps
    cascade, ready steps start and the run completes when nothing is left;
  * the task's message is archived once the task is completed.
Every message operation uses the queue the task stored (step_tasks.queue_name): a single pgmq.archive call for
this task's message, one batch call per queue when the run's messages are archived.
$doc$;
