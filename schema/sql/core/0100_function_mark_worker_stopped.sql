create or replace function pgflow.mark_worker_stopped(worker_id uuid)
returns void
language sql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  update pgflow.workers as w
  set stopped_at = c.ts,
      last_heartbeat_at = c.ts,
      deprecated_at = coalesce(w.deprecated_at, c.ts)
  from (select clock_timestamp() as ts) as c
  where w.worker_id = mark_worker_stopped.worker_id;
$$;

comment on function pgflow.mark_worker_stopped(worker_id uuid) is $doc$
pgflow.mark_worker_stopped(worker_id) guarantees: the worker is recorded as gone after a graceful shutdown:
stopped_at and last_heartbeat_at become one and the same clock_timestamp(), and deprecated_at is set to it too
unless an operator set it earlier (so no keep-alive logic counts the worker as alive). An unknown worker_id
changes nothing.
$doc$;
