create or replace function pgflow._make_task_messages_visible(p_queue_name text, p_msg_ids bigint[], p_delays integer[])
returns table (old_msg_id bigint, msg_id bigint, vt timestamptz)
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_found bigint[];
  v_vts   timestamptz[];
  v_row   record;
  v_group record;
begin
  if coalesce(cardinality(p_msg_ids), 0) = 0 then
    return;
  end if;

  -- Messages still in the queue (archive retention, or never claimed) keep their id: only their visibility moves.
  select coalesce(array_agg(s.msg_id), '{}'), coalesce(array_agg(s.vt), '{}')
    into v_found, v_vts
    from pgflow.set_vt_batch(p_queue_name, p_msg_ids, p_delays) as s;
  return query select f.id, f.id, f.vt from unnest(v_found, v_vts) as f (id, vt);
  if cardinality(v_found) = cardinality(p_msg_ids) then
    return;
  end if;

  -- A message that is gone was deleted when its task was claimed (message_retention 'delete'): the task gets a new
  -- message with the same body, one send_batch per delay, and stores the new id. Only tasks whose run and step
  -- still run get one, so a task of a finished or cancelled run is never sent to a worker again.
  for v_group in
    select x.delay, clock_timestamp() + make_interval(secs => x.delay) as visible_at,
           array_agg(t.message_id order by t.message_id) as old_ids,
           array_agg(jsonb_build_object('flow_slug', t.flow_slug, 'run_id', t.run_id,
                                        'step_slug', t.step_slug, 'task_index', t.task_index)
                     order by t.message_id) as bodies
      from (select distinct on (m.id) m.id, coalesce(m.delay, 0) as delay
              from unnest(p_msg_ids, p_delays) as m (id, delay)
             where m.id <> all (v_found)
             order by m.id) as x
      cross join lateral (
        select t.flow_slug, t.run_id, t.step_slug, t.task_index, t.message_id
          from pgflow.step_tasks as t
         where t.queue_name = p_queue_name
           and t.message_id = x.id
         limit 1) as t
     where (select r.status from pgflow.runs as r where r.run_id = t.run_id) = 'started'
       and (select ss.status from pgflow.step_states as ss
             where ss.run_id = t.run_id and ss.step_slug = t.step_slug) = 'started'
     group by x.delay
     order by x.delay
  loop
    for v_row in
      with sent as (
        select s.msg_id, row_number() over (order by s.msg_id) as n
          from pgmq.send_batch(p_queue_name, v_group.bodies, null::jsonb[], v_group.visible_at) as s (msg_id)
      ),
      pairs as (
        select o.old_id, sent.msg_id
          from unnest(v_group.old_ids) with ordinality as o (old_id, n)
          join sent on sent.n = o.n
      ),
      moved as (
        update pgflow.step_tasks as t
           set message_id = p.msg_id
          from pairs as p
         where t.queue_name = p_queue_name
           and t.message_id = p.old_id
        returning p.old_id, p.msg_id
      )
      select m.old_id, m.msg_id from moved as m order by m.old_id
    loop
      old_msg_id := v_row.old_id;
      msg_id := v_row.msg_id;
      vt := v_group.visible_at;
      return next;
    end loop;
  end loop;
end;
$$;

comment on function pgflow._make_task_messages_visible(p_queue_name text, p_msg_ids bigint[], p_delays integer[]) is $doc$
pgflow._make_task_messages_visible(p_queue_name, p_msg_ids, p_delays) guarantees (v0.20.0): the tasks whose
stored identity is (p_queue_name, p_msg_ids[i]) can be read again after p_delays[i] seconds (NULL or 0 = now), in
every message retention:
  * a message still in the queue gets its visibility set (pgflow.set_vt_batch) and keeps its id;
  * a message no longer in the queue - deleted when its task was claimed, flows.message_retention 'delete' - is
    sent again with the same body ({"flow_slug", "run_id", "step_slug", "task_index"}; one pgmq.send_batch per
    delay, visible at the time it returns), and the task's step_tasks.message_id becomes the new id; this happens only for a task whose run and
    step are 'started' (a task of a finished, failed or cancelled run is never sent again), and ids that name no
    task are ignored;
  * returns one row per message made visible: the id the caller gave, the id the task has now (the same unless
    sent again) and when it becomes visible.
The callers lock the task rows first (release_tasks, requeue_stalled_tasks, fail_task), so two calls never send
one task twice. Messages are only sent and changed through PGMQ's public functions and pgflow.set_vt_batch.
$doc$;
