-- Enqueues one message with headers, invisible until delay (an absolute time); returns its new msg_id.
-- Guarantees: msg_ids increase with every send to the queue; enqueued_at is the transaction's now();
-- unknown queue raises 42P01. Every other send overload delegates here.
create function pgmq.send(queue_name text, msg jsonb, headers jsonb, delay timestamptz)
returns setof bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    qtable text := pgmq.format_table_name(send.queue_name, 'q');
begin
    return query execute format(
        'insert into pgmq.%I (vt, message, headers) values ($1, $2, $3) returning msg_id',
        qtable)
        using send.delay, send.msg, send.headers;
end;
$body$;
