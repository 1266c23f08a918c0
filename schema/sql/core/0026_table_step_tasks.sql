-- pgflow.step_tasks: units of work. A single step has one task (task_index 0), a map step one per array element.
-- A task ends 'completed', 'failed' or 'cancelled' (v0.20.0: its run failed or was cancelled before it finished).
-- A queued task's message identity is (queue_name, message_id): queue_name is a snapshot of the step's queue_name
-- taken when the task is created, and every later message operation on the task uses it. message_id stays NULL for
-- a task without a message; (queue_name, message_id) is unique among tasks that have one.
create table pgflow.step_tasks (
  flow_slug              text        not null,
  run_id                 uuid        not null,
  step_slug              text        not null,
  message_id             bigint,
  task_index             int         not null default 0,
  status                 text        not null default 'queued',
  attempts_count         int         not null default 0,
  error_message          text,
  output                 jsonb,
  queued_at              timestamptz not null default now(),
  completed_at           timestamptz,
  failed_at              timestamptz,
  started_at             timestamptz,
  last_worker_id         uuid,
  requeued_count         int         not null default 0,
  last_requeued_at       timestamptz,
  permanently_stalled_at timestamptz,
  queue_name             text        not null,
  retry_at               timestamptz,
  attempts_before_retry  int         not null default 0,
  constraint step_tasks_pkey primary key (run_id, step_slug, task_index),
  -- No foreign key from flow_slug to flows (pgflow has step_tasks_flow_slug_fkey, v0.20.0): a task is made for a
  -- step state of the same flow, whose run keeps the flow (see 0023_table_runs).
  -- No foreign key of its own from run_id to runs (pgflow has step_tasks_run_id_fkey): the one to step_states
  -- below implies it (step_states.run_id references runs), and every key checked costs an insert a query and a row
  -- lock (v0.20.0).
  constraint step_tasks_run_id_step_slug_fkey foreign key (run_id, step_slug)
    references pgflow.step_states (run_id, step_slug),
  constraint step_tasks_last_worker_id_fkey foreign key (last_worker_id)
    references pgflow.workers (worker_id) on delete set null,
  constraint valid_status check (status in ('queued', 'started', 'completed', 'failed', 'cancelled')),
  constraint output_valid_only_for_completed check (output is null or status in ('completed', 'failed')),
  constraint attempts_count_nonnegative check (attempts_count >= 0),
  constraint completed_at_or_failed_at check (not (completed_at is not null and failed_at is not null)),
  constraint completed_at_is_after_queued_at check (completed_at is null or completed_at >= queued_at),
  constraint failed_at_is_after_queued_at check (failed_at is null or failed_at >= queued_at),
  constraint started_at_is_after_queued_at check (started_at is null or started_at >= queued_at),
  constraint completed_at_is_after_started_at check (
    completed_at is null or started_at is null or completed_at >= started_at),
  constraint failed_at_is_after_started_at check (
    failed_at is null or started_at is null or failed_at >= started_at),
  -- Canonical queue names, 1-47 characters (PGMQ's limit). The length is tested apart from the pattern (v0.20.0; the
  -- same set of names as '^[a-z_][a-z0-9_]{0,46}$'): every write of a task (insert, claim, completion) evaluates
  -- this check, and PostgreSQL's regular expressions take about 3 us for the bounded repetition {0,46}, about a
  -- tenth of that for the unbounded pattern and the length.
  constraint step_tasks_queue_name_is_valid check (queue_name ~ '^[a-z_][a-z0-9_]*$' and length(queue_name) <= 47),
  constraint step_tasks_queue_name_message_id_key unique (queue_name, message_id),
  constraint attempts_before_retry_in_range check (attempts_before_retry >= 0 and attempts_before_retry <= attempts_count)
);

comment on column pgflow.step_tasks.retry_at is
  'When the task was last queued for a retry (fail_task): the time its next attempt becomes visible. NULL otherwise.';
comment on column pgflow.step_tasks.attempts_before_retry is
  'attempts_count when pgflow.retry_run last gave the task fresh attempts (0 if never): attempt numbers keep counting, so a report of an attempt from before the retry stays fenced, while the retry budget counts attempts_count - attempts_before_retry.';
comment on column pgflow.step_tasks.queue_name is
  'Canonical lower-case name of the PGMQ queue that holds this task''s message, copied from its step when the task was created.';

-- Two indexes only, the primary key and the queue identity key, whose columns no transition changes: the claim
-- (queued -> started) and the completion are heap-only-tuple (HOT) updates, which write no index entry, as long as
-- the new version fits on its page (v0.20.0). An index on status, started_at or last_worker_id - or with status in
-- its predicate, like pgflow's partial indexes - makes every one of those updates write an entry into every index.
-- Left out: pgflow's idx_step_tasks_message_id (message_id) and idx_step_tasks_flow_run_step (flow_slug, run_id,
-- step_slug) since v0.19.0; idx_step_tasks_queued (run_id, step_slug) where queued, idx_step_tasks_queued_msg
-- (message_id) where queued, idx_step_tasks_completed and idx_step_tasks_failed (run_id, step_slug) where completed
-- or failed, idx_step_tasks_started (started_at) where started and idx_step_tasks_last_worker (last_worker_id)
-- where started since v0.20.0. Lookups by message id go through step_tasks_queue_name_message_id_key, by run and
-- step through step_tasks_pkey; started tasks (stalled-task recovery, a worker's running tasks) are found through
-- their runs, which idx_runs_status finds (docs/pgflow-differences.md).
--
-- The fillfactor leaves room on each page for the versions the claim and the completion write: a task's row is
-- written three times, and on a full page its next version moves to another page with new index entries.
alter table pgflow.step_tasks set (fillfactor = 70);
