create or replace function pgflow._notify_queue_visible_at(queue_name text, visible_at timestamptz)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
begin
  if _notify_queue_visible_at.queue_name is null or _notify_queue_visible_at.visible_at is null then
    return;
  end if;
  -- Every distinct time is announced: a worker keeps all of them, so a message due later than another one of the
  -- same transaction is not left to its periodic read. PostgreSQL folds identical notifications of a transaction.
  perform pgflow._notify(
    array['pgflow:queue:' || _notify_queue_visible_at.queue_name],
    array['{"visible_at":"' || pg_catalog.to_char(_notify_queue_visible_at.visible_at at time zone 'UTC',
                                                   'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '"}']);
end;
$$;

comment on function pgflow._notify_queue_visible_at(queue_name text, visible_at timestamptz) is $doc$
pgflow._notify_queue_visible_at(queue_name, visible_at) guarantees (v0.20.0): tells the workers listening on
'pgflow:queue:<queue_name>' that a message of that queue becomes visible at visible_at, with the payload
{"visible_at":"<RFC 3339 time in UTC, microseconds>"} (e.g. {"visible_at":"2025-01-02T03:04:05.123456Z"}), so a
worker can wake exactly then instead of at its next poll. Every call announces its time, so a transaction that
delays messages of one queue by several amounts announces each of them; identical announcements of one
transaction reach the listeners once, as PostgreSQL folds identical notifications. NULL arguments do nothing.
Notifications go out at commit (none on rollback). Callers announce times in the future only; the empty payload
'' keeps meaning "visible now".
$doc$;
