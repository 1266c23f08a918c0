create or replace function pgflow.register_worker(worker_id uuid, queue_name text, function_name text)
returns pgflow.workers
language sql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  insert into pgflow.workers as w (worker_id, queue_name, function_name, started_at, last_heartbeat_at)
  values (
    register_worker.worker_id, register_worker.queue_name, register_worker.function_name,
    clock_timestamp(), clock_timestamp()
  )
  on conflict on constraint workers_pkey do update set
    queue_name = excluded.queue_name,
    function_name = excluded.function_name,
    started_at = excluded.started_at,
    last_heartbeat_at = excluded.last_heartbeat_at,
    deprecated_at = null,
    stopped_at = null,
    listens_at = null,
    listener_pid = null
  returning w.*;
$$;

comment on function pgflow.register_worker(worker_id uuid, queue_name text, function_name text) is $doc$
pgflow.register_worker(worker_id, queue_name, function_name) guarantees: a workers row for worker_id exists
afterwards and describes a live worker: queue_name and function_name as given, started_at and
last_heartbeat_at = clock_timestamp(), deprecated_at and stopped_at NULL (registering again starts a new life
of the same id), and listens_at and listener_pid NULL (since v0.20.0: a new life does not listen on its own channel until
its heartbeat says so, pgflow.heartbeat_worker(worker_id, listener_pid => pid)). Returns the row. Must run before the
worker claims tasks (step_tasks.last_worker_id references it).
$doc$;
