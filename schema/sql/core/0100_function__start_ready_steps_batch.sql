create or replace function pgflow._start_ready_steps_batch(
  run_ids            uuid[],
  started_run_ids    uuid[] default null,
  started_step_slugs text[] default null
)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_runs   uuid[];
  v_slugs  text[];
  v_flows  text[];
  v_queues text[];
  v_delays integer[];
  v_counts integer[];
  v_live   uuid[];
begin
  if coalesce(cardinality(_start_ready_steps_batch.run_ids), 0) = 0
     and coalesce(cardinality(_start_ready_steps_batch.started_run_ids), 0) = 0 then
    return;
  end if;

  -- Every table is filtered with "= any (array)" on its key, never joined to a set of ids: with statistics that
  -- do not know a backlog of thousands of started runs, a join can turn into a nested loop over all of them.
  -- "(status = ...) is true" keeps the status test out of the index conditions: the run is looked up by its primary
  -- key, never through idx_runs_status, which statistics taken while few runs were started make look cheaper and
  -- which then reads every started run for each id.
  v_live := array(
    select r.run_id from pgflow.runs as r
     where r.run_id = any (_start_ready_steps_batch.run_ids) and (r.status = 'started') is true);

  with started as (
    update pgflow.step_states as ss
       set status = 'started',
           started_at = now(),
           remaining_tasks = ss.initial_tasks
     where ss.run_id = any (v_live)
       and ss.status = 'created'
       and ss.remaining_deps = 0
       and ss.initial_tasks > 0
    returning ss.flow_slug, ss.run_id, ss.step_slug, ss.initial_tasks
  ),
  already_started as (
    -- One primary-key lookup per pair (LIMIT keeps the planner from turning the lookups into a join).
    select ss.*
      from unnest(_start_ready_steps_batch.started_run_ids, _start_ready_steps_batch.started_step_slugs)
             as k (run_id, step_slug)
      cross join lateral (
        select x.flow_slug, x.run_id, x.step_slug, x.initial_tasks
          from pgflow.step_states as x
         where x.run_id = k.run_id and x.step_slug = k.step_slug
         limit 1) as ss
  ),
  steps as (
    -- Each state's step by key (LIMIT keeps it a lookup): as a join, a plan of nested loops may read every step of
    -- every flow and scan the states again for each one.
    select st.*, s.step_index, s.queue_name, coalesce(s.opt_start_delay, 0) as start_delay
      from (select * from started union all select * from already_started) as st
      cross join lateral (
        select s.step_index, s.queue_name, s.opt_start_delay from pgflow.steps as s
         where s.flow_slug = st.flow_slug and s.step_slug = st.step_slug
         limit 1) as s
  )
  select array_agg(x.run_id order by x.run_id, x.step_index),
         array_agg(x.step_slug order by x.run_id, x.step_index),
         array_agg(x.flow_slug order by x.run_id, x.step_index),
         array_agg(x.queue_name order by x.run_id, x.step_index),
         array_agg(x.start_delay order by x.run_id, x.step_index),
         array_agg(x.initial_tasks order by x.run_id, x.step_index)
    into v_runs, v_slugs, v_flows, v_queues, v_delays, v_counts
    from steps as x;

  if v_runs is null then
    return;
  end if;
  perform pgflow._send_step_tasks(v_runs, v_slugs, v_flows, v_queues, v_delays, v_counts);
end;
$$;

comment on function pgflow._start_ready_steps_batch(run_ids uuid[], started_run_ids uuid[], started_step_slugs text[]) is $doc$
pgflow._start_ready_steps_batch(run_ids, started_run_ids, started_step_slugs) guarantees: for every run of run_ids
exactly what pgflow.start_ready_steps(run_id) guarantees, done set-based:
  * only runs that are 'started' are touched; NULL or empty run_ids do nothing;
  * every step state of those runs that is 'created' with remaining_deps 0 and initial_tasks > 0 becomes
    'started' (started_at now, remaining_tasks = initial_tasks), exactly once even when called concurrently
    (one UPDATE starts them all);
  * step:started is emitted per started step, ordered by run_id, then step_index;
  * one message per task {"flow_slug", "run_id", "step_slug", "task_index"} goes to the step's queue
    (steps.queue_name), delayed by the step's opt_start_delay seconds (NULL = 0), with one pgmq.send_batch call
    per (queue, delay) for all the runs together, and one 'queued' step_tasks row per message is written with
    its message_id and that queue_name (task_index 0 .. initial_tasks-1, paired with the message carrying that
    index); no queue is created here (no DDL);
  * after sending undelayed messages to a queue, pgflow._wake_queue wakes its workers with payload '': one alive
    worker of the queue on 'pgflow:w:<worker_id>' (v0.20.0), or every listener of 'pgflow:queue:<queue_name>'
    when the queue has none (at commit; identical notifications of a transaction are folded); after sending
    delayed ones, pgflow._wake_queue (pgflow._notify_queue_visible_at) announces when they become visible, one {"visible_at": ...} per
    queue and delay (v0.20.0);
  * steps with initial_tasks NULL or 0 are never started here, and conditions are not evaluated here (as in
    start_ready_steps);
  * the step states named by the pairs (started_run_ids[i], started_step_slugs[i]) were made 'started' by the
    caller in this transaction (in the same row version that made them ready, one row version fewer than
    'created' -> ready -> 'started'): they get exactly what a step started here gets - its step:started event in
    the same order, its messages and tasks - and are not updated again. NULL arrays name none.
$doc$;
