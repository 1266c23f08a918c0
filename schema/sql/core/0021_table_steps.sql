-- pgflow.steps: the nodes of a flow's DAG. step_index is the insertion order, which is a topological order
-- because a step's dependencies must exist before the step is added. NULL opt_* columns inherit the flow's value.
-- queue_name is the step's route: the canonical (lower-case) name of the PGMQ queue its tasks are sent to, recorded
-- by add_step: the flow's default queue, pgflow._default_queue_name(flow_slug), for a flow in queue mode 'flow', or
-- the step's private queue, pgflow._step_queue_name(flow_slug, step_slug, step_index), in queue mode 'step'.
create table pgflow.steps (
  flow_slug               text        not null,
  step_slug               text        not null,
  step_type               text        not null default 'single',
  step_index              int         not null default 0,
  deps_count              int         not null default 0,
  opt_max_attempts        int,
  opt_base_delay          int,
  opt_timeout             int,
  created_at              timestamptz not null default now(),
  opt_start_delay         int,
  required_input_pattern  jsonb,
  forbidden_input_pattern jsonb,
  when_unmet              text        not null default 'skip',
  when_exhausted          text        not null default 'fail',
  queue_name              text        not null,
  constraint steps_pkey primary key (flow_slug, step_slug),
  constraint steps_flow_slug_step_index_key unique (flow_slug, step_index),
  constraint steps_flow_slug_fkey foreign key (flow_slug) references pgflow.flows (flow_slug),
  constraint steps_deps_count_check check (deps_count >= 0),
  constraint steps_step_slug_check check (pgflow.is_valid_slug(step_slug)),
  constraint steps_step_type_check check (step_type in ('single', 'map')),
  constraint opt_max_attempts_is_nonnegative check (opt_max_attempts is null or opt_max_attempts >= 0),
  constraint opt_base_delay_is_nonnegative check (opt_base_delay is null or opt_base_delay >= 0),
  constraint opt_timeout_is_positive check (opt_timeout is null or opt_timeout > 0),
  constraint opt_start_delay_is_nonnegative check (opt_start_delay is null or opt_start_delay >= 0),
  constraint required_input_pattern_is_object check (
    required_input_pattern is null or jsonb_typeof(required_input_pattern) = 'object'),
  constraint forbidden_input_pattern_is_object check (
    forbidden_input_pattern is null or jsonb_typeof(forbidden_input_pattern) = 'object'),
  constraint when_unmet_is_valid check (when_unmet in ('fail', 'skip', 'skip-cascade')),
  constraint when_exhausted_is_valid check (when_exhausted in ('fail', 'skip', 'skip-cascade')),
  -- The rule of step_tasks_queue_name_is_valid, written the same way (see sql/core/0026_table_step_tasks.sql).
  constraint steps_queue_name_is_valid check (queue_name ~ '^[a-z_][a-z0-9_]*$' and length(queue_name) <= 47)
);

comment on column pgflow.steps.queue_name is
  'Canonical lower-case name of the PGMQ queue this step''s tasks are sent to (its route).';
