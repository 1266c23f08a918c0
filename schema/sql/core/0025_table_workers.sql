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
