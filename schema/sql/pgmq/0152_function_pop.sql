-- Removes and returns the oldest visible message (at most one), skipping rows locked by other sessions.
-- Guarantees: the message is deleted, not archived; read_ct is returned unchanged; empty queue gives no row.
create function pgmq.pop(queue_name text)
returns setof pgmq.message_record
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    qtable text := pgmq.format_table_name(pop.queue_name, 'q');
begin
    return query execute format(
        $sql$
        with picked as (
            select q.msg_id
            from pgmq.%1$I q
            where q.vt <= clock_timestamp()
            order by q.msg_id
            limit 1
            for update skip locked
        )
        delete from pgmq.%1$I m
        using picked
        where m.msg_id = picked.msg_id
        returning m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers
        $sql$,
        qtable);
end;
$body$;
