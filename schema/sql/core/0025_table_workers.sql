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
  constraint workers_pkey primary key (worker_id)
);

create index idx_workers_queue_name on pgflow.workers (queue_name);
create index idx_workers_heartbeat on pgflow.workers (last_heartbeat_at);

-- pgflow._wake_queue's lookup of a queue's alive workers that listen on their own channel (v0.20.0): rows of
-- stopped, deprecated and non-listening workers (pgflow's TypeScript worker, older or PollOnly Go workers) are never
-- chosen, so only the others are indexed, by queue and heartbeat.
create index idx_workers_listening on pgflow.workers (queue_name, last_heartbeat_at)
  where stopped_at is null and deprecated_at is null and listens_at is not null;

comment on column pgflow.workers.listens_at is
  'Since when the worker has listened on its own channel pgflow:w:<worker_id>, as its heartbeats report (pgflow.heartbeat_worker(worker_id, listening => true)); NULL = it does not listen there (or does not say: pgflow''s TypeScript worker, a PollOnly or older Go worker, a Go worker whose LISTEN connection is down). Only such workers are woken alone by pgflow._wake_queue. A time rather than a boolean: it costs the same, stays NULL for every row written by pgflow''s own functions, and shows operators when a worker''s listener last (re)connected.';
