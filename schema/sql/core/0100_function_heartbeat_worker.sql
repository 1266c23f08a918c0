create or replace function pgflow.heartbeat_worker(worker_id uuid, listening boolean default false)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_deprecated boolean;
begin
  -- Every heartbeat restates whether the worker listens on its own channel, so a worker that lost its LISTEN
  -- connection stops being woken alone at its next heartbeat even if it could not say so at once, and pgflow's
  -- one-argument callers (which know nothing of that channel) always count as not listening.
  update pgflow.workers as w
  set last_heartbeat_at = c.ts,
      listens_at = case when heartbeat_worker.listening then coalesce(w.listens_at, c.ts) end
  from (select clock_timestamp() as ts) as c
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

comment on function pgflow.heartbeat_worker(worker_id uuid, listening boolean) is $doc$
pgflow.heartbeat_worker(worker_id, listening => false) guarantees: records that the worker is alive
(last_heartbeat_at = clock_timestamp()) and returns true when the worker has been deprecated and should finish its
in-flight work and exit, false otherwise. An unregistered worker_id raises (SQLSTATE P0002) naming the id, so the
worker can register again instead of heartbeating into nothing.
Since v0.20.0 it also records whether the worker listens on its own channel 'pgflow:w:<worker_id>' now (see
pgflow._wake_queue): listening true keeps listens_at when it is set and sets it to the same clock_timestamp()
otherwise (listens_at = since when the worker has listened without interruption, as its heartbeats report);
listening false or NULL, and pgflow's one-argument call, set listens_at to NULL. A worker says true only while its
LISTEN on that channel is in effect. The same id and row as before v0.20.0; the second argument is optional, so
pgflow's heartbeat_worker(worker_id) calls keep working unchanged.
$doc$;
