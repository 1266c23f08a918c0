-- pgflow.flows: one row per workflow definition. The flow slug also names the flow's PGMQ queue.
-- opt_* columns are the defaults every step of the flow inherits unless the step overrides them.
create table pgflow.flows (
  flow_slug        text        not null,
  opt_max_attempts int         not null default 3,
  opt_base_delay   int         not null default 1,
  opt_timeout      int         not null default 60,
  created_at       timestamptz not null default now(),
  constraint flows_pkey primary key (flow_slug),
  constraint slug_is_valid check (pgflow.is_valid_slug(flow_slug)),
  constraint opt_max_attempts_is_nonnegative check (opt_max_attempts >= 0),
  constraint opt_base_delay_is_nonnegative check (opt_base_delay >= 0),
  constraint opt_timeout_is_positive check (opt_timeout > 0)
);
