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
  * a new step records its resolved route: queue_name = the flow's default queue,
    pgflow._default_queue_name(flow_slug) (the queue create_flow created); no queue is created here;
  * a map step has at most one dependency;
  * everything else is enforced by the constraints of steps and deps, whose error texts callers match on
    (steps_flow_slug_fkey, deps_flow_slug_dep_slug_fkey, deps_check, steps_step_slug_check,
    steps_step_type_check, when_unmet_is_valid, when_exhausted_is_valid, opt_*_is_*, *_input_pattern_is_object).
$doc$;
