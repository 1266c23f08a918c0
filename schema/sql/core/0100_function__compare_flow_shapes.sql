create or replace function pgflow._compare_flow_shapes(p_local jsonb, p_db jsonb)
returns text[]
language plpgsql
stable
set search_path = pg_catalog, pg_temp
set jit = off
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

comment on function pgflow._compare_flow_shapes(p_local jsonb, p_db jsonb) is $doc$
pgflow._compare_flow_shapes(p_local, p_db) guarantees: the list of structural differences between two flow
shapes, '{}' when they match. p_local is called "first", p_db "second". Reported, in this order:
  * 'Step count differs: <n_local> vs <n_db>' when the step arrays differ in length (missing steps = []);
  * per index i: a step missing on one side, else differences of slug, type, dependencies (as the sorted list),
    whenUnmet, whenExhausted, requiredInputPattern and forbiddenInputPattern, one line each.
A key missing on either side is not a difference for slug/stepType/whenUnmet/whenExhausted (pgflow compares
those with SQL "<>", where NULL never differs); for the two patterns a missing key differs from
{"defined": false} and prints as ''. Options are never compared. Read-only.
$doc$;
