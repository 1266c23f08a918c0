-- pgflow.schedules (v0.20.0, pgflow-go only): flows started on a cron schedule with a fixed input. Workers write
-- the definition columns at startup (pgflow.upsert_schedule); operators own paused (pause_schedule /
-- resume_schedule). Whichever worker holds the scheduler's advisory lock fires due ticks through
-- pgflow.fire_schedule_tick, which refuses every tick at or before last_tick, so each tick starts at most one run.
-- The cron expression is parsed by the workers (Go), not by SQL: the database stores it as text.
-- Deleting a flow (pgflow.delete_flow_and_data, also when a changed flow is recompiled) deletes its schedules;
-- workers write the schedules of their code again at startup, after compiling their flows.
create table pgflow.schedules (
  schedule_name text        not null,
  flow_slug     text        not null,
  cron          text        not null,
  time_zone     text        not null default 'UTC',
  input         jsonb       not null,
  missed        text        not null default 'skip',
  max_catch_up  int         not null default 10,
  paused        boolean     not null default false,
  last_tick     timestamptz not null,
  last_run_id   uuid,
  next_tick     timestamptz,
  created_at    timestamptz not null default now(),
  updated_at    timestamptz not null default now(),
  paused_at     timestamptz,
  constraint schedules_pkey primary key (schedule_name),
  constraint schedules_flow_slug_fkey foreign key (flow_slug) references pgflow.flows (flow_slug) on delete cascade,
  constraint schedules_name_is_valid check (pgflow.is_valid_slug(schedule_name)),
  constraint schedules_cron_not_empty check (btrim(cron) <> ''),
  constraint schedules_missed_is_valid check (missed in ('skip', 'catch_up')),
  constraint schedules_max_catch_up_in_range check (max_catch_up between 1 and 1000),
  constraint schedules_paused_at_only_when_paused check (paused or paused_at is null)
);

create index idx_schedules_flow_slug on pgflow.schedules (flow_slug);

comment on table pgflow.schedules is
  'Cron schedules that start runs of a flow with a fixed input; one row per schedule name.';
comment on column pgflow.schedules.schedule_name is
  'Name of the schedule (a slug); part of every run id the schedule derives (pgflow.schedule_run_id).';
comment on column pgflow.schedules.flow_slug is
  'Flow a tick starts.';
comment on column pgflow.schedules.cron is
  'Cron expression as written in the Go code: 5 fields, 6 with a leading seconds field, or a descriptor (@daily, @every 90m). Parsed by the workers.';
comment on column pgflow.schedules.time_zone is
  'IANA time zone the cron expression is read in (e.g. Europe/Berlin).';
comment on column pgflow.schedules.input is
  'Input of every run the schedule starts.';
comment on column pgflow.schedules.missed is
  'What happens to ticks that passed while no worker ran: skip (only the most recent due tick fires) or catch_up (every due tick fires in order, at most max_catch_up of them, the most recent ones).';
comment on column pgflow.schedules.max_catch_up is
  'Most ticks fired in one pass when missed = catch_up.';
comment on column pgflow.schedules.paused is
  'Operator state: a paused schedule fires nothing. Worker startups never change it.';
comment on column pgflow.schedules.last_tick is
  'Horizon: only ticks after it fire. The last fired tick, or when the schedule was created, its cron or zone changed, or it was resumed (ticks before those moments never fire).';
comment on column pgflow.schedules.last_run_id is
  'Run started by the most recent fired tick; NULL before the first.';
comment on column pgflow.schedules.next_tick is
  'Next tick as last computed by a worker (informational, for list views); NULL when unknown.';
comment on column pgflow.schedules.created_at is
  'When the schedule was first written.';
comment on column pgflow.schedules.updated_at is
  'When a worker last changed its definition (or an operator paused or resumed it).';
comment on column pgflow.schedules.paused_at is
  'When the schedule was paused; NULL while it is active.';
