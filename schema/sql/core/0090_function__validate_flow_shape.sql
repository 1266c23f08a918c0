create or replace function pgflow._validate_flow_shape(p_flow_slug text, p_shape jsonb)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_step  jsonb;
  v_pos   bigint;
  v_slug  text;
  v_seen  text[] := '{}';
  v_key   text;
  v_value jsonb;
  v_where text;
  v_min   integer;
begin
  if p_shape is null then
    raise exception 'Flow shape for "%" is NULL, expected a JSON object with "steps"', p_flow_slug
      using errcode = '22023';
  end if;
  if jsonb_typeof(p_shape) <> 'object' then
    raise exception 'Flow shape for "%" is a JSON %, expected an object with "steps": %',
      p_flow_slug, jsonb_typeof(p_shape), left(p_shape::text, 200)
      using errcode = '22023';
  end if;
  if jsonb_typeof(p_shape -> 'steps') is distinct from 'array' then
    raise exception 'Flow shape for "%" has "steps" of type %, expected an array',
      p_flow_slug, coalesce(jsonb_typeof(p_shape -> 'steps'), 'missing')
      using errcode = '22023';
  end if;

  for v_step, v_pos in select e.value, e.pos from jsonb_array_elements(p_shape -> 'steps') with ordinality as e (value, pos) loop
    if jsonb_typeof(v_step) <> 'object' then
      raise exception 'Flow shape for "%": step #% is a JSON %, expected an object', p_flow_slug, v_pos, jsonb_typeof(v_step)
        using errcode = '22023';
    end if;
    if jsonb_typeof(v_step -> 'slug') is distinct from 'string' then
      raise exception 'Flow shape for "%": step #% has "slug" of type %, expected a string',
        p_flow_slug, v_pos, coalesce(jsonb_typeof(v_step -> 'slug'), 'missing')
        using errcode = '22023';
    end if;
    v_slug := v_step ->> 'slug';
    if v_slug = any (v_seen) then
      raise exception 'Flow shape for "%": step slug "%" appears more than once', p_flow_slug, v_slug
        using errcode = '22023';
    end if;
    v_seen := v_seen || v_slug;

    if v_step ? 'dependencies' and (jsonb_typeof(v_step -> 'dependencies') <> 'array'
        or exists (select 1 from jsonb_array_elements(v_step -> 'dependencies') as d (value)
                    where jsonb_typeof(d.value) <> 'string')) then
      raise exception 'Flow shape for "%": step "%" has "dependencies" %, expected an array of step slugs',
        p_flow_slug, v_slug, left((v_step -> 'dependencies')::text, 200)
        using errcode = '22023';
    end if;
    if v_step ? 'stepType' and (v_step -> 'stepType') not in ('"single"'::jsonb, '"map"'::jsonb) then
      raise exception 'Flow shape for "%": step "%" has "stepType" %, expected "single" or "map"',
        p_flow_slug, v_slug, v_step -> 'stepType'
        using errcode = '22023';
    end if;
    foreach v_key in array array['whenUnmet', 'whenExhausted'] loop
      if v_step ? v_key and (v_step -> v_key) not in ('"fail"'::jsonb, '"skip"'::jsonb, '"skip-cascade"'::jsonb) then
        raise exception 'Flow shape for "%": step "%" has "%" %, expected "fail", "skip" or "skip-cascade"',
          p_flow_slug, v_slug, v_key, v_step -> v_key
          using errcode = '22023';
      end if;
    end loop;
  end loop;

  -- Options: the flow's, then each step's.
  for v_where, v_value in
    select 'flow options', p_shape -> 'options' where p_shape ? 'options'
    union all
    select format('step "%s" options', e.value ->> 'slug'), e.value -> 'options'
      from jsonb_array_elements(p_shape -> 'steps') with ordinality as e (value, pos)
     where e.value ? 'options'
  loop
    if jsonb_typeof(v_value) <> 'object' then
      raise exception 'Flow shape for "%": % is a JSON %, expected an object', p_flow_slug, v_where, jsonb_typeof(v_value)
        using errcode = '22023';
    end if;
    foreach v_key in array array['maxAttempts', 'baseDelay', 'timeout', 'startDelay'] loop
      continue when not v_value ? v_key or jsonb_typeof(v_value -> v_key) = 'null';
      v_min := case v_key when 'maxAttempts' then 1 when 'timeout' then 1 else 0 end;
      if jsonb_typeof(v_value -> v_key) <> 'number'
         or (v_value ->> v_key)::numeric <> trunc((v_value ->> v_key)::numeric)
         or (v_value ->> v_key)::numeric not between v_min and 2147483647 then
        raise exception 'Flow shape for "%": % has %: %, expected a whole number between % and 2147483647',
          p_flow_slug, v_where, v_key, v_value -> v_key, v_min
          using errcode = '22023';
      end if;
    end loop;
  end loop;
end;
$$;

comment on function pgflow._validate_flow_shape(p_flow_slug text, p_shape jsonb) is $doc$
pgflow._validate_flow_shape(p_flow_slug, p_shape) guarantees (v0.20.0): raises 22023 (invalid_parameter_value)
with a message naming the flow, the step and the bad value when the shape is not one the Go DSL could produce,
and returns normally otherwise; it reads no table and changes nothing. Checked: the shape is a JSON object (not
NULL, not a string); "steps" is present and an array; every step is an object whose "slug" is a string, unique
within the shape; "dependencies", when present, is an array of strings; "stepType" is 'single' or 'map';
"whenUnmet" and "whenExhausted" are 'fail', 'skip' or 'skip-cascade'; "options" (flow and step), when present,
is an object whose maxAttempts (1..2147483647), baseDelay (0..), timeout (1..) and startDelay (0..) are whole
numbers. Slug syntax, dependency existence, map rules and patterns are left to create_flow and add_step, which
check them with their own errors.
$doc$;
