create or replace function pgflow._emit_events(payloads jsonb[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_event_types text[];
  v_run_ids     uuid[];
  v_flow_slugs  text[];
  v_step_slugs  text[];
  v_statuses    text[];
begin
  if _emit_events.payloads is null or cardinality(_emit_events.payloads) = 0 then
    return;
  end if;

  -- The envelopes and the realtime payloads are pgflow._emit_envelopes' business; this only takes the fields out.
  select array_agg(u.p ->> 'event_type'), array_agg((u.p ->> 'run_id')::uuid), array_agg(u.p ->> 'flow_slug'),
         array_agg(u.p ->> 'step_slug'), array_agg(u.p ->> 'status')
    into v_event_types, v_run_ids, v_flow_slugs, v_step_slugs, v_statuses
    from (select x.p from unnest(_emit_events.payloads) with ordinality as x (p, pos) order by x.pos) as u;
  perform pgflow._emit_envelopes(v_event_types, v_run_ids, v_flow_slugs, v_step_slugs, v_statuses,
                                 _emit_events.payloads);
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
  * it is pgflow._emit_envelopes of the payloads' fields, with the payloads for realtime.send (v0.20.0); NULL or
    empty payloads do nothing.
$doc$;
