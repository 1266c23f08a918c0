create or replace function pgflow._emit_envelopes(
  event_types text[],
  run_ids     uuid[],
  flow_slugs  text[],
  step_slugs  text[],
  statuses    text[],
  payloads    jsonb[] default null
)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_channels  text[];
  v_envelopes text[];
begin
  if coalesce(cardinality(_emit_envelopes.run_ids), 0) = 0 then
    return;
  end if;

  -- The envelope is written as text, byte for byte what jsonb_strip_nulls(jsonb_build_object(...))::text gives
  -- (keys in jsonb's order: by length, then bytes; NULL members left out: concat_ws skips them). No value needs
  -- JSON escaping: slugs are [a-zA-Z0-9_] (flows.slug_is_valid, steps_step_slug_check), run ids are UUIDs, event
  -- types and statuses come from this schema's fixed vocabulary. It is made from the fields themselves: the hot
  -- paths (start_flows, _start_ready_steps_batch, complete_tasks) build no JSON payload unless realtime.send
  -- needs one, which was about a third of a bulk start's CPU (docs/performance.md).
  --
  -- Each event goes to two channels: the aggregates collect a pair per event (an n x 2 array), which _notify reads
  -- row by row, so the notifications go out as (pgflow, event 1), (pgflow:run:<id>, event 1), (pgflow, event 2),
  -- ... The envelope is made once per event and the events are sorted once; a row per notification, sorted, cost
  -- about a fifth more (docs/performance.md).
  select array_agg(array['pgflow', 'pgflow:run:' || e.run_id] order by e.pos),
         array_agg(array[e.envelope, e.envelope] order by e.pos)
    into v_channels, v_envelopes
    from (
      select x.pos,
             x.run_id,
             '{' || concat_ws(', ',
               '"event": "' || case
                                 when x.step_slug is null then x.event_type
                                 else 'step:' || x.step_slug || ':' || split_part(x.event_type, ':', 2)
                               end || '"',
               '"run_id": "' || x.run_id || '"',
               '"status": "' || x.status || '"',
               '"flow_slug": "' || coalesce(
                 x.flow_slug,
                 (select r.flow_slug from pgflow.runs as r where r.run_id = x.run_id)) || '"',
               '"step_slug": "' || x.step_slug || '"',
               '"event_type": "' || x.event_type || '"') || '}' as envelope
        from unnest(_emit_envelopes.event_types, _emit_envelopes.run_ids, _emit_envelopes.flow_slugs,
                    _emit_envelopes.step_slugs, _emit_envelopes.statuses)
               with ordinality as x (event_type, run_id, flow_slug, step_slug, status, pos)
    ) as e;
  perform pgflow._notify(v_channels, v_envelopes);

  if _emit_envelopes.payloads is not null and pgflow._trusted_realtime_send() is not null then
    execute 'select realtime.send(
                      x.p,
                      case
                        when x.p ->> ''step_slug'' is null then x.p ->> ''event_type''
                        else ''step:'' || (x.p ->> ''step_slug'') || '':'' || split_part(x.p ->> ''event_type'', '':'', 2)
                      end,
                      ''pgflow:run:'' || (x.p ->> ''run_id''),
                      false)
               from unnest($1) with ordinality as x (p, pos)
              where x.p is not null
              order by x.pos'
      using _emit_envelopes.payloads;
  end if;
end;
$$;

comment on function pgflow._emit_envelopes(event_types text[], run_ids uuid[], flow_slugs text[], step_slugs text[], statuses text[], payloads jsonb[]) is $doc$
pgflow._emit_envelopes(event_types, run_ids, flow_slugs, step_slugs, statuses, payloads) guarantees (v0.20.0): the
events of pgflow._emit_events, given as their fields instead of JSON payloads. For every i, in array order (the
arrays are paired by position; a shorter or NULL array reads as NULLs):
  * a notification (pgflow._notify: pg_notify, or deferred when the transaction asks) on 'pgflow' and on
    'pgflow:run:<run_ids[i]>' with the envelope {"event_type", "event", "run_id", "step_slug" (step events:
    step_slugs[i] not NULL), "status", "flow_slug"} - byte for byte the envelope pgflow._emit_event sends, where
    event is event_types[i] for run events and 'step:<step_slug>:<what>' for step events (event type
    'step:<what>'), and a NULL flow_slugs[i] is read from the run;
  * when payloads is not NULL and a trusted realtime.send(jsonb, text, text, boolean) exists
    (pgflow._trusted_realtime_send), every non-NULL payload goes to realtime.send(payload, event,
    'pgflow:run:<run_id>', false), in array order (one dynamic statement). Callers build payloads only when
    pgflow._trusted_realtime_send() is not NULL: without Supabase Realtime no JSON is built for an event;
  * one statement builds every envelope, one call of pgflow._notify sends them; NULL or empty run_ids do nothing.
$doc$;
