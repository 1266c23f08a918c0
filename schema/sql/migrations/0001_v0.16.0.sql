-- pgflow-go schema v0.16.0, generated from schema/sql/core by `make schema`.
set local check_function_bodies = off;

-- 0000_schema.sql
-- Schema pgflow holds every table, type and function of the pgflow engine.
-- "if not exists": the migrator keeps its version table in this schema and may create it first.
create schema if not exists pgflow;

comment on schema pgflow is 'pgflow-go workflow engine: flow definitions, runs, step states, tasks and their orchestration functions';

-- 0010_function_is_valid_slug.sql
-- pgflow.is_valid_slug(slug) guarantees: true exactly when slug is not NULL, not empty, at most 128 characters,
-- starts with an ASCII letter or underscore, continues with ASCII letters, digits or underscores, and is not the
-- reserved word 'run' (case-sensitive, so 'Run' is valid). Pure function; used by the slug CHECK constraints, so
-- it exists before the tables.
create or replace function pgflow.is_valid_slug(slug text)
returns boolean
language plpgsql
immutable
set search_path = ''
as $$
begin
  if slug is null or slug = '' then
    return false;
  end if;
  return length(slug) <= 128
    and slug ~ '^[a-zA-Z_][a-zA-Z0-9_]*$'
    and slug <> 'run';
end;
$$;

-- 0020_table_flows.sql
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

-- 0021_table_steps.sql
-- pgflow.steps: the nodes of a flow's DAG. step_index is the insertion order, which is a topological order
-- because a step's dependencies must exist before the step is added. NULL opt_* columns inherit the flow's value.
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
  constraint when_exhausted_is_valid check (when_exhausted in ('fail', 'skip', 'skip-cascade'))
);

-- 0022_table_deps.sql
-- pgflow.deps: the edges of a flow's DAG; step_slug depends on dep_slug. Both ends must be existing steps of
-- the same flow, and a step cannot depend on itself.
create table pgflow.deps (
  flow_slug  text        not null,
  dep_slug   text        not null,
  step_slug  text        not null,
  created_at timestamptz not null default now(),
  constraint deps_pkey primary key (flow_slug, dep_slug, step_slug),
  constraint deps_flow_slug_fkey foreign key (flow_slug) references pgflow.flows (flow_slug),
  constraint deps_flow_slug_dep_slug_fkey foreign key (flow_slug, dep_slug)
    references pgflow.steps (flow_slug, step_slug),
  constraint deps_flow_slug_step_slug_fkey foreign key (flow_slug, step_slug)
    references pgflow.steps (flow_slug, step_slug),
  constraint deps_check check (dep_slug <> step_slug)
);

create index idx_deps_by_flow_step on pgflow.deps (flow_slug, step_slug);
create index idx_deps_by_flow_dep on pgflow.deps (flow_slug, dep_slug);

-- 0023_table_runs.sql
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

-- 0024_table_step_states.sql
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
  constraint step_states_flow_slug_fkey foreign key (flow_slug) references pgflow.flows (flow_slug),
  constraint step_states_run_id_fkey foreign key (run_id) references pgflow.runs (run_id),
  constraint step_states_flow_slug_step_slug_fkey foreign key (flow_slug, step_slug)
    references pgflow.steps (flow_slug, step_slug),
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

create index idx_step_states_ready on pgflow.step_states (run_id, status, remaining_deps)
  where status = 'created' and remaining_deps = 0;
create index idx_step_states_failed on pgflow.step_states (run_id, step_slug) where status = 'failed';
create index idx_step_states_skipped on pgflow.step_states (run_id, step_slug) where status = 'skipped';
create index idx_step_states_flow_slug on pgflow.step_states (flow_slug);
create index idx_step_states_run_id on pgflow.step_states (run_id);

-- 0025_table_workers.sql
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

-- 0026_table_step_tasks.sql
-- pgflow.step_tasks: units of work. A single step has one task (task_index 0), a map step one per array element.
-- message_id is the task's PGMQ message in the queue named after flow_slug.
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
  constraint step_tasks_pkey primary key (run_id, step_slug, task_index),
  constraint step_tasks_flow_slug_fkey foreign key (flow_slug) references pgflow.flows (flow_slug),
  constraint step_tasks_run_id_fkey foreign key (run_id) references pgflow.runs (run_id),
  constraint step_tasks_run_id_step_slug_fkey foreign key (run_id, step_slug)
    references pgflow.step_states (run_id, step_slug),
  constraint step_tasks_last_worker_id_fkey foreign key (last_worker_id)
    references pgflow.workers (worker_id) on delete set null,
  constraint valid_status check (status in ('queued', 'started', 'completed', 'failed')),
  constraint output_valid_only_for_completed check (output is null or status in ('completed', 'failed')),
  constraint attempts_count_nonnegative check (attempts_count >= 0),
  constraint completed_at_or_failed_at check (not (completed_at is not null and failed_at is not null)),
  constraint completed_at_is_after_queued_at check (completed_at is null or completed_at >= queued_at),
  constraint failed_at_is_after_queued_at check (failed_at is null or failed_at >= queued_at),
  constraint started_at_is_after_queued_at check (started_at is null or started_at >= queued_at),
  constraint completed_at_is_after_started_at check (
    completed_at is null or started_at is null or completed_at >= started_at),
  constraint failed_at_is_after_started_at check (
    failed_at is null or started_at is null or failed_at >= started_at)
);

create index idx_step_tasks_message_id on pgflow.step_tasks (message_id);
create index idx_step_tasks_queued on pgflow.step_tasks (run_id, step_slug) where status = 'queued';
create index idx_step_tasks_completed on pgflow.step_tasks (run_id, step_slug) where status = 'completed';
create index idx_step_tasks_failed on pgflow.step_tasks (run_id, step_slug) where status = 'failed';
create index idx_step_tasks_flow_run_step on pgflow.step_tasks (flow_slug, run_id, step_slug);
create index idx_step_tasks_started on pgflow.step_tasks (started_at) where status = 'started';
create index idx_step_tasks_queued_msg on pgflow.step_tasks (message_id) where status = 'queued';
create index idx_step_tasks_last_worker on pgflow.step_tasks (last_worker_id) where status = 'started';

-- 0027_table_worker_functions.sql
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

-- 0030_type_step_task_record.sql
-- pgflow.step_task_record: one claimed task as returned by pgflow.start_tasks. Attribute order is part of the API.
create type pgflow.step_task_record as (
  flow_slug  text,
  run_id     uuid,
  step_slug  text,
  input      jsonb,
  msg_id     bigint,
  task_index int,
  flow_input jsonb
);

-- 0100_function__archive_task_message.sql
-- pgflow._archive_task_message(p_run_id, p_step_slug, p_task_index) guarantees: the task's PGMQ message (if it has
-- one and it is still in the queue) is moved to the archive of the queue named after the run's flow. Unknown
-- tasks and already archived messages are a no-op. Nothing else changes.
create or replace function pgflow._archive_task_message(p_run_id uuid, p_step_slug text, p_task_index integer)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_flow_slug  text;
  v_message_id bigint;
begin
  select t.flow_slug, t.message_id
    into v_flow_slug, v_message_id
    from pgflow.step_tasks as t
   where t.run_id = p_run_id
     and t.step_slug = p_step_slug
     and t.task_index = p_task_index;

  if v_message_id is not null then
    perform pgmq.archive(v_flow_slug, v_message_id);
  end if;
end;
$$;

-- 0100_function__cascade_force_skip_steps.sql
-- pgflow._cascade_force_skip_steps(run_id, step_slug, skip_reason) guarantees:
--   * the step and all its transitive dependents that are still 'created' or 'started' in the run become
--     'skipped' (skipped_at now, remaining_tasks NULL); the trigger step gets skip_reason, every other step
--     'dependency_skipped'; steps already terminal (including an already skipped trigger) are left alone;
--   * step:skipped is emitted per newly skipped step in step_index order (a topological order);
--   * the queued/started messages of the newly skipped steps' tasks are archived (one call); their task rows keep
--     their status (late callbacks are ignored by complete_task/fail_task);
--   * the run's remaining_steps drops by the number newly skipped, which is returned (a second call returns 0).
-- It does not look at the run status and does not decrement remaining_deps (every dependent is skipped anyway).
-- Unknown run: raises 'Run not found: <run_id>'.
create or replace function pgflow._cascade_force_skip_steps(run_id uuid, step_slug text, skip_reason text)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_flow_slug text;
  v_skipped   text[] := '{}';
  v_step      record;
  v_msg_ids   bigint[];
begin
  select r.flow_slug into v_flow_slug from pgflow.runs as r where r.run_id = _cascade_force_skip_steps.run_id;
  if not found then
    raise exception 'Run not found: %', _cascade_force_skip_steps.run_id;
  end if;

  for v_step in
    with recursive targets (slug) as (
      select _cascade_force_skip_steps.step_slug
      union
      select d.step_slug
        from pgflow.deps as d
        join targets as t on d.dep_slug = t.slug
       where d.flow_slug = v_flow_slug
    ),
    skipped as (
      update pgflow.step_states as ss
         set status = 'skipped',
             skip_reason = case when ss.step_slug = _cascade_force_skip_steps.step_slug
                                then _cascade_force_skip_steps.skip_reason
                                else 'dependency_skipped' end,
             skipped_at = now(),
             remaining_tasks = null
        from targets as t
       where ss.run_id = _cascade_force_skip_steps.run_id
         and ss.step_slug = t.slug
         and ss.status in ('created', 'started')
      returning ss.*
    )
    select sk.*, s.step_index
      from skipped as sk
      join pgflow.steps as s on s.flow_slug = sk.flow_slug and s.step_slug = sk.step_slug
     order by s.step_index
  loop
    v_skipped := v_skipped || v_step.step_slug;
    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'step:skipped',
        'run_id', v_step.run_id,
        'flow_slug', v_step.flow_slug,
        'step_slug', v_step.step_slug,
        'status', v_step.status,
        'skip_reason', v_step.skip_reason,
        'skipped_at', v_step.skipped_at),
      'step:' || v_step.step_slug || ':skipped',
      v_step.run_id);
  end loop;

  if cardinality(v_skipped) = 0 then
    return 0;
  end if;

  select array_agg(t.message_id order by t.message_id) into v_msg_ids
    from pgflow.step_tasks as t
   where t.run_id = _cascade_force_skip_steps.run_id
     and t.step_slug = any (v_skipped)
     and t.status in ('queued', 'started')
     and t.message_id is not null;
  if v_msg_ids is not null then
    perform pgmq.archive(v_flow_slug, v_msg_ids);
  end if;

  update pgflow.runs as r
     set remaining_steps = r.remaining_steps - cardinality(v_skipped)
   where r.run_id = _cascade_force_skip_steps.run_id;

  return cardinality(v_skipped);
end;
$$;

-- 0100_function__compare_flow_shapes.sql
-- pgflow._compare_flow_shapes(p_local, p_db) guarantees: the list of structural differences between two flow
-- shapes, '{}' when they match. p_local is called "first", p_db "second". Reported, in this order:
--   * 'Step count differs: <n_local> vs <n_db>' when the step arrays differ in length (missing steps = []);
--   * per index i: a step missing on one side, else differences of slug, type, dependencies (as the sorted list),
--     whenUnmet, whenExhausted, requiredInputPattern and forbiddenInputPattern, one line each.
-- A key missing on either side is not a difference for slug/stepType/whenUnmet/whenExhausted (pgflow compares
-- those with SQL "<>", where NULL never differs); for the two patterns a missing key differs from
-- {"defined": false} and prints as ''. Options are never compared. Read-only.
create or replace function pgflow._compare_flow_shapes(p_local jsonb, p_db jsonb)
returns text[]
language plpgsql
stable
set search_path = ''
as $$
declare
  v_local_steps jsonb := coalesce(p_local -> 'steps', '[]'::jsonb);
  v_db_steps    jsonb := coalesce(p_db -> 'steps', '[]'::jsonb);
  v_local_count int;
  v_db_count    int;
  v_differences text[] := '{}';
  v_local       jsonb;
  v_db          jsonb;
  v_local_deps  text;
  v_db_deps     text;
  i             int;
begin
  if jsonb_typeof(v_local_steps) <> 'array' then
    raise exception 'Flow shape (first) has "steps" of type %, expected an array', jsonb_typeof(v_local_steps)
      using errcode = '22023';
  end if;
  if jsonb_typeof(v_db_steps) <> 'array' then
    raise exception 'Flow shape (second) has "steps" of type %, expected an array', jsonb_typeof(v_db_steps)
      using errcode = '22023';
  end if;

  v_local_count := jsonb_array_length(v_local_steps);
  v_db_count := jsonb_array_length(v_db_steps);

  if v_local_count <> v_db_count then
    v_differences := v_differences || format('Step count differs: %s vs %s', v_local_count, v_db_count);
  end if;

  for i in 0 .. greatest(v_local_count, v_db_count) - 1 loop
    v_local := v_local_steps -> i;
    v_db := v_db_steps -> i;

    if v_local is null then
      v_differences := v_differences || format(
        'Step at index %s: missing in first shape (second has ''%s'')', i, v_db ->> 'slug');
      continue;
    end if;
    if v_db is null then
      v_differences := v_differences || format(
        'Step at index %s: missing in second shape (first has ''%s'')', i, v_local ->> 'slug');
      continue;
    end if;

    if (v_local ->> 'slug') <> (v_db ->> 'slug') then
      v_differences := v_differences || format(
        'Step at index %s: slug differs ''%s'' vs ''%s''', i, v_local ->> 'slug', v_db ->> 'slug');
    end if;

    if (v_local ->> 'stepType') <> (v_db ->> 'stepType') then
      v_differences := v_differences || format(
        'Step at index %s: type differs ''%s'' vs ''%s''', i, v_local ->> 'stepType', v_db ->> 'stepType');
    end if;

    select coalesce(string_agg(e.dep, ', ' order by e.dep collate "C"), '')
    into v_local_deps
    from jsonb_array_elements_text(
      case when jsonb_typeof(v_local -> 'dependencies') = 'array' then v_local -> 'dependencies'
           else '[]'::jsonb end) as e(dep);
    select coalesce(string_agg(e.dep, ', ' order by e.dep collate "C"), '')
    into v_db_deps
    from jsonb_array_elements_text(
      case when jsonb_typeof(v_db -> 'dependencies') = 'array' then v_db -> 'dependencies'
           else '[]'::jsonb end) as e(dep);
    if v_local_deps <> v_db_deps then
      v_differences := v_differences || format(
        'Step at index %s: dependencies differ [%s] vs [%s]', i, v_local_deps, v_db_deps);
    end if;

    if (v_local ->> 'whenUnmet') <> (v_db ->> 'whenUnmet') then
      v_differences := v_differences || format(
        'Step at index %s: whenUnmet differs ''%s'' vs ''%s''', i, v_local ->> 'whenUnmet', v_db ->> 'whenUnmet');
    end if;

    if (v_local ->> 'whenExhausted') <> (v_db ->> 'whenExhausted') then
      v_differences := v_differences || format(
        'Step at index %s: whenExhausted differs ''%s'' vs ''%s''',
        i, v_local ->> 'whenExhausted', v_db ->> 'whenExhausted');
    end if;

    if (v_local -> 'requiredInputPattern') is distinct from (v_db -> 'requiredInputPattern') then
      v_differences := v_differences || format(
        'Step at index %s: requiredInputPattern differs ''%s'' vs ''%s''',
        i, v_local -> 'requiredInputPattern', v_db -> 'requiredInputPattern');
    end if;

    if (v_local -> 'forbiddenInputPattern') is distinct from (v_db -> 'forbiddenInputPattern') then
      v_differences := v_differences || format(
        'Step at index %s: forbiddenInputPattern differs ''%s'' vs ''%s''',
        i, v_local -> 'forbiddenInputPattern', v_db -> 'forbiddenInputPattern');
    end if;
  end loop;

  return v_differences;
end;
$$;

-- 0100_function__create_flow_from_shape.sql
-- pgflow._create_flow_from_shape(p_flow_slug, p_shape) guarantees: defines the flow described by a shape, using
-- create_flow and add_step (so it has their idempotence and errors): flow options from shape.options
-- (maxAttempts, baseDelay, timeout; absent = create_flow defaults), then every element of shape.steps in array
-- order with its dependencies (absent = none), stepType (absent = 'single'), whenUnmet (absent = 'skip'),
-- whenExhausted (absent = 'fail'), patterns (only when {"defined": true}) and step options (maxAttempts,
-- baseDelay, timeout, startDelay; absent = inherit).
create or replace function pgflow._create_flow_from_shape(p_flow_slug text, p_shape jsonb)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_options jsonb := coalesce(p_shape -> 'options', '{}'::jsonb);
  v_steps   jsonb := coalesce(p_shape -> 'steps', '[]'::jsonb);
  v_step    jsonb;
  v_opts    jsonb;
begin
  if jsonb_typeof(v_steps) <> 'array' then
    raise exception 'Flow shape for "%" has "steps" of type %, expected an array', p_flow_slug, jsonb_typeof(v_steps)
      using errcode = '22023';
  end if;

  perform pgflow.create_flow(
    flow_slug    => p_flow_slug,
    max_attempts => (v_options ->> 'maxAttempts')::int,
    base_delay   => (v_options ->> 'baseDelay')::int,
    timeout      => (v_options ->> 'timeout')::int
  );

  for v_step in select e.value from jsonb_array_elements(v_steps) with ordinality as e(value, pos) order by e.pos loop
    v_opts := coalesce(v_step -> 'options', '{}'::jsonb);
    perform pgflow.add_step(
      flow_slug               => p_flow_slug,
      step_slug               => v_step ->> 'slug',
      deps_slugs              => array(
        select jsonb_array_elements_text(coalesce(v_step -> 'dependencies', '[]'::jsonb))),
      max_attempts            => (v_opts ->> 'maxAttempts')::int,
      base_delay              => (v_opts ->> 'baseDelay')::int,
      timeout                 => (v_opts ->> 'timeout')::int,
      start_delay             => (v_opts ->> 'startDelay')::int,
      step_type               => v_step ->> 'stepType',
      required_input_pattern  => case when (v_step -> 'requiredInputPattern' ->> 'defined')::boolean
                                      then v_step -> 'requiredInputPattern' -> 'value' end,
      forbidden_input_pattern => case when (v_step -> 'forbiddenInputPattern' ->> 'defined')::boolean
                                      then v_step -> 'forbiddenInputPattern' -> 'value' end,
      when_unmet              => coalesce(v_step ->> 'whenUnmet', 'skip'),
      when_exhausted          => coalesce(v_step ->> 'whenExhausted', 'fail')
    );
  end loop;
end;
$$;

-- 0100_function__emit_event.sql
-- pgflow._emit_event(payload, event, run_id) guarantees:
--   * the event is published inside the caller's transaction, so listeners see it only if the state change that
--     caused it commits, and in the order the functions emitted it;
--   * pg_notify on the global channel 'pgflow' and on the per-run channel 'pgflow:run:<run_id>' with a small
--     JSON envelope {"event_type", "event", "run_id", "step_slug" (step events), "status", "flow_slug"}; the
--     envelope never carries inputs or outputs, so it always stays far below pg_notify's 8000-byte limit
--     (slugs are at most 128 characters: the envelope is under 700 bytes);
--   * when a function realtime.send(jsonb, text, text, boolean) exists (Supabase), the full payload also goes to
--     realtime.send(payload, event, 'pgflow:run:<run_id>', false); it is called through dynamic SQL so the
--     schema does not depend on Supabase.
create or replace function pgflow._emit_event(payload jsonb, event text, run_id uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_topic    text := 'pgflow:run:' || _emit_event.run_id::text;
  v_envelope text;
begin
  v_envelope := jsonb_strip_nulls(jsonb_build_object(
    'event_type', _emit_event.payload ->> 'event_type',
    'event', _emit_event.event,
    'run_id', _emit_event.run_id,
    'step_slug', _emit_event.payload ->> 'step_slug',
    'status', _emit_event.payload ->> 'status',
    'flow_slug', coalesce(
      _emit_event.payload ->> 'flow_slug',
      (select r.flow_slug from pgflow.runs as r where r.run_id = _emit_event.run_id))
  ))::text;

  perform pg_notify('pgflow', v_envelope);
  perform pg_notify(v_topic, v_envelope);

  if to_regprocedure('realtime.send(jsonb,text,text,boolean)') is not null then
    execute 'select realtime.send($1, $2, $3, $4)'
      using _emit_event.payload, _emit_event.event, v_topic, false;
  end if;
end;
$$;

-- 0100_function__get_flow_shape.sql
-- pgflow._get_flow_shape(p_flow_slug) guarantees: the structural shape of a stored flow as jsonb
-- {"steps": [...]}, steps in step_index order, each with slug, stepType, dependencies (sorted by code point,
-- [] when none), whenUnmet, whenExhausted, requiredInputPattern and forbiddenInputPattern (each
-- {"defined": false} or {"defined": true, "value": <pattern>}). Options are not part of a shape. An unknown flow
-- gives {"steps": []}. Read-only.
create or replace function pgflow._get_flow_shape(p_flow_slug text)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'steps',
    coalesce(
      jsonb_agg(
        jsonb_build_object(
          'slug', s.step_slug,
          'stepType', s.step_type,
          'dependencies', coalesce(
            (select jsonb_agg(d.dep_slug order by d.dep_slug collate "C")
             from pgflow.deps as d
             where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug),
            '[]'::jsonb),
          'whenUnmet', s.when_unmet,
          'whenExhausted', s.when_exhausted,
          'requiredInputPattern', case
            when s.required_input_pattern is null then jsonb_build_object('defined', false)
            else jsonb_build_object('defined', true, 'value', s.required_input_pattern)
          end,
          'forbiddenInputPattern', case
            when s.forbidden_input_pattern is null then jsonb_build_object('defined', false)
            else jsonb_build_object('defined', true, 'value', s.forbidden_input_pattern)
          end
        )
        order by s.step_index
      ),
      '[]'::jsonb
    )
  )
  from pgflow.steps as s
  where s.flow_slug = p_flow_slug;
$$;

-- 0100_function_add_step.sql
-- pgflow.add_step(...) guarantees:
--   * definitions of one flow are serialised by a row lock on the flow;
--   * idempotent by (flow_slug, step_slug): the first call inserts the step at the next step_index of the flow
--     (0, 1, 2, ... in call order, a topological order because dependencies must already exist) with its
--     dependency edges; a later call with the same dependency set returns the existing row unchanged (options,
--     type, patterns and modes are NOT updated);
--   * a later call with a different dependency set is rejected and changes nothing: adding edges to an existing
--     step would leave deps_count stale (runs would never start the step) and could create cycles;
--   * duplicate names in deps_slugs count once, so deps_count always equals the number of edges; NULL = '{}';
--   * a map step has at most one dependency;
--   * everything else is enforced by the constraints of steps and deps, whose error texts callers match on
--     (steps_flow_slug_fkey, deps_flow_slug_dep_slug_fkey, deps_check, steps_step_slug_check,
--     steps_step_type_check, when_unmet_is_valid, when_exhausted_is_valid, opt_*_is_*, *_input_pattern_is_object).
create or replace function pgflow.add_step(
  flow_slug               text,
  step_slug               text,
  deps_slugs              text[]  default '{}',
  max_attempts            integer default null,
  base_delay              integer default null,
  timeout                 integer default null,
  start_delay             integer default null,
  step_type               text    default 'single',
  required_input_pattern  jsonb   default null,
  forbidden_input_pattern jsonb   default null,
  when_unmet              text    default 'skip',
  when_exhausted          text    default 'fail'
)
returns pgflow.steps
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_deps          text[];
  v_existing_deps text[];
  v_step          pgflow.steps;
begin
  -- Distinct dependencies, first occurrence order kept (used in messages).
  select coalesce(array_agg(u.dep order by u.first_pos), '{}')
  into v_deps
  from (
    select d.dep, min(d.pos) as first_pos
    from unnest(coalesce(add_step.deps_slugs, '{}'::text[])) with ordinality as d(dep, pos)
    group by d.dep
  ) as u;

  if array_position(v_deps, null) is not null then
    raise exception using
      errcode = '22004',
      message = format('Step "%s" of flow "%s": deps_slugs must not contain NULL (got %s)',
        add_step.step_slug, add_step.flow_slug, add_step.deps_slugs);
  end if;

  if coalesce(add_step.step_type, 'single') = 'map' and cardinality(v_deps) > 1 then
    raise exception 'Map step "%" can have at most one dependency, but % were provided: %',
      add_step.step_slug, cardinality(v_deps), array_to_string(v_deps, ', ');
  end if;

  -- Serialise definitions of one flow, so concurrent calls neither race for a step_index nor insert one step
  -- twice. An unknown flow locks nothing and fails below on steps_flow_slug_fkey.
  perform 1 from pgflow.flows as f where f.flow_slug = add_step.flow_slug for update;

  select s.* into v_step
  from pgflow.steps as s
  where s.flow_slug = add_step.flow_slug
    and s.step_slug = add_step.step_slug;

  if found then
    select coalesce(array_agg(d.dep_slug order by d.dep_slug collate "C"), '{}')
    into v_existing_deps
    from pgflow.deps as d
    where d.flow_slug = add_step.flow_slug
      and d.step_slug = add_step.step_slug;

    if v_existing_deps is distinct from
       (select coalesce(array_agg(x.dep order by x.dep collate "C"), '{}') from unnest(v_deps) as x(dep)) then
      raise exception using
        errcode = '23514',
        message = format(
          'Step "%s" of flow "%s" already exists with dependencies [%s]; add_step cannot change them to [%s]',
          add_step.step_slug, add_step.flow_slug,
          array_to_string(v_existing_deps, ', '), array_to_string(v_deps, ', ')),
        hint = 'Dependencies are fixed when a step is created; delete the flow (pgflow.delete_flow_and_data) and define it again.';
    end if;

    return v_step;
  end if;

  insert into pgflow.steps as s (
    flow_slug, step_slug, step_type, step_index, deps_count,
    opt_max_attempts, opt_base_delay, opt_timeout, opt_start_delay,
    required_input_pattern, forbidden_input_pattern, when_unmet, when_exhausted
  )
  values (
    add_step.flow_slug,
    add_step.step_slug,
    coalesce(add_step.step_type, 'single'),
    (select coalesce(max(s2.step_index) + 1, 0) from pgflow.steps as s2 where s2.flow_slug = add_step.flow_slug),
    cardinality(v_deps),
    add_step.max_attempts,
    add_step.base_delay,
    add_step.timeout,
    add_step.start_delay,
    add_step.required_input_pattern,
    add_step.forbidden_input_pattern,
    add_step.when_unmet,
    add_step.when_exhausted
  )
  returning s.* into v_step;

  insert into pgflow.deps (flow_slug, dep_slug, step_slug)
  select add_step.flow_slug, d.dep, add_step.step_slug
  from unnest(v_deps) with ordinality as d(dep, pos)
  order by d.pos;

  return v_step;
end;
$$;

-- 0100_function_calculate_retry_delay.sql
-- pgflow.calculate_retry_delay(base_delay, attempts_count) guarantees: the exponential backoff in whole seconds,
-- floor(base_delay * 2^attempts_count), capped at 2147483647 (the largest integer, about 68 years) instead of
-- failing with "integer out of range". A base_delay of 0 or less gives 0; NULL arguments give NULL.
-- The exponent is clamped to +-60000 so numeric arithmetic cannot overflow: 2^60000 times the smallest positive
-- numeric is still far above the cap, so positive exponents stay exact; negative exponents (pgflow never passes
-- them, attempts_count is never negative) are exact for every base_delay below 10^16000.
create or replace function pgflow.calculate_retry_delay(base_delay numeric, attempts_count integer)
returns integer
language sql
immutable
parallel safe
set search_path = ''
as $$
  select case
    when base_delay is null or attempts_count is null then null
    when base_delay <= 0 then 0
    else least(
      floor(base_delay * power(2::numeric, greatest(least(attempts_count, 60000), -60000)::numeric)),
      2147483647
    )::integer
  end;
$$;

-- 0100_function_cascade_complete_taskless_steps.sql
-- pgflow.cascade_complete_taskless_steps(run_id) guarantees:
--   * completes, in waves, every step state of the run that is 'created' with remaining_deps 0 and
--     initial_tasks 0 (a map over an empty array): started_at = completed_at = now(), remaining_tasks 0, output
--     '[]' for maps (NULL for single steps, which are never taskless); step:completed is emitted per step in
--     step_index order within a wave, and waves run in dependency order;
--   * for each completed step its dependents get remaining_deps decremented, and dependent maps get
--     initial_tasks 0 (their input array is empty); the run's remaining_steps drops by the number completed;
--   * before every wave the conditions of ready steps are resolved (pgflow.cascade_resolve_conditions), so a step
--     that becomes ready through this cascade is skipped or fails by its condition exactly like any other step
--     (upstream pgflow skipped that check); if a condition fails the run, the cascade stops;
--   * a run that is not 'started' is left alone; returns the number of steps completed;
--   * at most 50 iterations (each wave and the final empty one count): more raises
--     'Cascade loop exceeded safety limit of 50 iterations (run <run_id>)', which rolls back the caller.
-- The run itself is not completed here; callers call pgflow.maybe_complete_run.
create or replace function pgflow.cascade_complete_taskless_steps(run_id uuid)
returns integer
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_flow_slug  text;
  v_total      integer := 0;
  v_iterations integer := 0;
  v_completed  text[];
  v_step       record;
begin
  select r.flow_slug into v_flow_slug
    from pgflow.runs as r
   where r.run_id = cascade_complete_taskless_steps.run_id and r.status = 'started';
  if v_flow_slug is null then
    return 0;
  end if;

  loop
    v_iterations := v_iterations + 1;
    if v_iterations > 50 then
      raise exception 'Cascade loop exceeded safety limit of 50 iterations (run %)',
        cascade_complete_taskless_steps.run_id;
    end if;

    exit when not pgflow.cascade_resolve_conditions(cascade_complete_taskless_steps.run_id);

    v_completed := '{}';
    for v_step in
      with done as (
        update pgflow.step_states as ss
           set status = 'completed',
               started_at = now(),
               completed_at = now(),
               remaining_tasks = 0,
               output = case when s.step_type = 'map' then '[]'::jsonb end
          from pgflow.steps as s
         where ss.run_id = cascade_complete_taskless_steps.run_id
           and ss.status = 'created'
           and ss.remaining_deps = 0
           and ss.initial_tasks = 0
           and s.flow_slug = ss.flow_slug
           and s.step_slug = ss.step_slug
        returning ss.*, s.step_index
      )
      select d.* from done as d order by d.step_index
    loop
      v_completed := v_completed || v_step.step_slug;
      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'step:completed',
          'run_id', v_step.run_id,
          'flow_slug', v_step.flow_slug,
          'step_slug', v_step.step_slug,
          'status', v_step.status,
          'started_at', v_step.started_at,
          'completed_at', v_step.completed_at,
          'remaining_tasks', v_step.remaining_tasks,
          'remaining_deps', v_step.remaining_deps,
          'output', v_step.output),
        'step:' || v_step.step_slug || ':completed',
        v_step.run_id);
    end loop;

    exit when cardinality(v_completed) = 0;

    update pgflow.step_states as child
       set remaining_deps = child.remaining_deps - parents.n,
           initial_tasks = case when parents.step_type = 'map' and child.status = 'created' then 0
                                else child.initial_tasks end
      from (
        select d.step_slug, s.step_type, count(*)::integer as n
          from pgflow.deps as d
          join pgflow.steps as s on s.flow_slug = d.flow_slug and s.step_slug = d.step_slug
         where d.flow_slug = v_flow_slug
           and d.dep_slug = any (v_completed)
         group by d.step_slug, s.step_type
      ) as parents
     where child.run_id = cascade_complete_taskless_steps.run_id
       and child.step_slug = parents.step_slug;

    update pgflow.runs as r
       set remaining_steps = r.remaining_steps - cardinality(v_completed)
     where r.run_id = cascade_complete_taskless_steps.run_id;

    v_total := v_total + cardinality(v_completed);
  end loop;

  return v_total;
end;
$$;

-- 0100_function_cascade_resolve_conditions.sql
-- pgflow.cascade_resolve_conditions(run_id) guarantees: the if/ifNot conditions of every step of the run that is
-- 'created' with remaining_deps 0 and has a pattern are evaluated, repeatedly until nothing changes:
--   * condition input: the run input for steps without dependencies, otherwise {<dep_slug>: <output>} over the
--     dependencies that completed (skipped ones are absent); met <=> (required pattern NULL or input @> it) and
--     (forbidden pattern NULL or not input @> it);
--   * when_unmet 'fail': the unmet step with the lowest step_index fails ('Condition not met'), the run fails,
--     step:failed then run:failed are emitted, every queued/started message of the run is archived, and the
--     function returns false (only that one step is failed);
--   * when_unmet 'skip': the step is skipped (condition_unmet, step:skipped emitted in step_index order), its
--     dependents' remaining_deps drop, map dependents get initial_tasks 0, the run's remaining_steps drops;
--   * when_unmet 'skip-cascade': pgflow._cascade_force_skip_steps(run_id, step, 'condition_unmet'), in step_index
--     order;
--   * returns false when the run is (or becomes) 'failed', true otherwise (also for 'completed' and unknown runs,
--     where nothing is evaluated). More than 50 rounds raise
--     'cascade_resolve_conditions exceeded safety limit of 50 iterations (run <run_id>)'.
create or replace function pgflow.cascade_resolve_conditions(run_id uuid)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_run        record;
  v_iteration  integer := 0;
  v_fail_slug  text;
  v_skip       text[];
  v_cascade    text[];
  v_skipped    text[];
  v_slug       text;
  v_step       record;
  v_msg_ids    bigint[];
  v_status     text;
begin
  select r.flow_slug, r.status, r.input into v_run
    from pgflow.runs as r
   where r.run_id = cascade_resolve_conditions.run_id;
  if not found or v_run.status = 'completed' then
    return true;
  elsif v_run.status = 'failed' then
    return false;
  end if;

  loop
    v_iteration := v_iteration + 1;
    if v_iteration > 50 then
      raise exception 'cascade_resolve_conditions exceeded safety limit of 50 iterations (run %)',
        cascade_resolve_conditions.run_id;
    end if;

    with candidates as (
      select ss.step_slug,
             s.step_index,
             s.when_unmet,
             s.required_input_pattern,
             s.forbidden_input_pattern,
             case
               when s.deps_count = 0 then v_run.input
               else coalesce(
                 (select jsonb_object_agg(d.dep_slug, dss.output)
                    from pgflow.deps as d
                    join pgflow.step_states as dss
                      on dss.run_id = ss.run_id and dss.step_slug = d.dep_slug
                   where d.flow_slug = ss.flow_slug
                     and d.step_slug = ss.step_slug
                     and dss.status = 'completed'),
                 '{}'::jsonb)
             end as condition_input
        from pgflow.step_states as ss
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
       where ss.run_id = cascade_resolve_conditions.run_id
         and ss.status = 'created'
         and ss.remaining_deps = 0
         and (s.required_input_pattern is not null or s.forbidden_input_pattern is not null)
    ),
    unmet as (
      select c.*
        from candidates as c
       where not (
               (c.required_input_pattern is null or c.condition_input @> c.required_input_pattern)
           and (c.forbidden_input_pattern is null or not (c.condition_input @> c.forbidden_input_pattern)))
    )
    select (select u.step_slug from unmet as u where u.when_unmet = 'fail' order by u.step_index limit 1),
           array(select u.step_slug from unmet as u where u.when_unmet = 'skip' order by u.step_index),
           array(select u.step_slug from unmet as u where u.when_unmet = 'skip-cascade' order by u.step_index)
      into v_fail_slug, v_skip, v_cascade;

    -- Phase fail: one unmet 'fail' condition fails the step and the whole run.
    if v_fail_slug is not null then
      update pgflow.step_states as ss
         set status = 'failed',
             failed_at = now(),
             error_message = 'Condition not met'
       where ss.run_id = cascade_resolve_conditions.run_id
         and ss.step_slug = v_fail_slug
      returning ss.* into v_step;

      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'step:failed',
          'run_id', v_step.run_id,
          'flow_slug', v_step.flow_slug,
          'step_slug', v_step.step_slug,
          'status', v_step.status,
          'error_message', v_step.error_message,
          'failed_at', v_step.failed_at),
        'step:' || v_step.step_slug || ':failed',
        v_step.run_id);

      update pgflow.runs as r
         set status = 'failed',
             failed_at = now()
       where r.run_id = cascade_resolve_conditions.run_id
      returning r.* into v_step;

      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'run:failed',
          'run_id', v_step.run_id,
          'flow_slug', v_step.flow_slug,
          'status', v_step.status,
          'error_message', 'Condition not met',
          'failed_at', v_step.failed_at),
        'run:failed',
        v_step.run_id);

      select array_agg(t.message_id order by t.message_id) into v_msg_ids
        from pgflow.step_tasks as t
       where t.run_id = cascade_resolve_conditions.run_id
         and t.status in ('queued', 'started')
         and t.message_id is not null;
      if v_msg_ids is not null then
        perform pgmq.archive(v_run.flow_slug, v_msg_ids);
      end if;

      return false;
    end if;

    -- Phase skip: skip the steps, release their dependents.
    v_skipped := '{}';
    if cardinality(v_skip) > 0 then
      for v_step in
        with skipped as (
          update pgflow.step_states as ss
             set status = 'skipped',
                 skip_reason = 'condition_unmet',
                 skipped_at = now()
           where ss.run_id = cascade_resolve_conditions.run_id
             and ss.step_slug = any (v_skip)
             and ss.status = 'created'
          returning ss.*
        )
        select sk.*, s.step_index
          from skipped as sk
          join pgflow.steps as s on s.flow_slug = sk.flow_slug and s.step_slug = sk.step_slug
         order by s.step_index
      loop
        v_skipped := v_skipped || v_step.step_slug;
        perform pgflow._emit_event(
          jsonb_build_object(
            'event_type', 'step:skipped',
            'run_id', v_step.run_id,
            'flow_slug', v_step.flow_slug,
            'step_slug', v_step.step_slug,
            'status', v_step.status,
            'skip_reason', v_step.skip_reason,
            'skipped_at', v_step.skipped_at),
          'step:' || v_step.step_slug || ':skipped',
          v_step.run_id);
      end loop;

      if cardinality(v_skipped) > 0 then
        update pgflow.step_states as child
           set remaining_deps = child.remaining_deps - parents.n,
               initial_tasks = case
                                 when parents.step_type = 'map' and parents.deps_count = 1
                                      and child.status = 'created' then 0
                                 else child.initial_tasks
                               end
          from (
            select d.step_slug, s.step_type, s.deps_count, count(*)::integer as n
              from pgflow.deps as d
              join pgflow.steps as s on s.flow_slug = d.flow_slug and s.step_slug = d.step_slug
             where d.flow_slug = v_run.flow_slug
               and d.dep_slug = any (v_skipped)
             group by d.step_slug, s.step_type, s.deps_count
          ) as parents
         where child.run_id = cascade_resolve_conditions.run_id
           and child.step_slug = parents.step_slug;

        update pgflow.runs as r
           set remaining_steps = r.remaining_steps - cardinality(v_skipped)
         where r.run_id = cascade_resolve_conditions.run_id;
      end if;
    end if;

    -- Phase skip-cascade: skip the step and everything downstream of it.
    foreach v_slug in array v_cascade loop
      perform pgflow._cascade_force_skip_steps(cascade_resolve_conditions.run_id, v_slug, 'condition_unmet');
    end loop;

    select r.status into v_status from pgflow.runs as r where r.run_id = cascade_resolve_conditions.run_id;
    if v_status <> 'started' then
      return v_status <> 'failed';
    end if;

    exit when cardinality(v_skipped) = 0;
  end loop;

  return true;
end;
$$;

-- 0100_function_complete_task.sql
-- pgflow.complete_task(run_id, step_slug, task_index, output) guarantees (returns the task row; none if unknown):
--   * rows are locked in the order run, step state, task (the same order as fail_task and requeue_stalled_tasks),
--     so concurrent callbacks of one run are serialised and never deadlock each other;
--   * failed run: nothing changes (its messages were archived when it failed);
--   * step not 'started' (late or replayed callback: completed, skipped, failed): this task's message is archived,
--     nothing else changes;
--   * task not 'started' (queued, completed, failed): nothing changes at all, no message is touched and no type
--     check runs (upstream pgflow failed the run on a bad output even for a never-started task);
--   * type violation: a single step that has a dependent map still waiting for its array ('created',
--     initial_tasks NULL; a map already skipped needs no array) and produced anything but a JSON array (SQL NULL
--     included) fails the run (run:failed), archives every queued/started message of the run, fails the task
--     ('[TYPE_VIOLATION] Produced <type> instead of array', output stored) and the step ('[TYPE_VIOLATION] Map
--     step <child> expects array input but dependency <step> produced <type>', step:failed); when_exhausted does
--     not apply;
--   * otherwise the task is completed with the output exactly as given, the step's remaining_tasks drops; on the
--     last task the step completes with its output (single: the task output; map: the outputs of all its tasks
--     as one array ordered by task_index), its dependents' remaining_deps drop, dependent maps learn their task
--     count, the run's remaining_steps drops, step:completed is emitted, conditions are resolved, taskless steps
--     cascade, ready steps start and the run completes when nothing is left;
--   * the task's message is archived once the task is completed.
create or replace function pgflow.complete_task(run_id uuid, step_slug text, task_index integer, output jsonb)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_run         pgflow.runs;
  v_state       pgflow.step_states;
  v_task        pgflow.step_tasks;
  v_step        pgflow.steps;
  v_child       text;
  v_type        text;
  v_step_output jsonb;
  v_msg_ids     bigint[];
  v_output_len  integer;
begin
  select r.* into v_run from pgflow.runs as r where r.run_id = complete_task.run_id for update;
  if not found then
    return;
  end if;

  select ss.* into v_state
    from pgflow.step_states as ss
   where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug
     for update;

  select t.* into v_task
    from pgflow.step_tasks as t
   where t.run_id = complete_task.run_id
     and t.step_slug = complete_task.step_slug
     and t.task_index = complete_task.task_index
     for update;
  if not found then
    return;
  end if;

  -- Failed run: nothing to do.
  if v_run.status = 'failed' then
    return next v_task;
    return;
  end if;

  -- Late or replayed callback for a step that is no longer running.
  if v_state.status is distinct from 'started' then
    if v_task.message_id is not null then
      perform pgmq.archive(v_run.flow_slug, v_task.message_id);
    end if;
    return next v_task;
    return;
  end if;

  -- Only a started task can complete.
  if v_task.status <> 'started' then
    return next v_task;
    return;
  end if;

  select s.* into v_step
    from pgflow.steps as s
   where s.flow_slug = v_run.flow_slug and s.step_slug = complete_task.step_slug;

  -- A single step feeding a map must produce an array.
  if v_step.step_type = 'single' and jsonb_typeof(complete_task.output) is distinct from 'array' then
    select c.step_slug into v_child
      from pgflow.deps as d
      join pgflow.steps as c on c.flow_slug = d.flow_slug and c.step_slug = d.step_slug
      join pgflow.step_states as cs on cs.run_id = complete_task.run_id and cs.step_slug = c.step_slug
     where d.flow_slug = v_run.flow_slug
       and d.dep_slug = complete_task.step_slug
       and c.step_type = 'map'
       and cs.status = 'created'
       and cs.initial_tasks is null
     order by c.step_index
     limit 1;

    if v_child is not null then
      v_type := coalesce(jsonb_typeof(complete_task.output), 'null');

      update pgflow.runs as r
         set status = 'failed',
             failed_at = now()
       where r.run_id = complete_task.run_id
      returning r.* into v_run;

      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'run:failed',
          'run_id', v_run.run_id,
          'flow_slug', v_run.flow_slug,
          'status', v_run.status,
          'error_message', format('[TYPE_VIOLATION] Map step %s expects array input but dependency %s produced %s',
                                  v_child, complete_task.step_slug, v_type),
          'failed_at', v_run.failed_at),
        'run:failed',
        v_run.run_id);

      select array_agg(t.message_id order by t.message_id) into v_msg_ids
        from pgflow.step_tasks as t
       where t.run_id = complete_task.run_id
         and t.status in ('queued', 'started')
         and t.message_id is not null;
      if v_msg_ids is not null then
        perform pgmq.archive(v_run.flow_slug, v_msg_ids);
      end if;

      update pgflow.step_tasks as t
         set status = 'failed',
             failed_at = now(),
             output = complete_task.output,
             error_message = format('[TYPE_VIOLATION] Produced %s instead of array', v_type)
       where t.run_id = complete_task.run_id
         and t.step_slug = complete_task.step_slug
         and t.task_index = complete_task.task_index
      returning t.* into v_task;

      update pgflow.step_states as ss
         set status = 'failed',
             failed_at = now(),
             error_message = format('[TYPE_VIOLATION] Map step %s expects array input but dependency %s produced %s',
                                    v_child, complete_task.step_slug, v_type)
       where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug
      returning ss.* into v_state;

      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'step:failed',
          'run_id', v_state.run_id,
          'flow_slug', v_state.flow_slug,
          'step_slug', v_state.step_slug,
          'status', v_state.status,
          'error_message', v_state.error_message,
          'failed_at', v_state.failed_at),
        'step:' || v_state.step_slug || ':failed',
        v_state.run_id);

      return next v_task;
      return;
    end if;
  end if;

  -- Complete the task.
  update pgflow.step_tasks as t
     set status = 'completed',
         completed_at = now(),
         output = complete_task.output
   where t.run_id = complete_task.run_id
     and t.step_slug = complete_task.step_slug
     and t.task_index = complete_task.task_index
  returning t.* into v_task;

  update pgflow.step_states as ss
     set remaining_tasks = ss.remaining_tasks - 1
   where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug
  returning ss.* into v_state;

  if v_state.remaining_tasks = 0 then
    if v_step.step_type = 'map' then
      select coalesce(jsonb_agg(t.output order by t.task_index), '[]'::jsonb) into v_step_output
        from pgflow.step_tasks as t
       where t.run_id = complete_task.run_id
         and t.step_slug = complete_task.step_slug
         and t.status = 'completed';
    else
      v_step_output := complete_task.output;
    end if;

    update pgflow.step_states as ss
       set status = 'completed',
           completed_at = now(),
           output = v_step_output
     where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug
    returning ss.* into v_state;

    -- Not computed inside the CASE below: the planner may fold a CASE arm with constant arguments even when the
    -- arm is never taken, and jsonb_array_length raises on a non-array.
    if jsonb_typeof(v_step_output) = 'array' then
      v_output_len := jsonb_array_length(v_step_output);
    end if;

    update pgflow.step_states as cs
       set remaining_deps = cs.remaining_deps - 1,
           initial_tasks = case
                             when c.step_type = 'map' and cs.initial_tasks is null then v_output_len
                             else cs.initial_tasks
                           end
      from pgflow.deps as d
      join pgflow.steps as c on c.flow_slug = d.flow_slug and c.step_slug = d.step_slug
     where d.flow_slug = v_run.flow_slug
       and d.dep_slug = complete_task.step_slug
       and cs.run_id = complete_task.run_id
       and cs.step_slug = d.step_slug;

    update pgflow.runs as r
       set remaining_steps = r.remaining_steps - 1
     where r.run_id = complete_task.run_id;

    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'step:completed',
        'run_id', v_state.run_id,
        'flow_slug', v_state.flow_slug,
        'step_slug', v_state.step_slug,
        'status', v_state.status,
        'output', v_state.output,
        'completed_at', v_state.completed_at),
      'step:' || v_state.step_slug || ':completed',
      v_state.run_id);

    if not pgflow.cascade_resolve_conditions(complete_task.run_id) then
      if v_task.message_id is not null then
        perform pgmq.archive(v_run.flow_slug, v_task.message_id);
      end if;
      return next v_task;
      return;
    end if;

    perform pgflow.cascade_complete_taskless_steps(complete_task.run_id);
  end if;

  if v_task.message_id is not null then
    perform pgmq.archive(v_run.flow_slug, v_task.message_id);
  end if;

  perform pgflow.start_ready_steps(complete_task.run_id);
  perform pgflow.maybe_complete_run(complete_task.run_id);

  return next v_task;
end;
$$;

-- 0100_function_create_flow.sql
-- pgflow.create_flow(flow_slug, max_attempts, base_delay, timeout) guarantees:
--   * idempotent: the first call inserts the flow (NULL options become max_attempts 3, base_delay 5, timeout 60);
--     later calls return the existing row unchanged (options are NOT updated);
--   * the flow's PGMQ queue, named exactly flow_slug, exists afterwards (also for a flow without steps);
--   * a valid slug that cannot name a PGMQ queue (more than 47 characters) is rejected before anything is written,
--     and so is a slug that differs only in letter case from an existing flow or queue (PGMQ lower-cases its
--     table names, so the two would share one queue table);
--   * invalid slugs and options fail on the flows CHECK constraints (slug_is_valid, opt_*).
create or replace function pgflow.create_flow(
  flow_slug    text,
  max_attempts integer default null,
  base_delay   integer default null,
  timeout      integer default null
)
returns pgflow.flows
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_flow  pgflow.flows;
  v_clash text;
begin
  if pgflow.is_valid_slug(create_flow.flow_slug) then
    if length(create_flow.flow_slug) > 47 then
      raise exception using
        errcode = '22023',
        message = format(
          'Flow slug "%s" is %s characters long, but a flow slug also names the flow''s PGMQ queue, which allows at most 47',
          create_flow.flow_slug, length(create_flow.flow_slug)),
        hint = 'Choose a flow slug of at most 47 characters.';
    end if;

    select c.name into v_clash
    from (
      select f.flow_slug as name from pgflow.flows as f
      union
      select q.queue_name from pgmq.list_queues() as q
    ) as c
    where lower(c.name) = lower(create_flow.flow_slug)
      and c.name <> create_flow.flow_slug
    order by c.name
    limit 1;

    if v_clash is not null then
      raise exception using
        errcode = '23505',
        message = format(
          'Flow slug "%s" differs only in letter case from existing flow or queue "%s"; PGMQ queue tables are named in lower case, so both would share one queue',
          create_flow.flow_slug, v_clash),
        hint = 'Choose a flow slug that differs in more than letter case.';
    end if;
  end if;

  insert into pgflow.flows as f (flow_slug, opt_max_attempts, opt_base_delay, opt_timeout)
  values (
    create_flow.flow_slug,
    coalesce(create_flow.max_attempts, 3),
    coalesce(create_flow.base_delay, 5),
    coalesce(create_flow.timeout, 60)
  )
  on conflict on constraint flows_pkey do update set flow_slug = f.flow_slug
  returning f.* into v_flow;

  if not exists (select 1 from pgmq.list_queues() as q where q.queue_name = create_flow.flow_slug) then
    perform pgmq.create(create_flow.flow_slug);
  end if;

  return v_flow;
end;
$$;

-- 0100_function_delete_flow_and_data.sql
-- pgflow.delete_flow_and_data(p_flow_slug) guarantees: removes the flow completely in the caller's transaction:
-- its PGMQ queue with its archive (when the queue exists), then all of its step_tasks, step_states, runs, deps,
-- steps and the flow row. Destructive and irreversible; meant for development and for recompiling a changed
-- flow. Workers rows are not touched. An unknown flow (or one whose queue is already gone) is not an error.
create or replace function pgflow.delete_flow_and_data(p_flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if exists (select 1 from pgmq.list_queues() as q where q.queue_name = p_flow_slug) then
    perform pgmq.drop_queue(p_flow_slug);
  end if;

  delete from pgflow.step_tasks as t where t.flow_slug = p_flow_slug;
  delete from pgflow.step_states as ss where ss.flow_slug = p_flow_slug;
  delete from pgflow.runs as r where r.flow_slug = p_flow_slug;
  delete from pgflow.deps as d where d.flow_slug = p_flow_slug;
  delete from pgflow.steps as s where s.flow_slug = p_flow_slug;
  delete from pgflow.flows as f where f.flow_slug = p_flow_slug;
end;
$$;

-- 0100_function_ensure_flow_compiled.sql
-- pgflow.ensure_flow_compiled(flow_slug, shape, allow_data_loss) guarantees: after it returns, the stored flow has
-- the caller's shape, or nothing was changed and the result says why. Result: {"status": s, "differences": [...]}
--   * 'compiled'   - the flow did not exist and was created from the shape (in any environment);
--   * 'verified'   - the stored shape equals the caller's; nothing changed;
--   * 'recompiled' - shapes differed and pgflow.is_local() or allow_data_loss: the flow and ALL its data (runs,
--                    states, tasks, queue and archive) were deleted and the flow created again from the shape;
--   * 'mismatch'   - shapes differed otherwise; nothing changed.
-- differences lists _compare_flow_shapes(shape, stored shape) (the caller's shape is "first").
-- Concurrent calls for one slug are serialised by a transaction-level advisory lock (1, hashtext(flow_slug)).
create or replace function pgflow.ensure_flow_compiled(
  flow_slug       text,
  shape           jsonb,
  allow_data_loss boolean default false
)
returns jsonb
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_differences text[];
begin
  perform pg_advisory_xact_lock(1, hashtext(ensure_flow_compiled.flow_slug));

  if not exists (select 1 from pgflow.flows as f where f.flow_slug = ensure_flow_compiled.flow_slug) then
    perform pgflow._create_flow_from_shape(ensure_flow_compiled.flow_slug, ensure_flow_compiled.shape);
    return jsonb_build_object('status', 'compiled', 'differences', '[]'::jsonb);
  end if;

  v_differences := pgflow._compare_flow_shapes(
    ensure_flow_compiled.shape, pgflow._get_flow_shape(ensure_flow_compiled.flow_slug));

  if cardinality(v_differences) = 0 then
    return jsonb_build_object('status', 'verified', 'differences', '[]'::jsonb);
  end if;

  if pgflow.is_local() or coalesce(ensure_flow_compiled.allow_data_loss, false) then
    perform pgflow.delete_flow_and_data(ensure_flow_compiled.flow_slug);
    perform pgflow._create_flow_from_shape(ensure_flow_compiled.flow_slug, ensure_flow_compiled.shape);
    return jsonb_build_object('status', 'recompiled', 'differences', to_jsonb(v_differences));
  end if;

  return jsonb_build_object('status', 'mismatch', 'differences', to_jsonb(v_differences));
end;
$$;

-- 0100_function_fail_task.sql
-- pgflow.fail_task(run_id, step_slug, task_index, error_message) guarantees (returns the task row; none if
-- unknown):
--   * rows are locked in the order run, step state, task (as in complete_task and requeue_stalled_tasks);
--   * failed run: a 'started' task becomes 'failed' with the message and its queue message is archived; no retry,
--     no event;
--   * step not 'started' (late or replayed callback): this task's message is archived, nothing else changes (no
--     double decrement, no event);
--   * task not 'started': nothing changes at all, the message keeps its visibility (upstream pgflow pushed it by
--     the retry delay);
--   * attempts left (attempts_count < coalesce(step, flow) opt_max_attempts, and the task was not given up as
--     permanently stalled): the task goes back to 'queued' (started_at NULL, error_message kept) and its message
--     becomes visible after pgflow.calculate_retry_delay(coalesce(step, flow) opt_base_delay, attempts_count)
--     seconds from now; no event;
--   * exhausted: the task becomes 'failed' and its message is archived, then per the step's when_exhausted:
--     'fail' -> step and run fail, step:failed then run:failed, every queued/started message of the run archived;
--     'skip' -> step skipped (handler_failed, error_message kept), sibling messages archived, step:skipped,
--     dependents released (map dependents get 0 tasks), conditions, taskless cascade, ready steps start, the run
--     may complete; 'skip-cascade' -> like 'skip' but every dependent is skipped (dependency_skipped).
create or replace function pgflow.fail_task(run_id uuid, step_slug text, task_index integer, error_message text)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_run            pgflow.runs;
  v_state          pgflow.step_states;
  v_task           pgflow.step_tasks;
  v_max_attempts   integer;
  v_base_delay     integer;
  v_when_exhausted text;
  v_msg_ids        bigint[];
begin
  select r.* into v_run from pgflow.runs as r where r.run_id = fail_task.run_id for update;
  if not found then
    return;
  end if;

  select ss.* into v_state
    from pgflow.step_states as ss
   where ss.run_id = fail_task.run_id and ss.step_slug = fail_task.step_slug
     for update;

  select t.* into v_task
    from pgflow.step_tasks as t
   where t.run_id = fail_task.run_id
     and t.step_slug = fail_task.step_slug
     and t.task_index = fail_task.task_index
     for update;
  if not found then
    return;
  end if;

  -- Failed run: record the failure of a running task, never retry.
  if v_run.status = 'failed' then
    if v_task.status = 'started' then
      update pgflow.step_tasks as t
         set status = 'failed',
             failed_at = now(),
             error_message = fail_task.error_message
       where t.run_id = fail_task.run_id
         and t.step_slug = fail_task.step_slug
         and t.task_index = fail_task.task_index
      returning t.* into v_task;
    end if;
    if v_task.message_id is not null then
      perform pgmq.archive(v_run.flow_slug, v_task.message_id);
    end if;
    return next v_task;
    return;
  end if;

  -- Late or replayed callback for a step that is no longer running.
  if v_state.status is distinct from 'started' then
    if v_task.message_id is not null then
      perform pgmq.archive(v_run.flow_slug, v_task.message_id);
    end if;
    return next v_task;
    return;
  end if;

  -- Only a started task can fail.
  if v_task.status <> 'started' then
    return next v_task;
    return;
  end if;

  select coalesce(s.opt_max_attempts, f.opt_max_attempts),
         coalesce(s.opt_base_delay, f.opt_base_delay),
         s.when_exhausted
    into v_max_attempts, v_base_delay, v_when_exhausted
    from pgflow.steps as s
    join pgflow.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v_run.flow_slug and s.step_slug = fail_task.step_slug;

  -- Retry.
  if v_task.attempts_count < v_max_attempts and v_task.permanently_stalled_at is null then
    update pgflow.step_tasks as t
       set status = 'queued',
           started_at = null,
           failed_at = null,
           error_message = fail_task.error_message
     where t.run_id = fail_task.run_id
       and t.step_slug = fail_task.step_slug
       and t.task_index = fail_task.task_index
    returning t.* into v_task;

    if v_task.message_id is not null then
      perform pgmq.set_vt(v_run.flow_slug, v_task.message_id,
                          pgflow.calculate_retry_delay(v_base_delay, v_task.attempts_count));
    end if;
    return next v_task;
    return;
  end if;

  -- Exhausted.
  update pgflow.step_tasks as t
     set status = 'failed',
         failed_at = now(),
         error_message = fail_task.error_message
   where t.run_id = fail_task.run_id
     and t.step_slug = fail_task.step_slug
     and t.task_index = fail_task.task_index
  returning t.* into v_task;

  if v_task.message_id is not null then
    perform pgmq.archive(v_run.flow_slug, v_task.message_id);
  end if;

  if v_when_exhausted = 'fail' then
    update pgflow.step_states as ss
       set status = 'failed',
           failed_at = now(),
           error_message = fail_task.error_message
     where ss.run_id = fail_task.run_id and ss.step_slug = fail_task.step_slug
    returning ss.* into v_state;

    update pgflow.runs as r
       set status = 'failed',
           failed_at = now()
     where r.run_id = fail_task.run_id
    returning r.* into v_run;

    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'step:failed',
        'run_id', v_state.run_id,
        'flow_slug', v_state.flow_slug,
        'step_slug', v_state.step_slug,
        'status', v_state.status,
        'error_message', v_state.error_message,
        'failed_at', v_state.failed_at),
      'step:' || v_state.step_slug || ':failed',
      v_state.run_id);

    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'run:failed',
        'run_id', v_run.run_id,
        'flow_slug', v_run.flow_slug,
        'status', v_run.status,
        'error_message', fail_task.error_message,
        'failed_at', v_run.failed_at),
      'run:failed',
      v_run.run_id);

    select array_agg(t.message_id order by t.message_id) into v_msg_ids
      from pgflow.step_tasks as t
     where t.run_id = fail_task.run_id
       and t.status in ('queued', 'started')
       and t.message_id is not null;
    if v_msg_ids is not null then
      perform pgmq.archive(v_run.flow_slug, v_msg_ids);
    end if;

    return next v_task;
    return;
  end if;

  -- when_exhausted 'skip' or 'skip-cascade': the step is skipped, the run goes on.
  update pgflow.step_states as ss
     set status = 'skipped',
         skip_reason = 'handler_failed',
         skipped_at = now(),
         error_message = fail_task.error_message,
         remaining_tasks = null,
         failed_at = null
   where ss.run_id = fail_task.run_id and ss.step_slug = fail_task.step_slug
  returning ss.* into v_state;

  update pgflow.runs as r
     set remaining_steps = r.remaining_steps - 1
   where r.run_id = fail_task.run_id;

  select array_agg(t.message_id order by t.message_id) into v_msg_ids
    from pgflow.step_tasks as t
   where t.run_id = fail_task.run_id
     and t.step_slug = fail_task.step_slug
     and t.status in ('queued', 'started')
     and t.message_id is not null;
  if v_msg_ids is not null then
    perform pgmq.archive(v_run.flow_slug, v_msg_ids);
  end if;

  perform pgflow._emit_event(
    jsonb_build_object(
      'event_type', 'step:skipped',
      'run_id', v_state.run_id,
      'flow_slug', v_state.flow_slug,
      'step_slug', v_state.step_slug,
      'status', v_state.status,
      'skip_reason', v_state.skip_reason,
      'error_message', v_state.error_message,
      'skipped_at', v_state.skipped_at),
    'step:' || v_state.step_slug || ':skipped',
    v_state.run_id);

  if v_when_exhausted = 'skip-cascade' then
    perform pgflow._cascade_force_skip_steps(fail_task.run_id, fail_task.step_slug, 'handler_failed');
  else
    update pgflow.step_states as cs
       set remaining_deps = cs.remaining_deps - 1,
           initial_tasks = case
                             when c.step_type = 'map' and c.deps_count = 1 and cs.status = 'created' then 0
                             else cs.initial_tasks
                           end
      from pgflow.deps as d
      join pgflow.steps as c on c.flow_slug = d.flow_slug and c.step_slug = d.step_slug
     where d.flow_slug = v_run.flow_slug
       and d.dep_slug = fail_task.step_slug
       and cs.run_id = fail_task.run_id
       and cs.step_slug = d.step_slug;

    if not pgflow.cascade_resolve_conditions(fail_task.run_id) then
      perform pgflow._archive_task_message(fail_task.run_id, fail_task.step_slug, fail_task.task_index);
      return next v_task;
      return;
    end if;

    perform pgflow.cascade_complete_taskless_steps(fail_task.run_id);
    perform pgflow.start_ready_steps(fail_task.run_id);
  end if;

  perform pgflow.maybe_complete_run(fail_task.run_id);

  return next v_task;
end;
$$;

-- 0100_function_get_run_with_states.sql
-- pgflow.get_run_with_states(run_id) guarantees: one consistent read of a run and all its step states as
-- {"run": <runs row as jsonb>, "steps": [<step_states rows as jsonb>, ...]}, the steps in step_index order
-- ([] when the flow has no steps); keys are the column names. Returns SQL NULL for an unknown run_id.
-- Changes nothing. SECURITY DEFINER so an operator can grant API users this one function instead of the tables.
create or replace function pgflow.get_run_with_states(run_id uuid)
returns jsonb
language sql
volatile
security definer
set search_path = ''
as $$
  select jsonb_build_object(
           'run', to_jsonb(r),
           'steps', coalesce(
             (select jsonb_agg(to_jsonb(ss) order by s.step_index)
                from pgflow.step_states as ss
                join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
               where ss.run_id = r.run_id),
             '[]'::jsonb))
    from pgflow.runs as r
   where r.run_id = get_run_with_states.run_id;
$$;

-- 0100_function_heartbeat_worker.sql
-- pgflow.heartbeat_worker(worker_id) guarantees: records that the worker is alive (last_heartbeat_at =
-- clock_timestamp()) and returns true when the worker has been deprecated and should finish its in-flight work and
-- exit, false otherwise. An unregistered worker_id raises (SQLSTATE P0002) naming the id, so the worker can
-- register again instead of heartbeating into nothing.
create or replace function pgflow.heartbeat_worker(worker_id uuid)
returns boolean
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_deprecated boolean;
begin
  update pgflow.workers as w
  set last_heartbeat_at = clock_timestamp()
  where w.worker_id = heartbeat_worker.worker_id
  returning w.deprecated_at is not null into v_deprecated;

  if not found then
    raise exception using
      errcode = 'P0002',
      message = format('Worker %s is not registered', heartbeat_worker.worker_id),
      hint = 'Call pgflow.register_worker(worker_id, queue_name, function_name) first.';
  end if;

  return v_deprecated;
end;
$$;

-- 0100_function_is_local.sql
-- pgflow.is_local() guarantees: true exactly when this session runs against a local development database, which
-- pgflow-go recognises in two ways:
--   * the custom setting pgflow.environment is 'local' (set by `pgflow dev` / the demo, or by an operator with
--     `alter database ... set pgflow.environment = 'local'`);
--   * the setting app.settings.jwt_secret holds the fixed JWT secret of a local Supabase CLI stack (as pgflow does).
-- Missing settings count as "not local". Used by ensure_flow_compiled to allow destructive recompilation.
create or replace function pgflow.is_local()
returns boolean
language sql
stable
parallel safe
set search_path = ''
as $$
  select coalesce(current_setting('pgflow.environment', true), '') = 'local'
      or coalesce(current_setting('app.settings.jwt_secret', true), '')
         = 'super-secret-jwt-token-with-at-least-32-characters-long';
$$;

-- 0100_function_mark_worker_stopped.sql
-- pgflow.mark_worker_stopped(worker_id) guarantees: the worker is recorded as gone after a graceful shutdown:
-- stopped_at and last_heartbeat_at become clock_timestamp(), and deprecated_at is set too unless an operator set it
-- earlier (so no keep-alive logic counts the worker as alive). An unknown worker_id changes nothing.
create or replace function pgflow.mark_worker_stopped(worker_id uuid)
returns void
language sql
volatile
set search_path = ''
as $$
  update pgflow.workers as w
  set stopped_at = clock_timestamp(),
      last_heartbeat_at = clock_timestamp(),
      deprecated_at = coalesce(w.deprecated_at, clock_timestamp())
  where w.worker_id = mark_worker_stopped.worker_id;
$$;

-- 0100_function_maybe_complete_run.sql
-- pgflow.maybe_complete_run(run_id) guarantees: a 'started' run whose remaining_steps is 0 becomes 'completed'
-- (completed_at now) with output = {<leaf step slug>: <stored step output>} over the leaf steps (no dependents)
-- that completed (skipped leaves are absent; NULL when no leaf completed), and run:completed is emitted. Outputs
-- are copied as stored, so 0, false, "" and null stay exactly that. A run that is already completed or failed,
-- or still has steps left, is not touched (upstream only excluded 'completed').
create or replace function pgflow.maybe_complete_run(run_id uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_run pgflow.runs;
begin
  update pgflow.runs as r
     set status = 'completed',
         completed_at = now(),
         output = (
           select jsonb_object_agg(ss.step_slug, ss.output)
             from pgflow.step_states as ss
            where ss.run_id = r.run_id
              and ss.status = 'completed'
              and not exists (
                select 1 from pgflow.deps as d where d.flow_slug = r.flow_slug and d.dep_slug = ss.step_slug))
   where r.run_id = maybe_complete_run.run_id
     and r.status = 'started'
     and r.remaining_steps = 0
  returning r.* into v_run;

  if found then
    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'run:completed',
        'run_id', v_run.run_id,
        'flow_slug', v_run.flow_slug,
        'status', v_run.status,
        'output', v_run.output,
        'completed_at', v_run.completed_at),
      'run:completed',
      v_run.run_id);
  end if;
end;
$$;

-- 0100_function_poll_for_tasks.sql
-- pgflow.poll_for_tasks(...) guarantees: nothing. It is a deprecated stub kept so that very old workers calling it
-- get a NOTICE telling them to upgrade instead of an "undefined function" error; it returns no rows and changes
-- nothing. Current workers read with pgmq.read_with_poll and claim with pgflow.start_tasks.
create or replace function pgflow.poll_for_tasks(
  queue_name       text,
  vt               integer,
  qty              integer,
  max_poll_seconds integer default 5,
  poll_interval_ms integer default 100
)
returns setof pgflow.step_task_record
language plpgsql
volatile
set search_path = ''
as $$
begin
  raise notice 'pgflow.poll_for_tasks is deprecated and returns no tasks (queue %): update the worker; it must read with pgmq.read_with_poll and claim with pgflow.start_tasks',
    poll_for_tasks.queue_name;
  return;
end;
$$;

-- 0100_function_register_worker.sql
-- pgflow.register_worker(worker_id, queue_name, function_name) guarantees: a workers row for worker_id exists
-- afterwards and describes a live worker: queue_name and function_name as given, started_at and
-- last_heartbeat_at = clock_timestamp(), deprecated_at and stopped_at NULL (registering again starts a new life
-- of the same id). Returns the row. Must run before the worker claims tasks (step_tasks.last_worker_id references
-- it).
create or replace function pgflow.register_worker(worker_id uuid, queue_name text, function_name text)
returns pgflow.workers
language sql
volatile
set search_path = ''
as $$
  insert into pgflow.workers as w (worker_id, queue_name, function_name, started_at, last_heartbeat_at)
  values (
    register_worker.worker_id, register_worker.queue_name, register_worker.function_name,
    clock_timestamp(), clock_timestamp()
  )
  on conflict on constraint workers_pkey do update set
    queue_name = excluded.queue_name,
    function_name = excluded.function_name,
    started_at = excluded.started_at,
    last_heartbeat_at = excluded.last_heartbeat_at,
    deprecated_at = null,
    stopped_at = null
  returning w.*;
$$;

-- 0100_function_requeue_stalled_tasks.sql
-- pgflow.requeue_stalled_tasks() guarantees (run periodically by one worker per database, under an advisory lock;
-- safe to run concurrently with itself and with callbacks):
--   * a task is stalled when it is 'started', not given up, its run and step are still 'started', and it started
--     more than the effective step timeout (steps.opt_timeout, else flows.opt_timeout) + 30 seconds ago (upstream
--     pgflow used only the flow timeout);
--   * a stalled task requeued fewer than 3 times goes back to 'queued' (started_at and last_worker_id cleared,
--     requeued_count + 1, last_requeued_at now; attempts_count kept) and its message becomes visible at once;
--     rows locked by someone else are skipped (FOR UPDATE SKIP LOCKED) and picked up on a later call;
--   * a stalled task already requeued 3 times is given up: permanently_stalled_at is set and it fails through
--     the ordinary failure path, pgflow.fail_task, as an exhausted task, so its step and run fail, or the step is
--     skipped per when_exhausted (upstream pgflow left such runs 'started' forever);
--   * returns the number of tasks requeued (not counting the ones given up).
create or replace function pgflow.requeue_stalled_tasks()
returns integer
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_requeued integer := 0;
  v_queue    record;
  v_task     record;
begin
  for v_queue in
    with stalled as (
      select t.run_id, t.step_slug, t.task_index
        from pgflow.step_tasks as t
        join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
        join pgflow.flows as f on f.flow_slug = t.flow_slug
        join pgflow.runs as r on r.run_id = t.run_id
        join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
       where t.status = 'started'
         and t.permanently_stalled_at is null
         and t.requeued_count < 3
         and r.status = 'started'
         and ss.status = 'started'
         and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
         for update of t skip locked
    ),
    requeued as (
      update pgflow.step_tasks as t
         set status = 'queued',
             started_at = null,
             last_worker_id = null,
             requeued_count = t.requeued_count + 1,
             last_requeued_at = now()
        from stalled as st
       where t.run_id = st.run_id
         and t.step_slug = st.step_slug
         and t.task_index = st.task_index
         and t.status = 'started'
      returning t.flow_slug, t.message_id
    )
    select rq.flow_slug,
           count(*)::integer as n,
           array_agg(rq.message_id order by rq.message_id) filter (where rq.message_id is not null) as msg_ids
      from requeued as rq
     group by rq.flow_slug
     order by rq.flow_slug
  loop
    v_requeued := v_requeued + v_queue.n;
    if v_queue.msg_ids is not null then
      perform pgflow.set_vt_batch(v_queue.flow_slug, v_queue.msg_ids,
                                  array_fill(0, array[cardinality(v_queue.msg_ids)]));
    end if;
  end loop;

  for v_task in
    select t.run_id, t.step_slug, t.task_index, t.requeued_count,
           coalesce(s.opt_timeout, f.opt_timeout) as timeout_seconds
      from pgflow.step_tasks as t
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.flows as f on f.flow_slug = t.flow_slug
      join pgflow.runs as r on r.run_id = t.run_id
      join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
     where t.status = 'started'
       and t.permanently_stalled_at is null
       and t.requeued_count >= 3
       and r.status = 'started'
       and ss.status = 'started'
       and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout) + 30)
     order by t.run_id, s.step_index, t.task_index
  loop
    -- Lock the run first, like complete_task and fail_task, then re-check: a callback may have won meanwhile.
    perform 1 from pgflow.runs as r where r.run_id = v_task.run_id for update;

    update pgflow.step_tasks as t
       set permanently_stalled_at = now()
     where t.run_id = v_task.run_id
       and t.step_slug = v_task.step_slug
       and t.task_index = v_task.task_index
       and t.status = 'started'
       and t.permanently_stalled_at is null
       and t.started_at < now() - make_interval(secs => v_task.timeout_seconds + 30);

    if found then
      perform pgflow.fail_task(
        v_task.run_id, v_task.step_slug, v_task.task_index,
        format('Task stalled: not finished within its timeout (%s s) + 30 s after %s requeues; given up by requeue_stalled_tasks',
               v_task.timeout_seconds, v_task.requeued_count));
    end if;
  end loop;

  return v_requeued;
end;
$$;

-- 0100_function_set_vt_batch.sql
-- pgflow.set_vt_batch(queue_name, msg_ids, vt_offsets) guarantees: for each pair (msg_ids[i], vt_offsets[i]) the
-- message in queue queue_name becomes invisible until clock_timestamp() + vt_offsets[i] seconds (0 = visible now),
-- in one statement; read_ct is unchanged. Returns the updated messages; ids not in the queue are not returned.
-- NULL or empty arrays change nothing and return no rows. Arrays of different lengths raise
-- 'msg_ids length (<a>) must equal vt_offsets length (<b>)'; an unknown queue raises
-- 'relation "pgmq.q_<name>" does not exist' (42P01). PGMQ has no batch set_vt, so this is one of the two places
-- that update a PGMQ queue table directly (the table name comes from pgmq.format_table_name, which validates it).
create or replace function pgflow.set_vt_batch(queue_name text, msg_ids bigint[], vt_offsets integer[])
returns table (
  msg_id      bigint,
  read_ct     integer,
  enqueued_at timestamptz,
  vt          timestamptz,
  message     jsonb,
  headers     jsonb
)
language plpgsql
volatile
set search_path = ''
as $$
begin
  if set_vt_batch.msg_ids is null or set_vt_batch.vt_offsets is null
     or coalesce(cardinality(set_vt_batch.msg_ids), 0) = 0 then
    return;
  end if;

  if cardinality(set_vt_batch.msg_ids) <> cardinality(set_vt_batch.vt_offsets) then
    raise exception 'msg_ids length (%) must equal vt_offsets length (%)',
      cardinality(set_vt_batch.msg_ids), cardinality(set_vt_batch.vt_offsets);
  end if;

  return query execute format(
    $sql$
    update pgmq.%I as q
       set vt = clock_timestamp() + make_interval(secs => v.vt_offset)
      from unnest($1::bigint[], $2::integer[]) as v(msg_id, vt_offset)
     where q.msg_id = v.msg_id
    returning q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers
    $sql$,
    pgmq.format_table_name(set_vt_batch.queue_name, 'q'))
    using set_vt_batch.msg_ids, set_vt_batch.vt_offsets;
end;
$$;

-- 0100_function_start_flow.sql
-- pgflow.start_flow(flow_slug, input, run_id) guarantees:
--   * a flow with root map steps only starts with an array input: SQL NULL raises
--     'Flow <slug> has root map steps but input is NULL', any other JSON type raises
--     'Flow <slug> has root map steps but input is not an array (got <type>)' (P0001), before anything is written;
--   * one run row (run_id = the given one, else random; remaining_steps = number of steps) and one 'created'
--     step state per step (remaining_deps = deps_count; initial_tasks = 1 for single steps, the input array length
--     for root maps, NULL for dependent maps until their parent completes) are written in this transaction;
--   * run:started is emitted, then conditions of ready steps are resolved (a 'fail' condition fails the run and no
--     task is ever created), taskless steps complete, ready steps start (tasks and messages are created) and the
--     run completes if nothing is left (e.g. a flow without steps);
--   * returns the run row as it is at the end ('started', 'completed' or 'failed').
-- Errors: unknown flow -> runs_flow_slug_fkey; an existing run_id -> runs_pkey (a retried start with the same
-- run_id therefore never creates a second run); NULL input without root maps -> not-null violation on runs.input.
create or replace function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid default null)
returns setof pgflow.runs
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_run_id     uuid;
  v_step_count integer;
  v_root_maps  integer;
  v_run        pgflow.runs;
  v_input_len  integer;
begin
  select count(*), count(*) filter (where s.step_type = 'map' and s.deps_count = 0)
    into v_step_count, v_root_maps
    from pgflow.steps as s
   where s.flow_slug = start_flow.flow_slug;

  if v_root_maps > 0 then
    if start_flow.input is null then
      raise exception 'Flow % has root map steps but input is NULL', start_flow.flow_slug;
    elsif jsonb_typeof(start_flow.input) <> 'array' then
      raise exception 'Flow % has root map steps but input is not an array (got %)',
        start_flow.flow_slug, jsonb_typeof(start_flow.input);
    end if;
  end if;

  -- Computed here, not inside the CASE below: the planner may fold a CASE arm with constant arguments even when
  -- the arm is never taken, and jsonb_array_length raises on a non-array.
  if jsonb_typeof(start_flow.input) = 'array' then
    v_input_len := jsonb_array_length(start_flow.input);
  end if;

  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps)
  values (coalesce(start_flow.run_id, gen_random_uuid()), start_flow.flow_slug, start_flow.input, v_step_count)
  returning * into v_run;
  v_run_id := v_run.run_id;

  insert into pgflow.step_states (flow_slug, run_id, step_slug, remaining_deps, initial_tasks)
  select s.flow_slug,
         v_run_id,
         s.step_slug,
         s.deps_count,
         case
           when s.step_type = 'map' and s.deps_count = 0 then v_input_len
           when s.step_type = 'map' then null
           else 1
         end
    from pgflow.steps as s
   where s.flow_slug = v_run.flow_slug
   order by s.step_index;

  perform pgflow._emit_event(
    jsonb_build_object(
      'event_type', 'run:started',
      'run_id', v_run.run_id,
      'flow_slug', v_run.flow_slug,
      'input', v_run.input,
      'status', v_run.status,
      'remaining_steps', v_run.remaining_steps,
      'started_at', v_run.started_at),
    'run:started',
    v_run_id);

  if pgflow.cascade_resolve_conditions(v_run_id) then
    perform pgflow.cascade_complete_taskless_steps(v_run_id);
    perform pgflow.start_ready_steps(v_run_id);
    perform pgflow.maybe_complete_run(v_run_id);
  end if;

  return query select r.* from pgflow.runs as r where r.run_id = v_run_id;
end;
$$;

-- 0100_function_start_flow_with_states.sql
-- pgflow.start_flow_with_states(flow_slug, input, run_id) guarantees: exactly pgflow.start_flow (same checks,
-- same errors, same effects), then returns pgflow.get_run_with_states of the new run, i.e.
-- {"run": <run row>, "steps": [<step state rows>]} as it is at the end of the start. SECURITY DEFINER so an
-- operator can grant API users this one function instead of the tables.
create or replace function pgflow.start_flow_with_states(flow_slug text, input jsonb, run_id uuid default null)
returns jsonb
language plpgsql
volatile
security definer
set search_path = ''
as $$
declare
  v_run_id uuid;
begin
  select r.run_id
    into v_run_id
    from pgflow.start_flow(start_flow_with_states.flow_slug, start_flow_with_states.input,
                           start_flow_with_states.run_id) as r
   limit 1;

  return pgflow.get_run_with_states(v_run_id);
end;
$$;

-- 0100_function_start_ready_steps.sql
-- pgflow.start_ready_steps(run_id) guarantees:
--   * nothing happens unless the run is 'started';
--   * every step state of the run that is 'created' with remaining_deps 0 and initial_tasks > 0 becomes 'started'
--     (started_at now, remaining_tasks = initial_tasks), exactly once even when called concurrently;
--   * per started step, in step_index order: step:started is emitted, one message per task
--     {"flow_slug", "run_id", "step_slug", "task_index"} is sent with one pgmq.send_batch call, delayed by the
--     step's opt_start_delay seconds (NULL = 0), and one 'queued' step_tasks row per message is written with its
--     message_id (task_index 0 .. initial_tasks-1, paired with the message carrying that index);
--   * steps with initial_tasks NULL (dependent maps whose parent has not completed) or 0 (taskless, completed by
--     cascade_complete_taskless_steps) are never started here. Conditions are not evaluated here: callers resolve
--     them first (cascade_resolve_conditions / cascade_complete_taskless_steps).
create or replace function pgflow.start_ready_steps(run_id uuid)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_run_status text;
  v_step       record;
begin
  select r.status into v_run_status from pgflow.runs as r where r.run_id = start_ready_steps.run_id;
  if v_run_status is distinct from 'started' then
    return;
  end if;

  for v_step in
    with started as (
      update pgflow.step_states as ss
         set status = 'started',
             started_at = now(),
             remaining_tasks = ss.initial_tasks
       where ss.run_id = start_ready_steps.run_id
         and ss.status = 'created'
         and ss.remaining_deps = 0
         and ss.initial_tasks > 0
      returning ss.flow_slug, ss.run_id, ss.step_slug, ss.status, ss.started_at, ss.remaining_tasks,
                ss.remaining_deps, ss.initial_tasks
    )
    select st.*, s.step_index, coalesce(s.opt_start_delay, 0) as start_delay
      from started as st
      join pgflow.steps as s on s.flow_slug = st.flow_slug and s.step_slug = st.step_slug
     order by s.step_index
  loop
    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'step:started',
        'run_id', v_step.run_id,
        'flow_slug', v_step.flow_slug,
        'step_slug', v_step.step_slug,
        'status', v_step.status,
        'started_at', v_step.started_at,
        'remaining_tasks', v_step.remaining_tasks,
        'remaining_deps', v_step.remaining_deps),
      'step:' || v_step.step_slug || ':started',
      v_step.run_id);

    -- send_batch returns the new ids in array order and ids increase along the array, so the n-th smallest id
    -- belongs to the message with task_index n.
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id)
    select v_step.flow_slug, v_step.run_id, v_step.step_slug, (m.n - 1)::integer, m.msg_id
      from (
        select sent.msg_id, row_number() over (order by sent.msg_id) as n
          from pgmq.send_batch(
                 v_step.flow_slug,
                 array(
                   select jsonb_build_object(
                            'flow_slug', v_step.flow_slug,
                            'run_id', v_step.run_id,
                            'step_slug', v_step.step_slug,
                            'task_index', i)
                     from generate_series(0, v_step.initial_tasks - 1) as i
                    order by i),
                 v_step.start_delay) as sent(msg_id)
      ) as m;
  end loop;
end;
$$;

-- 0100_function_start_tasks.sql
-- pgflow.start_tasks(flow_slug, msg_ids, worker_id) guarantees (phase 2 of polling, after pgmq.read*):
--   * claims exactly the tasks of flow_slug whose message_id is in msg_ids, that are 'queued', whose run is
--     'started' and whose step is 'started'; each claimed task becomes 'started' (attempts_count + 1, started_at
--     now, last_worker_id = worker_id, which must be a row of pgflow.workers);
--   * a task is claimed at most once: rows are locked with FOR UPDATE SKIP LOCKED and re-checked, so of two
--     concurrent calls naming the same ids each task goes to one caller only, and only rows this call actually
--     claimed are returned;
--   * every claimed message's visibility is set to the effective step timeout (steps.opt_timeout, else
--     flows.opt_timeout) + 2 seconds from now (upstream pgflow documented this but never executed it);
--   * returns one step_task_record per claimed task, ordered by msg_id: input = the element task_index of the run
--     input (root map), of the dependency's stored output (dependent map), or {<dep_slug>: <output>} over the
--     completed dependencies ({} for root steps); flow_input = the run input for single steps without
--     dependencies, NULL otherwise;
--   * NULL or empty msg_ids, unknown ids and ids of ineligible tasks claim nothing and return nothing.
create or replace function pgflow.start_tasks(flow_slug text, msg_ids bigint[], worker_id uuid)
returns setof pgflow.step_task_record
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_claimed bigint[];
  v_offsets integer[];
begin
  if start_tasks.msg_ids is null or cardinality(start_tasks.msg_ids) = 0 then
    return;
  end if;

  with candidates as (
    select t.run_id, t.step_slug, t.task_index
      from pgflow.step_tasks as t
      join pgflow.runs as r on r.run_id = t.run_id
      join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
     where t.flow_slug = start_tasks.flow_slug
       and t.message_id = any (start_tasks.msg_ids)
       and t.status = 'queued'
       and r.status = 'started'
       and ss.status = 'started'
     order by t.message_id
       for update of t skip locked
  ),
  claimed as (
    update pgflow.step_tasks as t
       set status = 'started',
           attempts_count = t.attempts_count + 1,
           started_at = now(),
           last_worker_id = start_tasks.worker_id
      from candidates as c
     where t.run_id = c.run_id
       and t.step_slug = c.step_slug
       and t.task_index = c.task_index
       and t.status = 'queued'
    returning t.flow_slug, t.step_slug, t.message_id
  )
  select array_agg(c.message_id order by c.message_id),
         array_agg(coalesce(s.opt_timeout, f.opt_timeout) + 2 order by c.message_id)
    into v_claimed, v_offsets
    from claimed as c
    join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
    join pgflow.flows as f on f.flow_slug = c.flow_slug;

  if v_claimed is null then
    return;
  end if;

  perform pgflow.set_vt_batch(start_tasks.flow_slug, v_claimed, v_offsets);

  return query
    select t.flow_slug,
           t.run_id,
           t.step_slug,
           case
             when s.step_type = 'map' and s.deps_count = 0 then r.input -> t.task_index
             when s.step_type = 'map' then (
               select dss.output -> t.task_index
                 from pgflow.deps as d
                 join pgflow.step_states as dss on dss.run_id = t.run_id and dss.step_slug = d.dep_slug
                where d.flow_slug = t.flow_slug and d.step_slug = t.step_slug
                limit 1)
             else coalesce(
               (select jsonb_object_agg(d.dep_slug, dss.output)
                  from pgflow.deps as d
                  join pgflow.step_states as dss on dss.run_id = t.run_id and dss.step_slug = d.dep_slug
                 where d.flow_slug = t.flow_slug
                   and d.step_slug = t.step_slug
                   and dss.status = 'completed'),
               '{}'::jsonb)
           end,
           t.message_id,
           t.task_index,
           case when s.step_type = 'single' and s.deps_count = 0 then r.input end
      from pgflow.step_tasks as t
      join pgflow.runs as r on r.run_id = t.run_id
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
     where t.flow_slug = start_tasks.flow_slug
       and t.message_id = any (v_claimed)
     order by t.message_id;
end;
$$;

-- 0100_function_track_worker_function.sql
-- pgflow.track_worker_function(function_name) guarantees: a worker_functions row for function_name exists
-- afterwards; a new row gets the table defaults, an existing one only has updated_at refreshed to
-- clock_timestamp() (enabled, debounce and last_invoked_at are left alone).
create or replace function pgflow.track_worker_function(function_name text)
returns void
language sql
volatile
set search_path = ''
as $$
  insert into pgflow.worker_functions as wf (function_name, updated_at)
  values (track_worker_function.function_name, clock_timestamp())
  on conflict on constraint worker_functions_pkey do update set updated_at = clock_timestamp();
$$;

-- 0900_privileges.sql
-- pgflow ships with no privileges for ordinary roles: nobody but the owner (and superusers) may use the schema.
-- Orchestration functions trust their callers, so access is an operator decision: grant usage on the schema and
-- execute on the functions a role needs (for example start_flow_with_states, get_run_with_states) explicitly.
revoke all on schema pgflow from public;

