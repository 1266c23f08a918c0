create or replace function pgflow._create_flow_from_shape(p_flow_slug text, p_shape jsonb, p_queue_mode text default null,
                                                          p_message_retention text default null)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
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
    timeout      => (v_options ->> 'timeout')::int,
    queue_mode   => p_queue_mode,
    message_retention => p_message_retention
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

comment on function pgflow._create_flow_from_shape(p_flow_slug text, p_shape jsonb, p_queue_mode text, p_message_retention text) is $doc$
pgflow._create_flow_from_shape(p_flow_slug, p_shape, p_queue_mode, p_message_retention) guarantees: defines the
flow described by a shape, using create_flow and add_step (so it has their idempotence and errors): flow options
from shape.options (maxAttempts, baseDelay, timeout; absent = create_flow defaults), the queue mode p_queue_mode
(NULL = 'flow'; v0.20.0) and the message retention p_message_retention (NULL = 'archive'; v0.20.0), then every element of shape.steps in array
order with its dependencies (absent = none), stepType (absent = 'single'), whenUnmet (absent = 'skip'),
whenExhausted (absent = 'fail'), patterns (only when {"defined": true}) and step options (maxAttempts,
baseDelay, timeout, startDelay; absent = inherit).
$doc$;
