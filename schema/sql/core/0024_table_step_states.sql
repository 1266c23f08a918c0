-- pgflow.step_states: the state of one step inside one run. remaining_deps counts dependencies not yet completed
-- or skipped (the step is ready at 0); remaining_tasks counts unfinished tasks once the step has started;
-- initial_tasks is the number of tasks the step gets (NULL for a dependent map until its parent completes).
create table pgflow.step_states (
  flow_slug       text        not null,
  run_id          uuid        not null,
  step_slug       text        not null,
  status          text        not null default 'created',
  remaining_tasks int,
  remaining_deps  int         not null default 0,
  created_at      timestamptz not null default now(),
  started_at      timestamptz,
  completed_at    timestamptz,
  failed_at       timestamptz,
  error_message   text,
  initial_tasks   int,
  output          jsonb,
  skip_reason     text,
  skipped_at      timestamptz,
  constraint step_states_pkey primary key (run_id, step_slug),
  -- No foreign key of its own from flow_slug to flows (pgflow has step_states_flow_slug_fkey): the one to steps
  -- below implies it (steps.flow_slug references flows), and every key checked costs an insert a query and a row
  -- lock (v0.20.0).
  constraint step_states_run_id_fkey foreign key (run_id) references pgflow.runs (run_id),
  -- No foreign key from (flow_slug, step_slug) to steps either (pgflow has step_states_flow_slug_step_slug_fkey,
  -- v0.20.0): step states are made only from the rows of steps, under the flow's lock, and
  -- pgflow._guard_definition_keys refuses to delete or rename a step that step states name (see 0023_table_runs).
  constraint step_states_remaining_deps_check check (remaining_deps >= 0),
  constraint step_states_initial_tasks_check check (initial_tasks is null or initial_tasks >= 0),
  constraint status_is_valid check (status in ('created', 'started', 'completed', 'failed', 'skipped')),
  constraint status_and_remaining_tasks_match check (status <> 'completed' or remaining_tasks = 0),
  constraint remaining_tasks_state_consistency check (
    remaining_tasks is null or status not in ('created', 'skipped')),
  constraint initial_tasks_known_when_started check (status <> 'started' or initial_tasks is not null),
  constraint output_only_for_completed_or_null check (output is null or status = 'completed'),
  constraint skip_reason_matches_status check (
    (status = 'skipped' and skip_reason is not null) or (status <> 'skipped' and skip_reason is null)),
  constraint completed_at_or_failed_at_or_skipped_at check (
    (case when completed_at is not null then 1 else 0 end
     + case when failed_at is not null then 1 else 0 end
     + case when skipped_at is not null then 1 else 0 end) <= 1),
  constraint started_at_is_after_created_at check (started_at is null or started_at >= created_at),
  constraint completed_at_is_after_started_at check (completed_at is null or completed_at >= started_at),
  constraint failed_at_is_after_started_at check (failed_at is null or failed_at >= started_at),
  constraint skipped_at_is_after_created_at check (skipped_at is null or skipped_at >= created_at)
);

-- Two indexes only, the primary key and flow_slug, whose columns no transition changes: a step state's start and
-- its completion are heap-only-tuple (HOT) updates where the page has room (v0.20.0), as a task's are (see
-- 0026_table_step_tasks). pgflow's idx_step_states_run_id (run_id) is left out since v0.19.0, its
-- idx_step_states_ready (run_id, status, remaining_deps) where created with no deps left, idx_step_states_failed
-- and idx_step_states_skipped (run_id, step_slug) where failed or skipped since v0.20.0: each names status (or
-- remaining_deps), which every transition changes, and every lookup they served is by run, which the primary key's
-- range of the run serves (docs/pgflow-differences.md).
create index idx_step_states_flow_slug on pgflow.step_states (flow_slug);

-- Room on each page for the versions a step state's start and completion write (see 0026_table_step_tasks).
alter table pgflow.step_states set (fillfactor = 70);
