create or replace function pgflow._notify(channels text[], payloads text[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
begin
  if coalesce(cardinality(_notify.channels), 0) = 0 then
    return;
  end if;
  -- PostgreSQL serialises the commits of notifying transactions with one cluster-wide lock that each holds through
  -- its commit's WAL flush, so notifying transactions cannot share a flush. A caller that sets
  -- pgflow.defer_notifications for its transaction takes the notifications back instead (the transaction-local
  -- setting pgflow.deferred_notifications) and sends them itself after its commit, in a transaction that writes
  -- nothing and need not wait for a flush.
  if pg_catalog.current_setting('pgflow.defer_notifications', true) = 'on' then
    perform pg_catalog.set_config('pgflow.deferred_notifications',
      (coalesce(nullif(pg_catalog.current_setting('pgflow.deferred_notifications', true), ''), '[]')::jsonb
        || coalesce((select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(n.channel, n.payload) order by n.pos)
                       from unnest(_notify.channels, _notify.payloads) with ordinality as n (channel, payload, pos)),
                    '[]'::jsonb))::text,
      true);
    return;
  end if;
  -- pg_notify is volatile, so the planner evaluates it after the sort: notifications go out in array order.
  perform pg_catalog.pg_notify(n.channel, n.payload)
     from unnest(_notify.channels, _notify.payloads) with ordinality as n (channel, payload, pos)
    order by n.pos;
end;
$$;

comment on function pgflow._notify(channels text[], payloads text[]) is $doc$
pgflow._notify(channels, payloads) guarantees (v0.20.0; every notification of the schema goes through it):
  * by default, pg_notify(channels[i], payloads[i]) for every i, in array order, inside the caller's transaction
    (delivered only if it commits; PostgreSQL folds identical notifications of a transaction);
  * when the transaction has set pgflow.defer_notifications to 'on' (set_config(..., true)), nothing is notified:
    the pairs are appended, in order, to the transaction-local setting pgflow.deferred_notifications, a JSON array
    of [channel, payload] arrays, which the caller reads before it commits and sends after the commit
    (the Go client and worker do, with synchronous_commit off). The caller then owns delivery: a notification it does not send is lost;
  * NULL or empty arrays do nothing; the arrays are paired by position (unnest), so they should be equally long;
    an array of two or more dimensions is read as unnest reads it, in storage order (row by row).
$doc$;
