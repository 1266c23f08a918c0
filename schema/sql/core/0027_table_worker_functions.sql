-- pgflow.worker_functions: hosted worker functions (Supabase Edge Functions) that pgflow's ensure_workers keeps
-- alive. Kept for API compatibility; pgflow-go's Go worker does not need it, but track_worker_function writes it.
create table pgflow.worker_functions (
  function_name   text        not null,
  enabled         boolean     not null default true,
  debounce        interval    not null default '6 seconds',
  last_invoked_at timestamptz,
  created_at      timestamptz not null default now(),
  updated_at      timestamptz not null default now(),
  constraint worker_functions_pkey primary key (function_name),
  constraint worker_functions_debounce_check check (debounce >= '1 second'::interval)
);

comment on table pgflow.worker_functions is
  'Worker functions that a keep-alive job may ping; one row per function name.';
comment on column pgflow.worker_functions.function_name is
  'Name of the hosted function that runs a worker.';
comment on column pgflow.worker_functions.enabled is
  'Whether the keep-alive job considers this function at all.';
comment on column pgflow.worker_functions.debounce is
  'Minimum time between two pings of this function; also the window in which a worker heartbeat counts as alive.';
comment on column pgflow.worker_functions.last_invoked_at is
  'When the keep-alive job last pinged this function; NULL if never.';
comment on column pgflow.worker_functions.created_at is
  'When the function was first tracked.';
comment on column pgflow.worker_functions.updated_at is
  'When a worker of this function last announced itself with track_worker_function.';
