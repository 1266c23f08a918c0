-- pgflow.workers: live worker processes. A worker registers itself, heartbeats, and is asked to exit when
-- deprecated_at is set. Created before step_tasks, whose last_worker_id references it.
create table pgflow.workers (
  worker_id         uuid        not null,
  queue_name        text        not null,
  function_name     text        not null,
  started_at        timestamptz not null default now(),
  deprecated_at     timestamptz,
  last_heartbeat_at timestamptz not null default now(),
  stopped_at        timestamptz,
  listens_at        timestamptz,
  listener_pid      integer,
  constraint workers_pkey primary key (worker_id),
  constraint workers_listener_pid_with_listens_at check ((listens_at is null) = (listener_pid is null))
);

create index idx_workers_queue_name on pgflow.workers (queue_name);
create index idx_workers_heartbeat on pgflow.workers (last_heartbeat_at);

-- pgflow._wake_queue's lookup of a queue's alive workers that listen on their own channel (v0.20.0): rows of
-- stopped, deprecated and non-listening workers (pgflow's TypeScript worker, older or PollOnly Go workers) are never
-- chosen, so only the others are indexed, by queue and heartbeat.
create index idx_workers_listening on pgflow.workers (queue_name, last_heartbeat_at)
  where stopped_at is null and deprecated_at is null and listens_at is not null;

comment on column pgflow.workers.listens_at is
  'Since when the worker has listened on its own channel pgflow:w:<worker_id> from the session listener_pid, as its heartbeats report (pgflow.heartbeat_worker(worker_id, listener_pid => pid)); NULL = it does not listen there (or does not say: pgflow''s TypeScript worker, a PollOnly or older Go worker, a Go worker whose LISTEN connection is down). Only such workers are woken alone by pgflow._wake_queue. A time rather than a boolean: it costs the same, stays NULL for every row written by pgflow''s own functions, and shows operators when a worker''s listener last (re)connected.';

comment on column pgflow.workers.listener_pid is
  'The server process id (pg_backend_pid()) of the session in which the worker listens on its own channel, as its last heartbeat reported; NULL exactly when listens_at is NULL. pgflow._wake_queue wakes the worker alone only while that process exists (pg_stat_activity), so a worker that died without stopping (killed, crashed) is not chosen for the up to 30 s its last heartbeat still counts: its connection ends with it.';
