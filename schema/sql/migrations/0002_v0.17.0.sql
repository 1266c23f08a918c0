-- pgflow-go migration v0.16.0 -> v0.17.0: tasks remember their physical queue, (queue_name, message_id).
-- Hand-written; schema/sql/core is the source of truth and TestMigrationsMatchCoreSchema proves this file builds the
-- same schema. The migrator runs it in ONE transaction with a bounded lock_timeout (`pgflow migrate up
-- --lock-timeout 5s`; exported files set it too), so any failure - for example two existing flows whose slugs differ
-- only in letter case - leaves the database exactly as it was. Nothing is renamed, deleted, repaired or re-created
-- to make it pass, no queue is touched, and no message body is read.
--
-- Stages:
--   1. add pgflow.steps.queue_name and pgflow.step_tasks.queue_name, nullable (plus the default-route function);
--   2. backfill every step and every task (also tasks whose message_id is NULL) with lower(flow_slug);
--   3. enforce NOT NULL, queue-name validity, (queue_name, message_id) uniqueness and the normalized
--      default-queue uniqueness of flows;
--   4. install the queue-aware function versions (start_tasks gains its fourth argument, queue_name).

-- Stage 1: nullable columns, added last (column order of sql/core), and the one definition of the default route.
alter table pgflow.steps add column queue_name text;
alter table pgflow.step_tasks add column queue_name text;

comment on column pgflow.steps.queue_name is
  'Canonical lower-case name of the PGMQ queue this step''s tasks are sent to (its route).';
comment on column pgflow.step_tasks.queue_name is
  'Canonical lower-case name of the PGMQ queue that holds this task''s message, copied from its step when the task was created.';

-- pgflow._default_queue_name(flow_slug) guarantees: the canonical name of a flow's default PGMQ queue, which is
-- lower(flow_slug) (PGMQ names its tables in lower case, so this is also the name PGMQ's own tables use). NULL gives
-- NULL. Immutable and pure: the one definition of the default route. It is used only where a queue is chosen for
-- something that has no persisted queue yet (create_flow, add_step, the v0.17.0 backfill, the unique index
-- flows_default_queue_key, delete_flow_and_data for a flow without steps, and start_tasks called without a queue
-- by a v0.16.0 worker); it exists before the tables because that index uses it. Message operations on an existing
-- task never call it: they use step_tasks.queue_name.
create or replace function pgflow._default_queue_name(flow_slug text)
returns text
language sql
immutable
parallel safe
set search_path = ''
as $$
  select lower(flow_slug);
$$;

-- Stage 2: backfill. Every v0.16.0 flow used one queue named after its slug; PGMQ's tables for it are named in
-- lower case, so lower(flow_slug) (= pgflow._default_queue_name) is each step's route and each task's queue, also for
-- tasks without a message and for flows created with a mixed-case slug (their queue stays listed under its
-- original spelling and keeps working).
update pgflow.steps as s
   set queue_name = pgflow._default_queue_name(s.flow_slug)
 where s.queue_name is null;

update pgflow.step_tasks as t
   set queue_name = pgflow._default_queue_name(t.flow_slug)
 where t.queue_name is null;

-- Stage 3: enforce. A violation (for example flows 'Orders' and 'orders', which would address one queue) fails
-- the migration here and rolls everything back; resolve it by hand (see docs/upgrade-0.17.md) and run it again.
alter table pgflow.steps
  alter column queue_name set not null,
  add constraint steps_queue_name_is_valid check (queue_name ~ '^[a-z_][a-z0-9_]{0,46}$');

alter table pgflow.step_tasks
  alter column queue_name set not null,
  add constraint step_tasks_queue_name_is_valid check (queue_name ~ '^[a-z_][a-z0-9_]{0,46}$'),
  add constraint step_tasks_queue_name_message_id_key unique (queue_name, message_id);

create unique index flows_default_queue_key on pgflow.flows (pgflow._default_queue_name(flow_slug));

-- Stage 4: the queue-aware functions. start_tasks gets a fourth argument with a default, so its three-argument
-- form (v0.16.0 workers) keeps working; the old three-argument function is dropped so exactly one remains.
-- Grants given on pgflow.start_tasks(text, bigint[], uuid) must be given again on the new signature.
drop function pgflow.start_tasks(text, bigint[], uuid);

-- pgflow._archive_task_message(p_run_id, p_step_slug, p_task_index) guarantees: the task's PGMQ message (if it has
-- one and it is still in the queue) is moved to the archive of the queue the task stored (step_tasks.queue_name),
-- with one single-message pgmq.archive call. Unknown tasks and already archived messages are a no-op. Nothing
-- else changes.
create or replace function pgflow._archive_task_message(p_run_id uuid, p_step_slug text, p_task_index integer)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queue_name text;
  v_message_id bigint;
begin
  select t.queue_name, t.message_id
    into v_queue_name, v_message_id
    from pgflow.step_tasks as t
   where t.run_id = p_run_id
     and t.step_slug = p_step_slug
     and t.task_index = p_task_index;

  if v_message_id is not null then
    perform pgmq.archive(v_queue_name, v_message_id);
  end if;
end;
$$;

-- pgflow._cascade_force_skip_steps(run_id, step_slug, skip_reason) guarantees:
--   * the step and all its transitive dependents that are still 'created' or 'started' in the run become
--     'skipped' (skipped_at now, remaining_tasks NULL); the trigger step gets skip_reason, every other step
--     'dependency_skipped'; steps already terminal (including an already skipped trigger) are left alone;
--   * step:skipped is emitted per newly skipped step in step_index order (a topological order);
--   * the queued/started messages of the newly skipped steps' tasks are archived from the queues the tasks stored
--     (step_tasks.queue_name), one batch pgmq.archive call per queue; their task rows keep their status (late
--     callbacks are ignored by complete_task/fail_task);
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
  v_queue     record;
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

  for v_queue in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as msg_ids
      from pgflow.step_tasks as t
     where t.run_id = _cascade_force_skip_steps.run_id
       and t.step_slug = any (v_skipped)
       and t.status in ('queued', 'started')
       and t.message_id is not null
     group by t.queue_name
     order by t.queue_name
  loop
    perform pgmq.archive(v_queue.queue_name, v_queue.msg_ids);
  end loop;

  update pgflow.runs as r
     set remaining_steps = r.remaining_steps - cardinality(v_skipped)
   where r.run_id = _cascade_force_skip_steps.run_id;

  return cardinality(v_skipped);
end;
$$;

-- pgflow.add_step(...) guarantees:
--   * definitions of one flow are serialised by a row lock on the flow;
--   * idempotent by (flow_slug, step_slug): the first call inserts the step at the next step_index of the flow
--     (0, 1, 2, ... in call order, a topological order because dependencies must already exist) with its
--     dependency edges; a later call with the same dependency set returns the existing row unchanged (options,
--     type, patterns and modes are NOT updated);
--   * a later call with a different dependency set is rejected and changes nothing: adding edges to an existing
--     step would leave deps_count stale (runs would never start the step) and could create cycles;
--   * duplicate names in deps_slugs count once, so deps_count always equals the number of edges; NULL = '{}';
--   * a new step records its resolved route: queue_name = the flow's default queue,
--     pgflow._default_queue_name(flow_slug) (the queue create_flow created); no queue is created here;
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
    required_input_pattern, forbidden_input_pattern, when_unmet, when_exhausted, queue_name
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
    add_step.when_exhausted,
    pgflow._default_queue_name(add_step.flow_slug)
  )
  returning s.* into v_step;

  insert into pgflow.deps (flow_slug, dep_slug, step_slug)
  select add_step.flow_slug, d.dep, add_step.step_slug
  from unnest(v_deps) with ordinality as d(dep, pos)
  order by d.pos;

  return v_step;
end;
$$;

-- pgflow.cascade_resolve_conditions(run_id) guarantees: the if/ifNot conditions of every step of the run that is
-- 'created' with remaining_deps 0 and has a pattern are evaluated, repeatedly until nothing changes:
--   * condition input: the run input for steps without dependencies, otherwise {<dep_slug>: <output>} over the
--     dependencies that completed (skipped ones are absent); met <=> (required pattern NULL or input @> it) and
--     (forbidden pattern NULL or not input @> it);
--   * when_unmet 'fail': the unmet step with the lowest step_index fails ('Condition not met'), the run fails,
--     step:failed then run:failed are emitted, every queued/started message of the run is archived (from the
--     queues its tasks stored, one batch call per queue), and the function returns false (only that one step is
--     failed);
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
  v_queue      record;
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

      for v_queue in
        select t.queue_name, array_agg(t.message_id order by t.message_id) as msg_ids
          from pgflow.step_tasks as t
         where t.run_id = cascade_resolve_conditions.run_id
           and t.status in ('queued', 'started')
           and t.message_id is not null
         group by t.queue_name
         order by t.queue_name
      loop
        perform pgmq.archive(v_queue.queue_name, v_queue.msg_ids);
      end loop;

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
-- Every message operation uses the queue the task stored (step_tasks.queue_name): a single pgmq.archive call for
-- this task's message, one batch call per queue when the run's messages are archived.
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
  v_queue       record;
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
      perform pgmq.archive(v_task.queue_name, v_task.message_id);
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

      for v_queue in
        select t.queue_name, array_agg(t.message_id order by t.message_id) as msg_ids
          from pgflow.step_tasks as t
         where t.run_id = complete_task.run_id
           and t.status in ('queued', 'started')
           and t.message_id is not null
         group by t.queue_name
         order by t.queue_name
      loop
        perform pgmq.archive(v_queue.queue_name, v_queue.msg_ids);
      end loop;

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
        perform pgmq.archive(v_task.queue_name, v_task.message_id);
      end if;
      return next v_task;
      return;
    end if;

    perform pgflow.cascade_complete_taskless_steps(complete_task.run_id);
  end if;

  if v_task.message_id is not null then
    perform pgmq.archive(v_task.queue_name, v_task.message_id);
  end if;

  perform pgflow.start_ready_steps(complete_task.run_id);
  perform pgflow.maybe_complete_run(complete_task.run_id);

  return next v_task;
end;
$$;

-- pgflow.create_flow(flow_slug, max_attempts, base_delay, timeout) guarantees:
--   * idempotent: the first call inserts the flow (NULL options become max_attempts 3, base_delay 5, timeout 60);
--     later calls return the existing row unchanged (options are NOT updated);
--   * the flow's default PGMQ queue, pgflow._default_queue_name(flow_slug) (the lower-case slug), exists
--     afterwards, also for a flow without steps; an existing flow reuses the queue PGMQ lists under any spelling
--     of that name (a mixed-case queue created by v0.16.0 stays as it is) and gets it re-created only when PGMQ
--     lists none;
--   * a new flow is refused, before anything is written, when PGMQ already lists a queue with the same normalized
--     name (pgflow manages its queues exclusively and never adopts a queue it did not create for that flow);
--   * two flows never share a default queue: the unique index flows_default_queue_key rejects a slug that
--     differs only in letter case from an existing flow, atomically (also for concurrent calls);
--   * a valid slug whose queue name would break PGMQ's limit (more than 47 characters) is rejected before anything
--     is written, and the queue name passes PGMQ's public validation (pgmq.validate_queue_name);
--   * calls for one normalized slug are serialised with ensure_flow_compiled and delete_flow_and_data by the
--     transaction-level advisory lock (1, hashtext(lower(flow_slug)));
--   * invalid slugs and options fail on the flows CHECK constraints (slug_is_valid, opt_*). Queues are only
--     created and listed through PGMQ's public functions.
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
  v_flow   pgflow.flows;
  v_queue  text := pgflow._default_queue_name(create_flow.flow_slug);
  v_listed text;
begin
  -- An invalid slug goes straight to the insert below, which rejects it on the slug_is_valid constraint.
  if pgflow.is_valid_slug(create_flow.flow_slug) then
    if length(create_flow.flow_slug) > 47 then
      raise exception using
        errcode = '22023',
        message = format(
          'Flow slug "%s" is %s characters long, but a flow slug also names the flow''s PGMQ queue, which allows at most 47',
          create_flow.flow_slug, length(create_flow.flow_slug)),
        hint = 'Choose a flow slug of at most 47 characters.';
    end if;
    perform pgmq.validate_queue_name(v_queue);

    perform pg_advisory_xact_lock(1, hashtext(lower(create_flow.flow_slug)));

    select f.* into v_flow from pgflow.flows as f where f.flow_slug = create_flow.flow_slug;
    if found then
      if not exists (select 1 from pgmq.list_queues() as q where lower(q.queue_name) = v_queue) then
        perform pgmq.create(v_queue);
      end if;
      return v_flow;
    end if;

    select string_agg(format('"%s"', q.queue_name), ', ' order by q.queue_name) into v_listed
      from pgmq.list_queues() as q
     where lower(q.queue_name) = v_queue;
    if v_listed is not null then
      raise exception using
        errcode = '23505',
        message = format(
          'Cannot create flow "%s": PGMQ already lists queue %s, which has the same normalized name "%s" as the flow''s queue',
          create_flow.flow_slug, v_listed, v_queue),
        hint = 'pgflow manages its queues exclusively and never adopts a queue it did not create for this flow (it may be another flow''s queue whose slug differs only in letter case). Choose another flow slug.';
    end if;
  end if;

  insert into pgflow.flows as f (flow_slug, opt_max_attempts, opt_base_delay, opt_timeout)
  values (
    create_flow.flow_slug,
    coalesce(create_flow.max_attempts, 3),
    coalesce(create_flow.base_delay, 5),
    coalesce(create_flow.timeout, 60)
  )
  returning f.* into v_flow;

  perform pgmq.create(v_queue);

  return v_flow;
end;
$$;

-- pgflow.delete_flow_and_data(p_flow_slug) guarantees: removes the flow completely in the caller's transaction:
--   * the flow's queues are its persisted routes (the distinct steps.queue_name of its steps), or its default queue
--     pgflow._default_queue_name(p_flow_slug) when the flow exists but has no steps;
--   * each of those queues is resolved to the spelling PGMQ lists for it (pgmq.list_queues(), compared in lower
--     case, so a mixed-case queue created by v0.16.0 is found); a queue listed under more than one spelling is
--     ambiguous and raises an error naming the flow, the queue and the spellings BEFORE anything is deleted;
--     a queue PGMQ does not list is already gone and is skipped;
--   * then all of the flow's step_tasks, step_states, runs, deps, steps and the flow row are deleted, and every
--     resolved queue is dropped with its archive by pgmq.drop_queue(listed spelling), which also removes that
--     spelling's metadata. Messages are not archived one by one before their queue is dropped;
--   * any failing PGMQ call fails the function, so the caller's transaction rolls back as a whole;
--   * calls for one normalized slug are serialised with create_flow and ensure_flow_compiled by the
--     transaction-level advisory lock (1, hashtext(lower(p_flow_slug)));
--   * destructive and irreversible; meant for development and for recompiling a changed flow. Workers rows are
--     not touched. An unknown flow is not an error and touches no queue.
create or replace function pgflow.delete_flow_and_data(p_flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queue  record;
  v_listed text[];
  v_drop   text[] := '{}';
begin
  perform pg_advisory_xact_lock(1, hashtext(lower(p_flow_slug)));

  for v_queue in
    select distinct s.queue_name
      from pgflow.steps as s
     where s.flow_slug = p_flow_slug
    union
    select pgflow._default_queue_name(f.flow_slug)
      from pgflow.flows as f
     where f.flow_slug = p_flow_slug
       and not exists (select 1 from pgflow.steps as s where s.flow_slug = f.flow_slug)
     order by 1
  loop
    select coalesce(array_agg(q.queue_name::text order by q.queue_name), '{}') into v_listed
      from pgmq.list_queues() as q
     where lower(q.queue_name) = v_queue.queue_name;

    if cardinality(v_listed) > 1 then
      raise exception using
        errcode = '55000',
        message = format(
          'Cannot delete flow "%s": its queue "%s" is listed by PGMQ under %s spellings (%s); nothing was deleted',
          p_flow_slug, v_queue.queue_name, cardinality(v_listed), array_to_string(v_listed, ', ')),
        hint = 'The spellings share one set of PGMQ tables. pgflow manages its queues exclusively and does not repair PGMQ metadata; resolve the duplicate listing by hand, then retry.';
    end if;
    v_drop := v_drop || v_listed;
  end loop;

  delete from pgflow.step_tasks as t where t.flow_slug = p_flow_slug;
  delete from pgflow.step_states as ss where ss.flow_slug = p_flow_slug;
  delete from pgflow.runs as r where r.flow_slug = p_flow_slug;
  delete from pgflow.deps as d where d.flow_slug = p_flow_slug;
  delete from pgflow.steps as s where s.flow_slug = p_flow_slug;
  delete from pgflow.flows as f where f.flow_slug = p_flow_slug;

  for i in 1 .. coalesce(cardinality(v_drop), 0) loop
    perform pgmq.drop_queue(v_drop[i]);
  end loop;
end;
$$;

-- pgflow.ensure_flow_compiled(flow_slug, shape, allow_data_loss) guarantees: after it returns, the stored flow has
-- the caller's shape, or nothing was changed and the result says why. Result: {"status": s, "differences": [...]}
--   * 'compiled'   - the flow did not exist and was created from the shape (in any environment);
--   * 'verified'   - the stored shape equals the caller's; nothing changed;
--   * 'recompiled' - shapes differed and pgflow.is_local() or allow_data_loss: the flow and ALL its data (runs,
--                    states, tasks, queue and archive) were deleted and the flow created again from the shape;
--   * 'mismatch'   - shapes differed otherwise; nothing changed.
-- differences lists _compare_flow_shapes(shape, stored shape) (the caller's shape is "first").
-- Concurrent calls for one normalized slug (and create_flow / delete_flow_and_data for it) are serialised by the
-- transaction-level advisory lock (1, hashtext(lower(flow_slug))), so slugs differing only in letter case share it.
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
  perform pg_advisory_xact_lock(1, hashtext(lower(ensure_flow_compiled.flow_slug)));

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
-- Every message operation uses the queue the task stored (step_tasks.queue_name): single-message pgmq.archive and
-- pgmq.set_vt calls for this task, one batch pgmq.archive call per queue when several tasks' messages are archived.
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
  v_queue          record;
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
      perform pgmq.archive(v_task.queue_name, v_task.message_id);
    end if;
    return next v_task;
    return;
  end if;

  -- Late or replayed callback for a step that is no longer running.
  if v_state.status is distinct from 'started' then
    if v_task.message_id is not null then
      perform pgmq.archive(v_task.queue_name, v_task.message_id);
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
      perform pgmq.set_vt(v_task.queue_name, v_task.message_id,
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
    perform pgmq.archive(v_task.queue_name, v_task.message_id);
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

    for v_queue in
      select t.queue_name, array_agg(t.message_id order by t.message_id) as msg_ids
        from pgflow.step_tasks as t
       where t.run_id = fail_task.run_id
         and t.status in ('queued', 'started')
         and t.message_id is not null
       group by t.queue_name
       order by t.queue_name
    loop
      perform pgmq.archive(v_queue.queue_name, v_queue.msg_ids);
    end loop;

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

  for v_queue in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as msg_ids
      from pgflow.step_tasks as t
     where t.run_id = fail_task.run_id
       and t.step_slug = fail_task.step_slug
       and t.status in ('queued', 'started')
       and t.message_id is not null
     group by t.queue_name
     order by t.queue_name
  loop
    perform pgmq.archive(v_queue.queue_name, v_queue.msg_ids);
  end loop;

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

-- pgflow.requeue_stalled_tasks() guarantees (run periodically by one worker per database, under an advisory lock;
-- safe to run concurrently with itself and with callbacks):
--   * a task is stalled when it is 'started', not given up, its run and step are still 'started', and it started
--     more than the effective step timeout (steps.opt_timeout, else flows.opt_timeout) + 30 seconds ago (upstream
--     pgflow used only the flow timeout);
--   * a stalled task requeued fewer than 3 times goes back to 'queued' (started_at and last_worker_id cleared,
--     requeued_count + 1, last_requeued_at now; attempts_count kept) and its message becomes visible at once,
--     in the queue the task stored (step_tasks.queue_name; one set_vt_batch call per queue);
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
      returning t.queue_name, t.message_id
    )
    select rq.queue_name,
           count(*)::integer as n,
           array_agg(rq.message_id order by rq.message_id) filter (where rq.message_id is not null) as msg_ids
      from requeued as rq
     group by rq.queue_name
     order by rq.queue_name
  loop
    v_requeued := v_requeued + v_queue.n;
    if v_queue.msg_ids is not null then
      perform pgflow.set_vt_batch(v_queue.queue_name, v_queue.msg_ids,
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

-- pgflow.start_ready_steps(run_id) guarantees:
--   * nothing happens unless the run is 'started';
--   * every step state of the run that is 'created' with remaining_deps 0 and initial_tasks > 0 becomes 'started'
--     (started_at now, remaining_tasks = initial_tasks), exactly once even when called concurrently;
--   * per started step, in step_index order: step:started is emitted, one message per task
--     {"flow_slug", "run_id", "step_slug", "task_index"} is sent with one pgmq.send_batch call to the step's queue
--     (steps.queue_name), delayed by the step's opt_start_delay seconds (NULL = 0), and one 'queued' step_tasks
--     row per message is written with its message_id and that same queue_name (task_index 0 .. initial_tasks-1,
--     paired with the message carrying that index); no queue is created here (no DDL);
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
    select st.*, s.step_index, s.queue_name, coalesce(s.opt_start_delay, 0) as start_delay
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
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name)
    select v_step.flow_slug, v_step.run_id, v_step.step_slug, (m.n - 1)::integer, m.msg_id, v_step.queue_name
      from (
        select sent.msg_id, row_number() over (order by sent.msg_id) as n
          from pgmq.send_batch(
                 v_step.queue_name,
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

-- pgflow.start_tasks(flow_slug, msg_ids, worker_id, queue_name) guarantees (phase 2 of polling, after pgmq.read*):
--   * queue_name is the queue the worker actually read msg_ids from; NULL (a v0.16.0 worker calling with three
--     arguments) means the flow's default queue, pgflow._default_queue_name(flow_slug). It is compared in lower
--     case, the canonical form tasks store;
--   * claims exactly the tasks whose stored identity (step_tasks.queue_name, message_id) is (that queue, one of
--     msg_ids), that belong to flow_slug, are 'queued', and whose run and step are 'started'; each claimed task
--     becomes 'started' (attempts_count + 1, started_at now, last_worker_id = worker_id, which must be a row of
--     pgflow.workers). The message body is never read: it does not authorise a claim;
--   * everything else named in msg_ids is left untouched - a task that is already started (not claimed again, no
--     attempt consumed), terminal or otherwise ineligible, a task of another flow, or an id no task has in that
--     queue: no row changes, no message is archived, deleted or made visible earlier or later;
--   * a task is claimed at most once: rows are locked with FOR UPDATE SKIP LOCKED and re-checked, so of two
--     concurrent calls naming the same ids each task goes to one caller only, and only rows this call actually
--     claimed are returned. No PGMQ row is locked;
--   * every claimed message's visibility is set to the effective step timeout (steps.opt_timeout, else
--     flows.opt_timeout) + 2 seconds from now, in the queue the task stored (one set_vt_batch call per queue);
--   * returns one step_task_record per claimed task, ordered by msg_id: input = the element task_index of the run
--     input (root map), of the dependency's stored output (dependent map), or {<dep_slug>: <output>} over the
--     completed dependencies ({} for root steps); flow_input = the run input for single steps without
--     dependencies, NULL otherwise;
--   * NULL or empty msg_ids claim nothing and return nothing.
create or replace function pgflow.start_tasks(
  flow_slug  text,
  msg_ids    bigint[],
  worker_id  uuid,
  queue_name text default null
)
returns setof pgflow.step_task_record
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_queue_name text;
  v_claimed    bigint[] := '{}';
  v_group      record;
begin
  if start_tasks.msg_ids is null or cardinality(start_tasks.msg_ids) = 0 then
    return;
  end if;

  v_queue_name := lower(coalesce(start_tasks.queue_name, pgflow._default_queue_name(start_tasks.flow_slug)));

  for v_group in
    with candidates as (
      select t.run_id, t.step_slug, t.task_index
        from pgflow.step_tasks as t
        join pgflow.runs as r on r.run_id = t.run_id
        join pgflow.step_states as ss on ss.run_id = t.run_id and ss.step_slug = t.step_slug
       where t.queue_name = v_queue_name
         and t.message_id = any (start_tasks.msg_ids)
         and t.flow_slug = start_tasks.flow_slug
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
      returning t.flow_slug, t.step_slug, t.queue_name, t.message_id
    )
    select c.queue_name,
           array_agg(c.message_id order by c.message_id) as msg_ids,
           array_agg(coalesce(s.opt_timeout, f.opt_timeout) + 2 order by c.message_id) as vt_offsets
      from claimed as c
      join pgflow.steps as s on s.flow_slug = c.flow_slug and s.step_slug = c.step_slug
      join pgflow.flows as f on f.flow_slug = c.flow_slug
     group by c.queue_name
     order by c.queue_name
  loop
    perform pgflow.set_vt_batch(v_group.queue_name, v_group.msg_ids, v_group.vt_offsets);
    v_claimed := v_claimed || v_group.msg_ids;
  end loop;

  if cardinality(v_claimed) = 0 then
    return;
  end if;

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
     where t.queue_name = v_queue_name
       and t.message_id = any (v_claimed)
     order by t.message_id;
end;
$$;
