create or replace function pgflow._notify_queue_visible_at(queue_name text, visible_at timestamptz)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_setting text := 'pgflow.visible_at_' || _notify_queue_visible_at.queue_name;
  v_epoch   numeric := extract(epoch from _notify_queue_visible_at.visible_at);
  v_prev    numeric;
begin
  if _notify_queue_visible_at.queue_name is null or _notify_queue_visible_at.visible_at is null then
    return;
  end if;
  -- The earliest time already announced for this queue in this transaction (a transaction-local setting; '' when
  -- unset, as PostgreSQL leaves a placeholder after the transaction that set it).
  v_prev := nullif(pg_catalog.current_setting(v_setting, true), '')::numeric;
  if v_prev is not null and v_prev <= v_epoch then
    return;
  end if;
  perform pg_catalog.set_config(v_setting, v_epoch::text, true);
  perform pg_catalog.pg_notify(
    'pgflow:queue:' || _notify_queue_visible_at.queue_name,
    '{"visible_at":"' || pg_catalog.to_char(_notify_queue_visible_at.visible_at at time zone 'UTC',
                                             'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '"}');
end;
$$;

comment on function pgflow._notify_queue_visible_at(queue_name text, visible_at timestamptz) is $doc$
pgflow._notify_queue_visible_at(queue_name, visible_at) guarantees (v0.20.0): tells the workers listening on
'pgflow:queue:<queue_name>' that a message of that queue becomes visible at visible_at, with the payload
{"visible_at":"<RFC 3339 time in UTC, microseconds>"} (e.g. {"visible_at":"2025-01-02T03:04:05.123456Z"}), so a
worker can wake exactly then instead of at its next poll. At most one notification per queue and time: within a
transaction a time that is not earlier than one already announced for the queue sends nothing, so a transaction
sends one notification per queue unless it later delays a message to an even earlier time (callers that send
several delays at once announce the earliest first). NULL arguments do nothing. Notifications go out at commit
(none on rollback). Callers announce times in the future only; the empty payload '' keeps meaning "visible now".
$doc$;
