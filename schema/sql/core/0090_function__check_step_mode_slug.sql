create or replace function pgflow._check_step_mode_slug(p_slug text, p_kind text, p_flow_slug text, p_max_length integer)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_rule text;
begin
  if p_slug is null then
    return;
  end if;
  if p_max_length is not null and length(p_slug) > p_max_length then
    v_rule := format('is %s characters long; at most %s are allowed, so that its steps'' queue names fit PGMQ''s 47',
      length(p_slug), p_max_length);
  elsif p_slug like '\_%' or p_slug like '%\_' then
    v_rule := 'starts or ends with ''_''';
  elsif strpos(p_slug, '__') > 0 then
    v_rule := 'contains ''__''';
  else
    return;
  end if;
  raise exception using
    errcode = '22023',
    message = case p_kind
      when 'Flow' then format('Flow slug "%s" %s, which a flow with per-step queues does not allow', p_slug, v_rule)
      else format('Step slug "%s" of flow "%s" %s, which a flow with per-step queues does not allow',
                  p_slug, p_flow_slug, v_rule)
    end,
    hint = 'Per-step queues are named <flow>__<step>; the slugs must keep that name unambiguous. Rename the slug.';
end;
$$;

comment on function pgflow._check_step_mode_slug(p_slug text, p_kind text, p_flow_slug text, p_max_length integer) is $doc$
pgflow._check_step_mode_slug(p_slug, p_kind, p_flow_slug, p_max_length) guarantees (v0.20.0): returns when p_slug
(a flow slug when p_kind = 'Flow', else a step slug of flow p_flow_slug) may be used by a flow with per-step
queues, and otherwise raises 22023 naming the slug and the rule it breaks: longer than p_max_length (NULL = no
limit), starting or ending with '_', or containing '__'. These rules make the queue names of
pgflow._step_queue_name unambiguous. NULL slugs pass (the slug CHECK constraints reject them). Pure.
$doc$;
