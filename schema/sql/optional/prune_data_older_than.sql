-- Optional maintenance snippet for pgflow-go schema v0.17.0, NOT installed by migrations. Install it by hand
-- (psql -f, or `pgflow snippet print prune | psql`) and run it on a schedule of your choice.
--
-- Replacing an installed copy (for example when upgrading from v0.16.0, whose copy deletes messages from the
-- queue named after the flow): run this file again; `create or replace` swaps the function in place and keeps
-- its grants. If you customised your copy, apply your changes to this version yourself: nothing checks or merges
-- customised copies.
--
-- pgflow.prune_data_older_than(retention_interval) guarantees, with cutoff = now() - retention_interval:
--   * workers whose last heartbeat is older than the cutoff are deleted (tasks keep running; their
--     last_worker_id becomes NULL);
--   * runs that completed or failed before the cutoff are deleted with all their step states and tasks; the
--     queue messages those tasks still have are deleted first, from the queue each task stored
--     (step_tasks.queue_name), one batch pgmq.delete call per queue; runs still 'started' are kept however old;
--   * archived messages archived before the cutoff are deleted from the archives of the flows' persisted routes
--     (the distinct steps.queue_name) that PGMQ lists (pgmq.list_queues()); a route whose queue is not listed is
--     skipped. This is the one direct use of PGMQ archive tables (PGMQ has no "delete archived older than"
--     function; the table name comes from pgmq.format_table_name);
--   * everything happens in the caller's transaction; flows, steps and queues are never touched.
-- A retention_interval of NULL or below zero raises an error naming the value.
create or replace function pgflow.prune_data_older_than(retention_interval interval)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_cutoff timestamptz;
  v_queue  record;
  v_runs   uuid[];
begin
  if retention_interval is null or retention_interval < interval '0' then
    raise exception 'prune_data_older_than: retention_interval must be zero or positive, got %',
      coalesce(retention_interval::text, 'NULL');
  end if;
  v_cutoff := now() - retention_interval;

  delete from pgflow.workers as w where w.last_heartbeat_at < v_cutoff;

  select coalesce(array_agg(r.run_id), '{}') into v_runs
    from pgflow.runs as r
   where r.status in ('completed', 'failed')
     and (r.completed_at < v_cutoff or r.failed_at < v_cutoff);

  for v_queue in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as msg_ids
      from pgflow.step_tasks as t
     where t.run_id = any (v_runs)
       and t.message_id is not null
     group by t.queue_name
     order by t.queue_name
  loop
    perform pgmq.delete(v_queue.queue_name, v_queue.msg_ids);
  end loop;

  delete from pgflow.step_tasks as t where t.run_id = any (v_runs);
  delete from pgflow.step_states as ss where ss.run_id = any (v_runs);
  delete from pgflow.runs as r where r.run_id = any (v_runs);

  for v_queue in
    select distinct s.queue_name
      from pgflow.steps as s
     where exists (select 1 from pgmq.list_queues() as q where lower(q.queue_name) = s.queue_name)
     order by s.queue_name
  loop
    execute format('delete from pgmq.%I as a where a.archived_at < $1',
                   pgmq.format_table_name(v_queue.queue_name, 'a'))
      using v_cutoff;
  end loop;
end;
$$;
