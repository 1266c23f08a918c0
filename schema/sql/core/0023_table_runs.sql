-- pgflow.runs: one execution of a flow. remaining_steps counts the steps not yet completed or skipped; the run
-- completes when it reaches 0. A run ends 'completed', 'failed' or 'cancelled' (v0.20.0, pgflow.cancel_run); only
-- pgflow.retry_run takes a failed or cancelled run back to 'started'. retry_of names the run a fresh retry re-ran.
create table pgflow.runs (
  run_id          uuid        not null default pgflow._new_run_id(),
  flow_slug       text        not null,
  status          text        not null default 'started',
  input           jsonb       not null,
  output          jsonb,
  remaining_steps int         not null default 0,
  started_at      timestamptz not null default now(),
  completed_at    timestamptz,
  failed_at       timestamptz,
  cancelled_at    timestamptz,
  cancel_reason   text,
  retry_of        uuid,
  constraint runs_pkey primary key (run_id),
  -- No foreign key from flow_slug to flows (pgflow has runs_flow_slug_fkey; v0.20.0, with the keys to the definitions
  -- of step_states and step_tasks): a key checks every inserted row with a query and a row lock on the flow, which
  -- every concurrent start shares (a new MultiXact each). pgflow._guard_definition_keys (0095) keeps what the key
  -- kept: start_flow(s) refuses an unknown flow with the key's error and locks the flow once per call, and a flow
  -- with runs cannot be deleted, renamed or truncated away.
  constraint runs_remaining_steps_check check (remaining_steps >= 0),
  constraint status_is_valid check (status in ('started', 'failed', 'completed', 'cancelled')),
  constraint completed_at_or_failed_at check (not (completed_at is not null and failed_at is not null)),
  constraint completed_at_is_after_started_at check (completed_at is null or completed_at >= started_at),
  constraint failed_at_is_after_started_at check (failed_at is null or failed_at >= started_at),
  constraint cancelled_at_is_after_started_at check (cancelled_at is null or cancelled_at >= started_at),
  constraint cancelled_at_only_when_cancelled check (cancelled_at is null or status = 'cancelled')
);

-- Run listings (newest first, keyset on (started_at, run_id); by flow, by status, or all runs) read one index range
-- and stop after the page (v0.20.0). pgflow's idx_runs_flow_slug (flow_slug) and idx_runs_status (status) keep
-- their names and leading column, so every lookup they served still uses them, and gain (started_at, run_id).
-- Write cost: flow_slug, started_at and run_id never change, so the frequent remaining_steps updates stay HOT as
-- far as these indexes go; status was indexed already, so a status change costs what it did. The one extra cost
-- is idx_runs_started_at's entry per started run (and some bytes per entry), against listing pages that would
-- otherwise sort every run of a flow or status (or every run) for each page.
create index idx_runs_flow_slug on pgflow.runs (flow_slug, started_at, run_id);
create index idx_runs_status on pgflow.runs (status, started_at, run_id);
create index idx_runs_started_at on pgflow.runs (started_at, run_id);
