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
  constraint workers_pkey primary key (worker_id)
);

create index idx_workers_queue_name on pgflow.workers (queue_name);
create index idx_workers_heartbeat on pgflow.workers (last_heartbeat_at);

-- pgflow._wake_queue's lookup of a queue's alive workers (v0.20.0): rows of stopped and deprecated workers pile up
-- until they are pruned, so only the others are indexed, by queue and heartbeat.
create index idx_workers_alive on pgflow.workers (queue_name, last_heartbeat_at)
  where stopped_at is null and deprecated_at is null;
