create or replace function pgflow._send_step_tasks(
  run_ids      uuid[],
  step_slugs   text[],
  flow_slugs   text[],
  queue_names  text[],
  start_delays integer[],
  task_counts  integer[]
)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_n     integer := coalesce(cardinality(_send_step_tasks.run_ids), 0);
  v_group record;
begin
  if v_n = 0 then
    return;
  end if;

  -- step:started; its JSON payload only for a trusted realtime.send. A step started in this transaction has
  -- started_at now(), remaining_tasks = its task count and no remaining dependency, so the payload is made from
  -- the arguments, as the stored state would give it.
  perform pgflow._emit_envelopes(
    array_fill('step:started'::text, array[v_n]),
    _send_step_tasks.run_ids,
    _send_step_tasks.flow_slugs,
    _send_step_tasks.step_slugs,
    array_fill('started'::text, array[v_n]),
    case
      when pgflow._trusted_realtime_send() is not null then array(
        select jsonb_build_object(
                 'event_type', 'step:started',
                 'run_id', x.run_id,
                 'flow_slug', x.flow_slug,
                 'step_slug', x.step_slug,
                 'status', 'started',
                 'started_at', now(),
                 'remaining_tasks', x.task_count,
                 'remaining_deps', 0)
          from unnest(_send_step_tasks.run_ids, _send_step_tasks.flow_slugs, _send_step_tasks.step_slugs,
                      _send_step_tasks.task_counts) with ordinality as x (run_id, flow_slug, step_slug, task_count, pos)
         order by x.pos)
    end);

  -- One send_batch per (queue, delay), in its form with headers and a time (the one PGMQ implements; the others
  -- are SQL functions that wrap it and are planned again on every call). send_batch returns the new ids in array
  -- order and ids increase along the array, so the n-th smallest id belongs to the n-th message of the array:
  -- the tasks of a group are numbered once, by (run_id, step_slug, task_index), and both the task rows and the
  -- message array follow that numbering.
  for v_group in
    select distinct x.queue_name, x.start_delay
      from unnest(_send_step_tasks.queue_names, _send_step_tasks.start_delays) as x (queue_name, start_delay)
     order by x.queue_name, x.start_delay
  loop
    with tasks as (
      select x.flow_slug, x.run_id, x.step_slug, i.i as task_index,
             row_number() over (order by x.run_id, x.step_slug, i.i) as n
        from unnest(_send_step_tasks.flow_slugs, _send_step_tasks.run_ids, _send_step_tasks.step_slugs,
                    _send_step_tasks.queue_names, _send_step_tasks.start_delays, _send_step_tasks.task_counts)
               as x (flow_slug, run_id, step_slug, queue_name, start_delay, initial_tasks)
        cross join lateral generate_series(0, x.initial_tasks - 1) as i (i)
       where x.queue_name = v_group.queue_name
         and x.start_delay = v_group.start_delay
    ),
    -- The message ids, ascending, in one array (one row: send_batch runs once), so the n-th task takes the n-th
    -- id by subscript: no join of the two sets, which the join methods these functions allow (nested loops only)
    -- would make quadratic.
    sent as (
      select array_agg(s.msg_id order by s.msg_id) as msg_ids
        from pgmq.send_batch(
               v_group.queue_name,
               array(
                 select jsonb_build_object(
                          'flow_slug', m.flow_slug,
                          'run_id', m.run_id,
                          'step_slug', m.step_slug,
                          'task_index', m.task_index)
                   from tasks as m
                  order by m.n),
               null::jsonb[],
               clock_timestamp() + make_interval(secs => v_group.start_delay)) as s (msg_id)
    )
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name)
    select t.flow_slug, t.run_id, t.step_slug, t.task_index, sent.msg_ids[t.n], v_group.queue_name
      from tasks as t
      cross join sent;

    -- Wake the workers waiting on this queue (one notification per queue and transaction: PostgreSQL folds
    -- identical notifications of one transaction). Delayed messages: tell them when the messages become visible,
    -- one announcement per (queue, delay) group.
    perform pgflow._wake_queue(v_group.queue_name, v_group.start_delay);
  end loop;
end;
$$;

comment on function pgflow._send_step_tasks(run_ids uuid[], step_slugs text[], flow_slugs text[], queue_names text[], start_delays integer[], task_counts integer[]) is $doc$
pgflow._send_step_tasks(run_ids, step_slugs, flow_slugs, queue_names, start_delays, task_counts) guarantees
(v0.20.0): what follows when steps become 'started' - the caller has made the step states (run_ids[i],
step_slugs[i]) of flow flow_slugs[i] 'started' in this transaction (started_at now(), remaining_tasks =
task_counts[i], remaining_deps 0) and lists them by run, then step_index. For every i, in array order:
  * step:started is emitted (pgflow._emit_envelopes, status 'started'); when a trusted realtime.send exists its
    payload {event_type, run_id, flow_slug, step_slug, status, started_at, remaining_tasks, remaining_deps} is
    made from the arguments - what the stored state holds;
  * one message per task {"flow_slug", "run_id", "step_slug", "task_index"} goes to queue_names[i], delayed by
    start_delays[i] seconds, with one pgmq.send_batch call per (queue, delay) for all the steps together, and one
    'queued' step_tasks row per message is written with its message_id and that queue_name (task_index 0 ..
    task_counts[i]-1, paired with the message carrying that index); no queue is created here (no DDL);
  * after each (queue, delay) group, pgflow._wake_queue wakes the queue's workers (undelayed) or announces when
    the messages become visible (delayed);
  * empty or NULL arrays do nothing. The arrays are paired by position and must be equally long.
Used by pgflow._start_ready_steps_batch after it chose the steps, and by pgflow.start_flows for the root steps it
inserted 'started' (it knows their fields without reading them back).
$doc$;
