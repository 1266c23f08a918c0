-- Sets a message's visibility to clock_timestamp() + vt seconds and returns the updated message.
-- Guarantees: read_ct is unchanged; an unknown msg_id gives no row (not an error); unknown queue raises 42P01.
create function pgmq.set_vt(queue_name text, msg_id bigint, vt integer)
returns setof pgmq.message_record
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    qtable text := pgmq.format_table_name(set_vt.queue_name, 'q');
begin
    return query execute format(
        $sql$
        update pgmq.%I m
        set vt = clock_timestamp() + $2
        where m.msg_id = $1
        returning m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers
        $sql$,
        qtable)
        using set_vt.msg_id, make_interval(secs => set_vt.vt);
end;
$body$;
