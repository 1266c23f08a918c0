-- Enqueues msgs[i] with headers[i] (null when headers is shorter or null), all invisible until delay; returns the
-- new msg_ids in the order of msgs. Guarantees: the whole batch gets one vt; ids increase along the array.
-- Every other send_batch overload delegates here.
create function pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay timestamptz)
returns setof bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    qtable text := pgmq.format_table_name(send_batch.queue_name, 'q');
begin
    return query execute format(
        $sql$
        with inserted as (
            insert into pgmq.%I (vt, message, headers)
            select $1, u.message, u.headers
            from unnest($2, coalesce($3, '{}'::jsonb[])) with ordinality as u(message, headers, ord)
            order by u.ord
            returning msg_id
        )
        select i.msg_id from inserted i order by i.msg_id
        $sql$,
        qtable)
        using send_batch.delay, send_batch.msgs, send_batch.headers;
end;
$body$;
