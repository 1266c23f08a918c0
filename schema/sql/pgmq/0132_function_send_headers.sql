-- Enqueues one message with headers, visible at once; returns its msg_id.
create function pgmq.send(queue_name text, msg jsonb, headers jsonb)
returns setof bigint
language sql
set search_path = pg_catalog, pg_temp
as $body$
    select pgmq.send(queue_name, msg, headers, clock_timestamp());
$body$;
