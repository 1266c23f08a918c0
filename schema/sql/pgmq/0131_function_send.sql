-- Enqueues one message, visible at once, without headers; returns its msg_id.
create function pgmq.send(queue_name text, msg jsonb)
returns setof bigint
language sql
set search_path = pg_catalog, pg_temp
as $body$
    select pgmq.send(queue_name, msg, null::jsonb, clock_timestamp());
$body$;
