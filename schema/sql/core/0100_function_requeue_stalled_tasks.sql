create or replace function pgflow.requeue_stalled_tasks()
returns integer
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
set jit = off
-- Key lookups only, whatever the statistics say: the runs are found by idx_runs_status, their step states and
-- tasks by primary-key prefix (the settings of the hot paths' entry points).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  v_requeued   integer := 0;
  v_queue      record;
  v_task       record;
  v_requeue    tid[];
  v_gu_runs    uuid[];
  v_gu_steps   text[];
  v_gu_indexes integer[];
  v_gu_counts  integer[];
  v_gu_timeouts integer[];
begin
  -- No index finds started tasks (v0.20.0): one on a column a claim or a completion changes, or with status in its
  -- predicate, would make those updates write index entries instead of heap-only tuples
  -- (sql/core/0026_table_step_tasks.sql). A started task belongs to a started step state of a started run, and
  -- idx_runs_status finds those: this one scan costs the runs in progress (a backlog included), not the history.
  -- It finds both kinds of stalled task: the ones to requeue (by physical address) and the ones to give up.
  select coalesce(array_agg(c.row_address) filter (where c.requeued_count < 3), '{}'),
         coalesce(array_agg(c.run_id order by c.run_id, c.step_index, c.task_index) filter (where c.requeued_count >= 3), '{}'),
         coalesce(array_agg(c.step_slug order by c.run_id, c.step_index, c.task_index) filter (where c.requeued_count >= 3), '{}'),
         coalesce(array_agg(c.task_index order by c.run_id, c.step_index, c.task_index) filter (where c.requeued_count >= 3), '{}'),
         coalesce(array_agg(c.requeued_count order by c.run_id, c.step_index, c.task_index) filter (where c.requeued_count >= 3), '{}'),
         coalesce(array_agg(c.timeout_seconds order by c.run_id, c.step_index, c.task_index) filter (where c.requeued_count >= 3), '{}')
    into v_requeue, v_gu_runs, v_gu_steps, v_gu_indexes, v_gu_counts, v_gu_timeouts
    from (select t.ctid as row_address, t.run_id, t.step_slug, t.task_index, t.requeued_count, s.step_index,
                 coalesce(s.opt_timeout, f.opt_timeout) as timeout_seconds
            from pgflow.runs as r
            join pgflow.step_states as ss on ss.run_id = r.run_id
            join pgflow.step_tasks as t on t.run_id = ss.run_id and t.step_slug = ss.step_slug
            join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
            join pgflow.flows as f on f.flow_slug = t.flow_slug
           where r.status = 'started'
             and ss.status = 'started'
             and t.status = 'started'
             and t.permanently_stalled_at is null
             and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout)::bigint + 30)
         ) as c;

  for v_queue in
    -- Locked by address and re-checked (FOR UPDATE SKIP LOCKED): a task changed since the scan (completed, failed,
    -- released) has a new address and is left alone, as is one another transaction holds; a later call sees it.
    with stalled as (
      select l.row_address
        from unnest(v_requeue) as k (row_address)
        cross join lateral (
          select t.ctid as row_address
            from pgflow.step_tasks as t
           where t.ctid = k.row_address
             and t.status = 'started'
             and t.permanently_stalled_at is null
             for update of t skip locked) as l
    ),
    requeued as (
      update pgflow.step_tasks as t
         set status = 'queued',
             started_at = null,
             last_worker_id = null,
             requeued_count = t.requeued_count + 1,
             last_requeued_at = now()
       where t.ctid = any (array(select st.row_address from stalled as st))
      returning t.queue_name, t.message_id
    )
    select rq.queue_name,
           count(*)::integer as n,
           array_agg(rq.message_id order by rq.message_id) filter (where rq.message_id is not null) as msg_ids
      from requeued as rq
     group by rq.queue_name
     order by rq.queue_name
  loop
    v_requeued := v_requeued + v_queue.n;
    if v_queue.msg_ids is not null then
      perform pgflow._make_task_messages_visible(v_queue.queue_name, v_queue.msg_ids,
                                                 array_fill(0, array[cardinality(v_queue.msg_ids)]));
    end if;
  end loop;

  for v_task in
    select g.run_id, g.step_slug, g.task_index, g.requeued_count, g.timeout_seconds
      from unnest(v_gu_runs, v_gu_steps, v_gu_indexes, v_gu_counts, v_gu_timeouts)
             as g (run_id, step_slug, task_index, requeued_count, timeout_seconds)
  loop
    -- Lock the run first, like complete_task and fail_task, then re-check: a callback may have won meanwhile.
    perform 1 from pgflow.runs as r where r.run_id = v_task.run_id for update;

    update pgflow.step_tasks as t
       set permanently_stalled_at = now()
     where t.run_id = v_task.run_id
       and t.step_slug = v_task.step_slug
       and t.task_index = v_task.task_index
       and t.status = 'started'
       and t.permanently_stalled_at is null
       and t.started_at < now() - make_interval(secs => v_task.timeout_seconds::bigint + 30);

    if found then
      perform pgflow.fail_task(
        v_task.run_id, v_task.step_slug, v_task.task_index,
        format('Task stalled: not finished within its timeout (%s s) + 30 s after %s requeues; given up by requeue_stalled_tasks',
               v_task.timeout_seconds, v_task.requeued_count));
    end if;
  end loop;

  return v_requeued;
end;
$$;

comment on function pgflow.requeue_stalled_tasks() is $doc$
pgflow.requeue_stalled_tasks() guarantees (run periodically by one worker per database, under an advisory lock;
safe to run concurrently with itself and with callbacks):
  * a task is stalled when it is 'started', not given up, its run and step are still 'started', and it started
    more than the effective step timeout (steps.opt_timeout, else flows.opt_timeout) + 30 seconds ago (upstream
    pgflow used only the flow timeout);
  * a stalled task requeued fewer than 3 times goes back to 'queued' (started_at and last_worker_id cleared,
    requeued_count + 1, last_requeued_at now; attempts_count kept) and its message becomes visible at once,
    in the queue the task stored (step_tasks.queue_name; one pgflow._make_task_messages_visible call per queue:
    a message deleted at the claim, flows.message_retention 'delete', is sent again and the task stores the new
    message_id);
    rows locked by someone else are skipped (FOR UPDATE SKIP LOCKED) and picked up on a later call;
  * a stalled task already requeued 3 times is given up: permanently_stalled_at is set and it fails through
    the ordinary failure path, pgflow.fail_task, as an exhausted task, so its step and run fail, or the step is
    skipped per when_exhausted (upstream pgflow left such runs 'started' forever);
  * returns the number of tasks requeued (not counting the ones given up);
  * its cost follows the runs in progress (v0.20.0: 'started' runs found through idx_runs_status, their step
    states and tasks by primary key), not the history of the tables;
  * any timeout the tables accept works, up to 2147483647 s: the threshold is computed in bigint, so one flow
    with an absurd timeout cannot make every call fail with "integer out of range" (v0.17.0 did).
$doc$;
