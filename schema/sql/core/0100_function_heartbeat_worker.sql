create or replace function pgflow.heartbeat_worker(worker_id uuid, listener_pid integer default null)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_deprecated boolean;
  v_queue text;
begin
  if heartbeat_worker.listener_pid <= 0 then
    raise exception using
      errcode = '22023',
      message = format('listener_pid %s is not a server process id', heartbeat_worker.listener_pid),
      hint = 'Pass pg_backend_pid() of the session that listens on the worker''s channel, or NULL when none does.';
  end if;

  -- Every heartbeat restates where the worker listens on its own channel, so a worker that lost its LISTEN
  -- connection stops being woken alone at its next heartbeat even if it could not say so at once, and pgflow's
  -- one-argument callers (which know nothing of that channel) always count as not listening. listens_at starts
  -- again with a new listening session: it tells since when the current one has listened.
  update pgflow.workers as w
  set last_heartbeat_at = c.ts,
      listens_at = case
                     when heartbeat_worker.listener_pid is null then null
                     when w.listener_pid = heartbeat_worker.listener_pid then w.listens_at
                     else c.ts
                   end,
      listener_pid = heartbeat_worker.listener_pid
  from (select clock_timestamp() as ts) as c
  where w.worker_id = heartbeat_worker.worker_id
  returning w.deprecated_at is not null, w.queue_name into v_deprecated, v_queue;

  if not found then
    raise exception using
      errcode = 'P0002',
      message = format('Worker %s is not registered', heartbeat_worker.worker_id),
      hint = 'Call pgflow.register_worker(worker_id, queue_name, function_name) first.';
  end if;

  -- A worker killed without stopping (SIGKILL, a crash, an OOM kill) keeps a recent heartbeat for up to 30 s, and
  -- pgflow._wake_queue would keep choosing it; its wakes would be lost. Its LISTEN session ended with it, so the
  -- heartbeats of the queue's other workers forget listening sessions that no longer exist: within one heartbeat
  -- interval of any survivor, the dead worker is no longer woken alone. Checked here, every few seconds per
  -- worker, and not in _wake_queue: the first pg_stat_get_activity call of a transaction copies every backend's
  -- status (100-280 us). Under READ COMMITTED the update re-checks a row that a concurrent heartbeat changed, so a
  -- worker that has just reported its new session keeps it.
  update pgflow.workers as o
     set listens_at = null,
         listener_pid = null
   where o.queue_name = v_queue
     and o.worker_id <> heartbeat_worker.worker_id
     and o.listener_pid is not null
     and not exists (select from pg_catalog.pg_stat_get_activity(o.listener_pid) as a);

  return v_deprecated;
end;
$$;

comment on function pgflow.heartbeat_worker(worker_id uuid, listener_pid integer) is $doc$
pgflow.heartbeat_worker(worker_id, listener_pid => NULL) guarantees: records that the worker is alive
(last_heartbeat_at = clock_timestamp()) and returns true when the worker has been deprecated and should finish its
in-flight work and exit, false otherwise. An unregistered worker_id raises (SQLSTATE P0002) naming the id, so the
worker can register again instead of heartbeating into nothing.
Since v0.20.0 it also records whether, and in which session, the worker listens on its own channel
'pgflow:w:<worker_id>' now (see pgflow._wake_queue): listener_pid is the server process id (pg_backend_pid()) of
the session whose LISTEN on that channel is in effect, NULL when there is none. It is stored in listener_pid;
listens_at keeps its value while the pid stays the same and is set to the same clock_timestamp() otherwise (since
when the current listening session has listened, as the heartbeats report); NULL, and pgflow's one-argument call,
set both to NULL. A listener_pid of 0 or less raises 22023 naming the value and changes nothing.
It also forgets the listening sessions of the same queue's other workers that no longer exist (listener_pid not
in pg_stat_activity: the worker was killed or lost its connection without saying so): their listens_at and
listener_pid become NULL, so pgflow._wake_queue stops choosing them. Needs EXECUTE on
pg_catalog.pg_stat_get_activity (PUBLIC has it by default), which shows every session's pid to every role. A pid
reused by a new session keeps a dead worker counted as listening until its heartbeat is 30 s old. The same id and
row as before v0.20.0; the second argument is optional, so pgflow's heartbeat_worker(worker_id) calls keep working
unchanged.
$doc$;
