create or replace function pgflow.release_tasks(
  run_ids      uuid[],
  step_slugs   text[],
  task_indexes integer[],
  attempts     integer[]
)
returns table (task_position integer, released boolean)
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_n        integer := coalesce(cardinality(release_tasks.run_ids), 0);
  v_released integer[];
  v_queue    record;
begin
  if v_n <> coalesce(cardinality(release_tasks.step_slugs), 0)
     or v_n <> coalesce(cardinality(release_tasks.task_indexes), 0)
     or v_n <> coalesce(cardinality(release_tasks.attempts), 0) then
    raise exception 'release_tasks: the arrays differ in length: % run_ids, % step_slugs, % task_indexes, % attempts',
      v_n, coalesce(cardinality(release_tasks.step_slugs), 0), coalesce(cardinality(release_tasks.task_indexes), 0),
      coalesce(cardinality(release_tasks.attempts), 0)
      using errcode = '22023';
  end if;
  if v_n = 0 then
    return;
  end if;

  perform 1
     from (select distinct x.run_id, x.step_slug, x.task_index
             from unnest(release_tasks.run_ids, release_tasks.step_slugs, release_tasks.task_indexes)
                    as x (run_id, step_slug, task_index)
            order by x.run_id, x.step_slug, x.task_index) as k
     cross join lateral (
       select 1 from pgflow.step_tasks as t
        where t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
          for update) as l;

  with candidates as (
    select x.pos, x.run_id, x.step_slug, x.task_index, x.attempt,
           x.pos = min(x.pos) over (partition by x.run_id, x.step_slug, x.task_index) as first
      from unnest(release_tasks.run_ids, release_tasks.step_slugs, release_tasks.task_indexes, release_tasks.attempts)
             with ordinality as x (run_id, step_slug, task_index, attempt, pos)
  ),
  updated as (
    update pgflow.step_tasks as t
       set status = 'queued',
           attempts_count = t.attempts_count - 1,
           started_at = null
      from candidates as c
     where c.first
       and t.run_id = c.run_id
       and t.step_slug = c.step_slug
       and t.task_index = c.task_index
       and t.status = 'started'
       and t.attempts_count = c.attempt
    returning c.pos, t.queue_name, t.message_id
  )
  select array_agg(u.pos) into v_released from updated as u;

  for v_queue in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as msg_ids
      from unnest(release_tasks.run_ids, release_tasks.step_slugs, release_tasks.task_indexes)
             with ordinality as x (run_id, step_slug, task_index, pos)
      join pgflow.step_tasks as t
        on t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
     where x.pos = any (v_released)
       and t.message_id is not null
     group by t.queue_name
     order by t.queue_name
  loop
    perform pgflow._make_task_messages_visible(v_queue.queue_name, v_queue.msg_ids,
                                               array_fill(0, array[cardinality(v_queue.msg_ids)]));
  end loop;

  return query
    select p.pos::integer, p.pos = any (coalesce(v_released, '{}'))
      from generate_series(1, v_n) as p (pos);
end;
$$;

comment on function pgflow.release_tasks(run_ids uuid[], step_slugs text[], task_indexes integer[], attempts integer[]) is $doc$
pgflow.release_tasks(run_ids, step_slugs, task_indexes, attempts) hands tasks back to the queue without spending
an attempt (v0.20.0; a worker that shuts down while handlers still run calls it for the tasks it gives up on).
Element i of the four arrays names one task and the attempt the caller holds. It guarantees:
  * a task that is 'started' at exactly attempts[i] goes back to 'queued': attempts_count - 1 (the interrupted
    attempt is not counted), started_at NULL, last_worker_id kept for the audit trail; its message becomes
    visible at once in the queue the task stored (one pgflow._make_task_messages_visible call per queue: a
    message deleted at the claim, flows.message_retention 'delete', is sent again and the task stores the new
    message_id), so any worker may claim it again;
  * anything else changes nothing: an unknown task, a task that is not 'started', one whose current attempt is
    another (the task was recovered and claimed again: that attempt is not the caller's to give back), or the
    same task named again later in the call;
  * task rows are locked in key order (FOR UPDATE), so concurrent callbacks for the same task are serialised:
    of a release and a completion of the same attempt, exactly one takes effect;
  * returns one row per array element: its 1-based position and whether this call released the task;
  * arrays of different lengths raise an error naming the four lengths (22023) before anything changes; NULL or
    empty arrays release nothing and return nothing.
$doc$;
