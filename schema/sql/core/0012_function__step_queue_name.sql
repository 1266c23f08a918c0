create or replace function pgflow._step_queue_name(flow_slug text, step_slug text, step_index integer)
returns text
language sql
immutable
parallel safe
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  select case
    when length(lower(flow_slug) || '__' || lower(step_slug)) <= 47 then lower(flow_slug) || '__' || lower(step_slug)
    else lower(flow_slug) || '__' || step_index::text
  end;
$$;

comment on function pgflow._step_queue_name(flow_slug text, step_slug text, step_index integer) is $doc$
pgflow._step_queue_name(flow_slug, step_slug, step_index) guarantees (v0.20.0): the canonical name of the private
queue of a step of a flow with per-step queues (flows.queue_mode = 'step'): lower(flow_slug) || '__' ||
lower(step_slug) when that fits PGMQ's 47 characters, else lower(flow_slug) || '__' || step_index. Slugs of such
flows never start or end with '_' nor contain '__', and a slug never starts with a digit, so the name is told
apart from every other flow's queues and steps' queues: the part before the first '__' is the flow, and the part
after it is a step slug or, only for long names, a step index. The result may still exceed 47 characters for a
flow slug longer than 40; add_step refuses such a route before anything is written. NULL in, NULL out. Immutable
and pure: the one definition of a per-step route.
$doc$;
