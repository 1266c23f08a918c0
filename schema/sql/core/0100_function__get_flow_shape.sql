create or replace function pgflow._get_flow_shape(p_flow_slug text)
returns jsonb
language sql
stable
set search_path = pg_catalog, pg_temp
set jit = off
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

comment on function pgflow._get_flow_shape(p_flow_slug text) is $doc$
pgflow._get_flow_shape(p_flow_slug) guarantees: the structural shape of a stored flow as jsonb
{"steps": [...]}, steps in step_index order, each with slug, stepType, dependencies (sorted by code point,
[] when none), whenUnmet, whenExhausted, requiredInputPattern and forbiddenInputPattern (each
{"defined": false} or {"defined": true, "value": <pattern>}). Options are not part of a shape. An unknown flow
gives {"steps": []}. Read-only.
$doc$;
