-- Enqueues one message without headers, invisible until the given time; returns its msg_id.
create function pgmq.send(queue_name text, msg jsonb, delay timestamptz)
returns setof bigint
language sql
set search_path = pg_catalog, pg_temp
as $body$
    select pgmq.send(queue_name, msg, null::jsonb, delay);
$body$;
