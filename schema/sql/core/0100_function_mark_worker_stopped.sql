-- pgflow.mark_worker_stopped(worker_id) guarantees: the worker is recorded as gone after a graceful shutdown:
-- stopped_at and last_heartbeat_at become clock_timestamp(), and deprecated_at is set too unless an operator set it
-- earlier (so no keep-alive logic counts the worker as alive). An unknown worker_id changes nothing.
create or replace function pgflow.mark_worker_stopped(worker_id uuid)
returns void
language sql
volatile
set search_path = ''
as $$
  update pgflow.workers as w
  set stopped_at = clock_timestamp(),
      last_heartbeat_at = clock_timestamp(),
      deprecated_at = coalesce(w.deprecated_at, clock_timestamp())
  where w.worker_id = mark_worker_stopped.worker_id;
$$;
