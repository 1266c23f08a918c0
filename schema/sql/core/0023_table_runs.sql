-- pgflow.runs: one execution of a flow. remaining_steps counts the steps not yet completed or skipped; the run
-- completes when it reaches 0. A run is 'completed' or 'failed' at most once and never leaves that state.
create table pgflow.runs (
  run_id          uuid        not null default gen_random_uuid(),
  flow_slug       text        not null,
  status          text        not null default 'started',
  input           jsonb       not null,
  output          jsonb,
  remaining_steps int         not null default 0,
  started_at      timestamptz not null default now(),
  completed_at    timestamptz,
  failed_at       timestamptz,
  constraint runs_pkey primary key (run_id),
  constraint runs_flow_slug_fkey foreign key (flow_slug) references pgflow.flows (flow_slug),
  constraint runs_remaining_steps_check check (remaining_steps >= 0),
  constraint status_is_valid check (status in ('started', 'failed', 'completed')),
  constraint completed_at_or_failed_at check (not (completed_at is not null and failed_at is not null)),
  constraint completed_at_is_after_started_at check (completed_at is null or completed_at >= started_at),
  constraint failed_at_is_after_started_at check (failed_at is null or failed_at >= started_at)
);

create index idx_runs_flow_slug on pgflow.runs (flow_slug);
create index idx_runs_status on pgflow.runs (status);
