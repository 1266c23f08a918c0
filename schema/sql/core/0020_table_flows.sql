-- pgflow.flows: one row per workflow definition. opt_* columns are the defaults every step of the flow inherits
-- unless the step overrides them. The flow's default PGMQ queue is pgflow._default_queue_name(flow_slug), i.e.
-- lower(flow_slug); flows_default_queue_key makes sure two flows never address the same default queue (flow slugs
-- that differ only in letter case), also for rows inserted with plain SQL. queue_mode (v0.20.0) is deployment
-- metadata, not part of the DAG: 'flow' sends every step's tasks to the default queue; 'step' gives every step a
-- private queue of its own (pgflow._step_queue_name), and the flow has no default queue. message_retention
-- (v0.20.0) is deployment metadata too, and may change at any time: 'archive' keeps a task's message in the queue
-- while the task runs and archives it when the task finishes; 'delete' deletes it when a worker claims the task.
create table pgflow.flows (
  flow_slug         text        not null,
  opt_max_attempts  int         not null default 3,
  opt_base_delay    int         not null default 1,
  opt_timeout       int         not null default 60,
  created_at        timestamptz not null default now(),
  queue_mode        text        not null default 'flow',
  message_retention text        not null default 'archive',
  constraint flows_pkey primary key (flow_slug),
  constraint slug_is_valid check (pgflow.is_valid_slug(flow_slug)),
  constraint opt_max_attempts_is_nonnegative check (opt_max_attempts >= 0),
  constraint opt_base_delay_is_nonnegative check (opt_base_delay >= 0),
  constraint opt_timeout_is_positive check (opt_timeout > 0),
  constraint queue_mode_is_valid check (queue_mode in ('flow', 'step')),
  constraint message_retention_is_valid check (message_retention in ('archive', 'delete'))
);

create unique index flows_default_queue_key on pgflow.flows (pgflow._default_queue_name(flow_slug));

comment on column pgflow.flows.queue_mode is
  'Where the flow''s tasks are sent: ''flow'' = one queue for the whole flow (its default queue), ''step'' = one private queue per step.';

comment on column pgflow.flows.message_retention is
  'What happens to a task''s PGMQ message: ''archive'' = it stays in the queue while the task runs and is archived when the task finishes (pgmq.archive); ''delete'' = it is deleted when a worker claims the task (two rows fewer per task, no copy in the archive). Safe to change at any time.';
