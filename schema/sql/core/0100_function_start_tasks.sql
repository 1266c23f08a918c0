create or replace function pgflow.start_tasks(
  flow_slug  text,
  msg_ids    bigint[],
  worker_id  uuid,
  queue_name text default null
)
returns setof pgflow.step_task_record
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
  v_queue_name text;
  v_claimed    tid[];
  v_ids        bigint[];
  v_offsets    integer[];
  v_deleted    bigint[];
begin
  if start_tasks.msg_ids is null or cardinality(start_tasks.msg_ids) = 0 then
    return;
  end if;

  v_queue_name := lower(coalesce(start_tasks.queue_name, pgflow._default_queue_name(start_tasks.flow_slug)));

  select array_agg(c.row_address),
         array_agg(c.message_id order by c.message_id) filter (where not c.delete_message),
         array_agg(c.vt_offset order by c.message_id) filter (where not c.delete_message),
         array_agg(c.message_id order by c.message_id) filter (where c.delete_message)
    into v_claimed, v_ids, v_offsets, v_deleted
    from pgflow._claim_tasks(start_tasks.flow_slug, v_queue_name, start_tasks.msg_ids, start_tasks.worker_id) as c;
  if v_claimed is null then
    return;
  end if;

  perform pgflow.set_vt_batch(v_queue_name, v_ids, v_offsets);
  if v_deleted is not null then
    perform pgmq.delete(v_queue_name, v_deleted);
  end if;

  return query
    select r.flow_slug, r.run_id, r.step_slug, r.input, r.message_id, r.task_index, r.flow_input
      from pgflow._claimed_task_records(v_claimed) as r
     order by r.message_id;
end;
$$;

comment on function pgflow.start_tasks(flow_slug text, msg_ids bigint[], worker_id uuid, queue_name text) is $doc$
pgflow.start_tasks(flow_slug, msg_ids, worker_id, queue_name) guarantees (phase 2 of polling, after pgmq.read*):
  * queue_name is the queue the worker actually read msg_ids from; NULL (a v0.16.0 worker calling with three
    arguments) means the flow's default queue, pgflow._default_queue_name(flow_slug). It is compared in lower
    case, the canonical form tasks store;
  * claims exactly the tasks whose stored identity (step_tasks.queue_name, message_id) is (that queue, one of
    msg_ids), that belong to flow_slug, are 'queued', and whose run and step are 'started'; each claimed task
    becomes 'started' (attempts_count + 1, started_at now, last_worker_id = worker_id, which must be a row of
    pgflow.workers). The message body is never read: it does not authorise a claim;
  * everything else named in msg_ids is left untouched - a task that is already started (not claimed again, no
    attempt consumed), terminal or otherwise ineligible, a task of another flow, or an id no task has in that
    queue: no row changes, no message is archived, deleted or made visible earlier or later;
  * a task is claimed at most once: rows are locked with FOR UPDATE SKIP LOCKED and re-checked, so of two
    concurrent calls naming the same ids each task goes to one caller only, and only rows this call actually
    claimed are returned. No PGMQ row is locked. (The claim is pgflow._claim_tasks, shared with
    read_and_start_tasks; the returned columns come from pgflow._claimed_task_records.);
  * every claimed message's visibility is set to the effective step timeout (steps.opt_timeout, else
    flows.opt_timeout) + 2 seconds from now, at most 2147483647 s (a timeout near the integer limit cannot make
    the claim fail with "integer out of range", as in v0.17.0), in the queue the task stored, which is queue_name
    (one set_vt_batch call); when the flow's message_retention is 'delete' (v0.20.0), the claimed messages are
    deleted instead (one pgmq.delete call);
  * returns one step_task_record per claimed task, ordered by msg_id: input = the element task_index of the run
    input (root map), of the dependency's stored output (dependent map), or {<dep_slug>: <output>} over the
    completed dependencies ({} for root steps); flow_input = the run input for single steps without
    dependencies, NULL otherwise;
  * the cost of a claim grows with the number of msg_ids only, never with the number of queued tasks, whatever the
    planner's statistics say: each id is looked up by the unique key (queue_name, message_id) and each row is then
    locked and updated by its physical address (since v0.19.0; stale statistics made v0.18.0 quadratic);
  * NULL or empty msg_ids claim nothing and return nothing.
$doc$;
