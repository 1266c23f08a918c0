-- pgflow._emit_events(payloads) guarantees: the same as calling pgflow._emit_event(payload, event, run_id) for
-- every payload, in array order, with event = payload.event_type for run events and
-- 'step:<step_slug>:<what>' for step events (event_type 'step:<what>'), and run_id = payload.run_id:
--   * published inside the caller's transaction (seen by listeners only if it commits), in array order;
--   * per payload, pg_notify on 'pgflow' and on 'pgflow:run:<run_id>' with the same small envelope as
--     _emit_event {"event_type", "event", "run_id", "step_slug" (step events), "status", "flow_slug"};
--   * when realtime.send(jsonb, text, text, boolean) exists, every full payload also goes to
--     realtime.send(payload, event, 'pgflow:run:<run_id>', false), in array order (one dynamic statement);
--   * one statement for all notifications instead of one function call per event; NULL or empty payloads do
--     nothing.
create or replace function pgflow._emit_events(payloads jsonb[])
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if _emit_events.payloads is null or cardinality(_emit_events.payloads) = 0 then
    return;
  end if;

  -- pg_notify is volatile, so the planner evaluates it after the sort: notifications go out in ORDER BY order.
  perform pg_notify(c.channel, e.envelope)
     from (
       select x.pos,
              (x.p ->> 'run_id')::uuid as run_id,
              jsonb_strip_nulls(jsonb_build_object(
                'event_type', x.p ->> 'event_type',
                'event', x.event,
                'run_id', (x.p ->> 'run_id')::uuid,
                'step_slug', x.p ->> 'step_slug',
                'status', x.p ->> 'status',
                'flow_slug', coalesce(
                  x.p ->> 'flow_slug',
                  (select r.flow_slug from pgflow.runs as r where r.run_id = (x.p ->> 'run_id')::uuid))
              ))::text as envelope
         from (
           select u.p, u.pos,
                  case
                    when u.p ->> 'step_slug' is null then u.p ->> 'event_type'
                    else 'step:' || (u.p ->> 'step_slug') || ':' || split_part(u.p ->> 'event_type', ':', 2)
                  end as event
             from unnest(_emit_events.payloads) with ordinality as u (p, pos)
         ) as x
     ) as e
     cross join lateral (values (1, 'pgflow'), (2, 'pgflow:run:' || e.run_id::text)) as c (k, channel)
    order by e.pos, c.k;

  if to_regprocedure('realtime.send(jsonb,text,text,boolean)') is not null then
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
