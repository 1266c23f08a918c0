create or replace function pgflow._emit_event(payload jsonb, event text, run_id uuid)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_topic    text := 'pgflow:run:' || _emit_event.run_id::text;
  v_envelope text;
begin
  v_envelope := jsonb_strip_nulls(jsonb_build_object(
    'event_type', _emit_event.payload ->> 'event_type',
    'event', _emit_event.event,
    'run_id', _emit_event.run_id,
    'step_slug', _emit_event.payload ->> 'step_slug',
    'status', _emit_event.payload ->> 'status',
    'flow_slug', coalesce(
      _emit_event.payload ->> 'flow_slug',
      (select r.flow_slug from pgflow.runs as r where r.run_id = _emit_event.run_id))
  ))::text;

  perform pgflow._notify(array['pgflow', v_topic], array[v_envelope, v_envelope]);

  if pgflow._trusted_realtime_send() is not null then
    execute 'select realtime.send($1, $2, $3, $4)'
      using _emit_event.payload, _emit_event.event, v_topic, false;
  end if;
end;
$$;

comment on function pgflow._emit_event(payload jsonb, event text, run_id uuid) is $doc$
pgflow._emit_event(payload, event, run_id) guarantees:
  * the event is published inside the caller's transaction, so listeners see it only if the state change that
    caused it commits, and in the order the functions emitted it;
  * a notification (pgflow._notify: pg_notify, or deferred when the transaction asks) on the global channel
    'pgflow' and on the per-run channel 'pgflow:run:<run_id>' with a small
    JSON envelope {"event_type", "event", "run_id", "step_slug" (step events), "status", "flow_slug"}; the
    envelope never carries inputs or outputs, so it always stays far below pg_notify's 8000-byte limit
    (slugs are at most 128 characters: the envelope is under 700 bytes);
  * when a trusted realtime.send(jsonb, text, text, boolean) exists (Supabase; see pgflow._trusted_realtime_send:
    one that an unprivileged role planted is never called), the full payload also goes to
    realtime.send(payload, event, 'pgflow:run:<run_id>', false); it is called through dynamic SQL so the
    schema does not depend on Supabase.
$doc$;
