create or replace function pgflow.poll_for_tasks(
  queue_name       text,
  vt               integer,
  qty              integer,
  max_poll_seconds integer default 5,
  poll_interval_ms integer default 100
)
returns setof pgflow.step_task_record
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
begin
  raise notice 'pgflow.poll_for_tasks is deprecated and returns no tasks (queue %): update the worker; it must read with pgmq.read_with_poll and claim with pgflow.start_tasks',
    poll_for_tasks.queue_name;
  return;
end;
$$;

comment on function pgflow.poll_for_tasks(queue_name text, vt integer, qty integer, max_poll_seconds integer, poll_interval_ms integer) is $doc$
pgflow.poll_for_tasks(...) guarantees: nothing. It is a deprecated stub kept so that very old workers calling it
get a NOTICE telling them to upgrade instead of an "undefined function" error; it returns no rows and changes
nothing. Current workers read with pgmq.read_with_poll and claim with pgflow.start_tasks.
$doc$;
