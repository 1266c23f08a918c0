-- Optional maintenance snippet, NOT installed by migrations. Install it by hand (psql -f, or
-- `pgflow snippet print prune | psql`) and run it on a schedule of your choice.
--
-- pgflow.prune_data_older_than(retention_interval) guarantees, with cutoff = now() - retention_interval:
--   * workers whose last heartbeat is older than the cutoff are deleted (tasks keep running; their
--     last_worker_id becomes NULL);
--   * runs that completed or failed before the cutoff are deleted with all their step states and tasks; the
--     queue messages those tasks still have are deleted from the flow's queue first; runs still 'started' are
--     kept however old;
--   * archived messages (pgmq.a_<flow>) archived before the cutoff are deleted for every flow whose archive
--     table exists (the other direct use of PGMQ tables: PGMQ has no "delete archived older than" function);
--   * everything happens in the caller's transaction; flows, steps and queues are never touched.
-- A retention_interval of NULL or below zero raises an error naming the value.
create or replace function pgflow.prune_data_older_than(retention_interval interval)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_cutoff  timestamptz;
  v_flow    record;
  v_archive text;
  v_runs    uuid[];
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

  for v_flow in
    select t.flow_slug, array_agg(t.message_id order by t.message_id) as msg_ids
      from pgflow.step_tasks as t
     where t.run_id = any (v_runs)
       and t.message_id is not null
     group by t.flow_slug
  loop
    perform pgmq.delete(v_flow.flow_slug, v_flow.msg_ids);
  end loop;

  delete from pgflow.step_tasks as t where t.run_id = any (v_runs);
  delete from pgflow.step_states as ss where ss.run_id = any (v_runs);
  delete from pgflow.runs as r where r.run_id = any (v_runs);

  for v_flow in select f.flow_slug from pgflow.flows as f order by f.flow_slug loop
    v_archive := pgmq.format_table_name(v_flow.flow_slug, 'a');
    if to_regclass(format('pgmq.%I', v_archive)) is not null then
      execute format('delete from pgmq.%I as a where a.archived_at < $1', v_archive) using v_cutoff;
    end if;
  end loop;
end;
$$;
