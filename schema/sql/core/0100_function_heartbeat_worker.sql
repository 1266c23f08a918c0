create or replace function pgflow.heartbeat_worker(worker_id uuid)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_deprecated boolean;
begin
  update pgflow.workers as w
  set last_heartbeat_at = clock_timestamp()
  where w.worker_id = heartbeat_worker.worker_id
  returning w.deprecated_at is not null into v_deprecated;

  if not found then
    raise exception using
      errcode = 'P0002',
      message = format('Worker %s is not registered', heartbeat_worker.worker_id),
      hint = 'Call pgflow.register_worker(worker_id, queue_name, function_name) first.';
  end if;

  return v_deprecated;
end;
$$;

comment on function pgflow.heartbeat_worker(worker_id uuid) is $doc$
pgflow.heartbeat_worker(worker_id) guarantees: records that the worker is alive (last_heartbeat_at =
clock_timestamp()) and returns true when the worker has been deprecated and should finish its in-flight work and
exit, false otherwise. An unregistered worker_id raises (SQLSTATE P0002) naming the id, so the worker can
register again instead of heartbeating into nothing.
$doc$;
