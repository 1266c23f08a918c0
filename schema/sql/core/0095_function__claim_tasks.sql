create or replace function pgflow._claim_tasks(p_flow_slug text, p_queue_name text, p_msg_ids bigint[], p_worker_id uuid)
returns table (row_address tid, message_id bigint, vt_offset integer, delete_message boolean)
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_rows tid[];
begin
  -- Every statement below finds rows by key: one unique-index lookup per message id, then the rows themselves by
  -- physical address. A join of the id set to step_tasks, or a status condition the planner could answer from a
  -- partial index, lets stale statistics (say, analyzed before a burst of queued tasks) turn the claim into a
  -- nested loop over every queued task: quadratic, 100 ms per claim of 100 tasks with 5,000 queued.
  v_rows := array(
    select t.row_address
      from (select distinct m.id from unnest(p_msg_ids) as m (id)) as m
      cross join lateral (
        select t.ctid as row_address
          from pgflow.step_tasks as t
         where t.queue_name = p_queue_name
           and t.message_id = m.id
         limit 1) as t);  -- the key is unique; LIMIT keeps the planner from turning the lookups into a join

  return query
    -- Re-checked under the row lock (FOR UPDATE SKIP LOCKED: never waits, so no lock order is needed): a row that
    -- changed since the lookup has a new address and is left to whoever changed it.
    with candidates as (
      select l.row_address
        from unnest(v_rows) as k (row_address)
        cross join lateral (
          select t.ctid as row_address
            from pgflow.step_tasks as t
           where t.ctid = k.row_address
             and t.queue_name = p_queue_name
             and t.message_id = any (p_msg_ids)
             and t.flow_slug = p_flow_slug
             and t.status = 'queued'
             and (select r.status from pgflow.runs as r where r.run_id = t.run_id) = 'started'
             and (select ss.status
                    from pgflow.step_states as ss
                   where ss.run_id = t.run_id and ss.step_slug = t.step_slug) = 'started'
             for update of t skip locked) as l
    ),
    claimed as (
      update pgflow.step_tasks as t
         set status = 'started',
             attempts_count = t.attempts_count + 1,
             started_at = now(),
             last_worker_id = p_worker_id
       where t.ctid = any (array(select c.row_address from candidates as c))
      returning t.ctid as row_address, t.flow_slug, t.step_slug, t.message_id
    ),
    -- The definitions once per call, not once per task (v0.20.0): the flow's row (every claimed task is of
    -- p_flow_slug) and the timeout of each step claimed, one lookup per step (LIMIT keeps it a lookup), gathered in
    -- a JSON object that each task reads by slug (a binary search: no join of the tasks against the steps).
    -- MATERIALIZED: one row, computed once, whatever the plan puts on either side of the join below.
    definitions as materialized (
      select f.opt_timeout as flow_timeout,
             f.message_retention = 'delete' as delete_message,
             (select jsonb_object_agg(k.step_slug, s.opt_timeout)
                from (select distinct c.step_slug from claimed as c) as k
                cross join lateral (
                  select s.opt_timeout from pgflow.steps as s
                   where s.flow_slug = p_flow_slug and s.step_slug = k.step_slug limit 1) as s) as step_timeouts
        from pgflow.flows as f
       where f.flow_slug = p_flow_slug
    )
    select c.row_address,
           c.message_id,
           least(coalesce((d.step_timeouts ->> c.step_slug)::integer, d.flow_timeout), 2147483645) + 2,
           d.delete_message
      from claimed as c
      cross join definitions as d;
end;
$$;

comment on function pgflow._claim_tasks(p_flow_slug text, p_queue_name text, p_msg_ids bigint[], p_worker_id uuid) is $doc$
pgflow._claim_tasks(p_flow_slug, p_queue_name, p_msg_ids, p_worker_id) guarantees (v0.20.0): the claim of
start_tasks and read_and_start_tasks, defined once. It claims exactly the tasks whose stored identity
(step_tasks.queue_name, message_id) is (p_queue_name, one of p_msg_ids) - p_queue_name in its canonical lower
case -, that belong to p_flow_slug, are 'queued', and whose run and step are 'started': each becomes 'started'
(attempts_count + 1, started_at now, last_worker_id = p_worker_id). Every other task is left untouched. A task is
claimed at most once: rows are locked with FOR UPDATE SKIP LOCKED and re-checked, so of two concurrent calls each
task goes to one caller only. No PGMQ row is read or changed here. Returns one row per claimed task: its physical
address (valid until the caller's transaction ends), its message id, the visibility its message needs, the
effective step timeout + 2 seconds (at most 2147483647), and whether the message is to be deleted instead
(v0.20.0: the flow's message_retention is 'delete'). Its cost grows with the number of ids only: each id is
looked up by the unique key, each row locked and updated by its address; the definitions are read once per
call (the flow) and once per step claimed, not once per task.
$doc$;
