create or replace function pgflow._emit_events(payloads jsonb[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_channels  text[];
  v_envelopes text[];
begin
  if _emit_events.payloads is null or cardinality(_emit_events.payloads) = 0 then
    return;
  end if;

  -- The envelope is written as text, byte for byte what jsonb_strip_nulls(jsonb_build_object(...))::text gives
  -- (keys in jsonb's order: by length, then bytes; NULL members left out: concat_ws skips them), at about a third
  -- of the cost. No value needs JSON escaping: slugs are [a-zA-Z0-9_] (flows.slug_is_valid,
  -- steps_step_slug_check), run ids are UUIDs, event types and statuses come from this schema's fixed vocabulary.
  -- One call of pgflow._notify sends them all, in the order of the arrays.
  select array_agg(c.channel order by e.pos, c.k), array_agg(e.envelope order by e.pos, c.k)
    into v_channels, v_envelopes
     from (
       select x.pos,
              x.run_id,
              '{' || concat_ws(', ',
                '"event": "' || x.event || '"',
                '"run_id": "' || x.run_id || '"',
                '"status": "' || x.status || '"',
                '"flow_slug": "' || coalesce(
                  x.flow_slug,
                  (select r.flow_slug from pgflow.runs as r where r.run_id = x.run_id::uuid)) || '"',
                '"step_slug": "' || x.step_slug || '"',
                '"event_type": "' || x.event_type || '"') || '}' as envelope
         from (
           select u.pos,
                  u.p ->> 'event_type' as event_type,
                  u.p ->> 'run_id' as run_id,
                  u.p ->> 'step_slug' as step_slug,
                  u.p ->> 'status' as status,
                  u.p ->> 'flow_slug' as flow_slug,
                  case
                    when u.p ->> 'step_slug' is null then u.p ->> 'event_type'
                    else 'step:' || (u.p ->> 'step_slug') || ':' || split_part(u.p ->> 'event_type', ':', 2)
                  end as event
             from unnest(_emit_events.payloads) with ordinality as u (p, pos)
         ) as x
     ) as e
     cross join lateral (values (1, 'pgflow'), (2, 'pgflow:run:' || e.run_id)) as c (k, channel);
  perform pgflow._notify(v_channels, v_envelopes);

  if pgflow._trusted_realtime_send() is not null then
    execute 'select realtime.send(
                      x.p,
                      case
                        when x.p ->> ''step_slug'' is null then x.p ->> ''event_type''
                        else ''step:'' || (x.p ->> ''step_slug'') || '':'' || split_part(x.p ->> ''event_type'', '':'', 2)
                      end,
                      ''pgflow:run:'' || (x.p ->> ''run_id''),
                      false)
               from unnest($1) with ordinality as x (p, pos)
              order by x.pos'
      using _emit_events.payloads;
  end if;
end;
$$;

comment on function pgflow._emit_events(payloads jsonb[]) is $doc$
pgflow._emit_events(payloads) guarantees: the same as calling pgflow._emit_event(payload, event, run_id) for
every payload, in array order, with event = payload.event_type for run events and
'step:<step_slug>:<what>' for step events (event_type 'step:<what>'), and run_id = payload.run_id:
  * published inside the caller's transaction (seen by listeners only if it commits), in array order;
  * per payload, a notification (pgflow._notify: pg_notify, or deferred when the transaction asks) on 'pgflow'
    and on 'pgflow:run:<run_id>' with the same small envelope as
    _emit_event {"event_type", "event", "run_id", "step_slug" (step events), "status", "flow_slug"};
  * when a trusted realtime.send(jsonb, text, text, boolean) exists (pgflow._trusted_realtime_send), every full payload also goes to
    realtime.send(payload, event, 'pgflow:run:<run_id>', false), in array order (one dynamic statement);
  * one statement for all notifications instead of one function call per event; NULL or empty payloads do
    nothing.
$doc$;
