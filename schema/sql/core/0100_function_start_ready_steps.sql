create or replace function pgflow.start_ready_steps(run_id uuid)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_run_status text;
  v_step       record;
  v_queues     text[] := '{}';
  v_delays     integer[] := '{}';
begin
  select r.status into v_run_status from pgflow.runs as r where r.run_id = start_ready_steps.run_id;
  if v_run_status is distinct from 'started' then
    return;
  end if;

  for v_step in
    with started as (
      update pgflow.step_states as ss
         set status = 'started',
             started_at = now(),
             remaining_tasks = ss.initial_tasks
       where ss.run_id = start_ready_steps.run_id
         and ss.status = 'created'
         and ss.remaining_deps = 0
         and ss.initial_tasks > 0
      returning ss.flow_slug, ss.run_id, ss.step_slug, ss.status, ss.started_at, ss.remaining_tasks,
                ss.remaining_deps, ss.initial_tasks
    )
    select st.*, s.step_index, s.queue_name, coalesce(s.opt_start_delay, 0) as start_delay
      from started as st
      join pgflow.steps as s on s.flow_slug = st.flow_slug and s.step_slug = st.step_slug
     order by s.step_index
  loop
    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'step:started',
        'run_id', v_step.run_id,
        'flow_slug', v_step.flow_slug,
        'step_slug', v_step.step_slug,
        'status', v_step.status,
        'started_at', v_step.started_at,
        'remaining_tasks', v_step.remaining_tasks,
        'remaining_deps', v_step.remaining_deps),
      'step:' || v_step.step_slug || ':started',
      v_step.run_id);

    -- send_batch returns the new ids in array order and ids increase along the array, so the n-th smallest id
    -- belongs to the message with task_index n.
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name)
    select v_step.flow_slug, v_step.run_id, v_step.step_slug, (m.n - 1)::integer, m.msg_id, v_step.queue_name
      from (
        select sent.msg_id, row_number() over (order by sent.msg_id) as n
          from pgmq.send_batch(
                 v_step.queue_name,
                 array(
                   select jsonb_build_object(
                            'flow_slug', v_step.flow_slug,
                            'run_id', v_step.run_id,
                            'step_slug', v_step.step_slug,
                            'task_index', i)
                     from generate_series(0, v_step.initial_tasks - 1) as i
                    order by i),
                 null::jsonb[],
                 clock_timestamp() + make_interval(secs => v_step.start_delay)) as sent(msg_id)
      ) as m;

    v_queues := v_queues || v_step.queue_name;
    v_delays := v_delays || v_step.start_delay;
  end loop;

  -- Wake the workers waiting on each queue (at commit; PostgreSQL folds identical notifications of one
  -- transaction into one): '' for undelayed messages, and for each distinct delay the time its messages become
  -- visible (send_batch gave them clock_timestamp() + delay a moment ago, so this time is at or just after it).
  for v_step in
    select distinct x.queue_name, x.delay
      from unnest(v_queues, v_delays) as x (queue_name, delay)
     order by x.queue_name, x.delay
  loop
    perform pgflow._wake_queue(v_step.queue_name, v_step.delay);
  end loop;
end;
$$;

comment on function pgflow.start_ready_steps(run_id uuid) is $doc$
pgflow.start_ready_steps(run_id) guarantees:
  * nothing happens unless the run is 'started';
  * every step state of the run that is 'created' with remaining_deps 0 and initial_tasks > 0 becomes 'started'
    (started_at now, remaining_tasks = initial_tasks), exactly once even when called concurrently;
  * per started step, in step_index order: step:started is emitted, one message per task
    {"flow_slug", "run_id", "step_slug", "task_index"} is sent with one pgmq.send_batch call to the step's queue
    (steps.queue_name), delayed by the step's opt_start_delay seconds (NULL = 0), and one 'queued' step_tasks
    row per message is written with its message_id and that same queue_name (task_index 0 .. initial_tasks-1,
    paired with the message carrying that index); no queue is created here (no DDL);
  * after sending undelayed messages, pgflow._wake_queue wakes a worker of that queue (v0.20.0: one alive
    worker on its own channel, else every listener on 'pgflow:queue:<queue_name>'); after sending delayed ones,
    pgflow._wake_queue tells them when they
    become visible ({"visible_at": ...}, one per queue and distinct delay; v0.20.0);
  * steps with initial_tasks NULL (dependent maps whose parent has not completed) or 0 (taskless, completed by
    cascade_complete_taskless_steps) are never started here. Conditions are not evaluated here: callers resolve
    them first (cascade_resolve_conditions / cascade_complete_taskless_steps).
$doc$;
