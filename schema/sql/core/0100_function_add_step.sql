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
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_deps          text[];
  v_existing_deps text[];
  v_step          pgflow.steps;
  v_mode          text;
  v_index         int;
  v_queue         text;
  v_listed        text;
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
  select f.queue_mode into v_mode from pgflow.flows as f where f.flow_slug = add_step.flow_slug for update;

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

    -- Like create_flow for a default queue: a step queue that went missing is created again.
    if v_mode = 'step'
       and not exists (select 1 from pgmq.list_queues() as q where lower(q.queue_name) = v_step.queue_name) then
      perform pgmq.create(v_step.queue_name);
    end if;
    return v_step;
  end if;

  select coalesce(max(s2.step_index) + 1, 0) into v_index
    from pgflow.steps as s2 where s2.flow_slug = add_step.flow_slug;

  if v_mode = 'step' and pgflow.is_valid_slug(add_step.step_slug) then
    perform pgflow._check_step_mode_slug(add_step.step_slug, 'Step', add_step.flow_slug, null);
    if exists (select 1 from pgflow.steps as s2
                where s2.flow_slug = add_step.flow_slug and lower(s2.step_slug) = lower(add_step.step_slug)) then
      raise exception using
        errcode = '23505',
        message = format(
          'Step slug "%s" of flow "%s" differs only in letter case from step "%s"; with per-step queues both would use queue "%s"',
          add_step.step_slug, add_step.flow_slug,
          (select s2.step_slug from pgflow.steps as s2
            where s2.flow_slug = add_step.flow_slug and lower(s2.step_slug) = lower(add_step.step_slug) limit 1),
          pgflow._step_queue_name(add_step.flow_slug, add_step.step_slug, v_index)),
        hint = 'Rename one of the steps.';
    end if;
    v_queue := pgflow._step_queue_name(add_step.flow_slug, add_step.step_slug, v_index);
    if length(v_queue) > 47 then
      raise exception using
        errcode = '22023',
        message = format('Step "%s" of flow "%s": its queue name "%s" is %s characters long; PGMQ allows at most 47',
          add_step.step_slug, add_step.flow_slug, v_queue, length(v_queue)),
        hint = 'Choose a shorter flow slug.';
    end if;
    perform pgmq.validate_queue_name(v_queue);
    -- The queue's name is locked like a flow slug (create_flow locks lower(flow_slug), the name of a default
    -- queue), so a flow created at the same time with the same default queue name waits, then sees this queue.
    perform pg_advisory_xact_lock(1, hashtext(v_queue));
    select string_agg(format('"%s"', q.queue_name), ', ' order by q.queue_name) into v_listed
      from pgmq.list_queues() as q
     where lower(q.queue_name) = v_queue;
    if v_listed is not null then
      raise exception using
        errcode = '23505',
        message = format(
          'Cannot add step "%s" to flow "%s": PGMQ already lists queue %s, the name of the step''s private queue',
          add_step.step_slug, add_step.flow_slug, v_listed),
        hint = 'pgflow manages its queues exclusively and never adopts a queue it did not create for this step (it may be the queue of a flow named like it). Rename the flow or the step.';
    end if;
  else
    v_queue := pgflow._default_queue_name(add_step.flow_slug);
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
    v_index,
    cardinality(v_deps),
    add_step.max_attempts,
    add_step.base_delay,
    add_step.timeout,
    add_step.start_delay,
    add_step.required_input_pattern,
    add_step.forbidden_input_pattern,
    add_step.when_unmet,
    add_step.when_exhausted,
    v_queue
  )
  returning s.* into v_step;

  if v_mode = 'step' then
    perform pgmq.create(v_queue);
  end if;

  insert into pgflow.deps (flow_slug, dep_slug, step_slug)
  select add_step.flow_slug, d.dep, add_step.step_slug
  from unnest(v_deps) with ordinality as d(dep, pos)
  order by d.pos;

  return v_step;
end;
$$;

comment on function pgflow.add_step(flow_slug text, step_slug text, deps_slugs text[], max_attempts integer, base_delay integer, timeout integer, start_delay integer, step_type text, required_input_pattern jsonb, forbidden_input_pattern jsonb, when_unmet text, when_exhausted text) is $doc$
pgflow.add_step(...) guarantees:
  * definitions of one flow are serialised by a row lock on the flow;
  * idempotent by (flow_slug, step_slug): the first call inserts the step at the next step_index of the flow
    (0, 1, 2, ... in call order, a topological order because dependencies must already exist) with its
    dependency edges; a later call with the same dependency set returns the existing row unchanged (options,
    type, patterns and modes are NOT updated);
  * a later call with a different dependency set is rejected and changes nothing: adding edges to an existing
    step would leave deps_count stale (runs would never start the step) and could create cycles;
  * duplicate names in deps_slugs count once, so deps_count always equals the number of edges; NULL = '{}';
  * a new step records its resolved route. In queue mode 'flow': the flow's default queue,
    pgflow._default_queue_name(flow_slug) (the queue create_flow created); no queue is created here. In queue
    mode 'step' (v0.20.0): its private queue pgflow._step_queue_name(flow_slug, step_slug, step_index), created
    here with pgmq.create in the caller's transaction; before anything is written the step slug must pass
    pgflow._check_step_mode_slug, must not differ only in letter case from another step of the flow (23505),
    the name must fit 47 characters (22023), and PGMQ must not list a queue of that name already (23505; pgflow
    never adopts a queue). The name is locked like a flow slug (advisory lock (1, hashtext(name))), so it cannot
    race a flow whose default queue has that name. A later call for an existing step of such a flow re-creates
    its queue only when PGMQ lists none;
  * a map step has at most one dependency;
  * everything else is enforced by the constraints of steps and deps, whose error texts callers match on
    (steps_flow_slug_fkey, deps_flow_slug_dep_slug_fkey, deps_check, steps_step_slug_check,
    steps_step_type_check, when_unmet_is_valid, when_exhausted_is_valid, opt_*_is_*, *_input_pattern_is_object).
$doc$;
