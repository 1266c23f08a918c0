-- Moves the listed messages from pgmq.q_<name> to pgmq.a_<name> in one statement and returns the ids moved.
-- Guarantees: ids not in the queue are skipped silently (fewer rows come back, no error).
create function pgmq.archive(queue_name text, msg_ids bigint[])
returns setof bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    qtable text := pgmq.format_table_name(archive.queue_name, 'q');
    atable text := pgmq.format_table_name(archive.queue_name, 'a');
begin
    return query execute format(
        $sql$
        with removed as (
            delete from pgmq.%I q
            where q.msg_id = any($1)
            returning q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers
        )
        insert into pgmq.%I (msg_id, read_ct, enqueued_at, vt, message, headers)
        select r.msg_id, r.read_ct, r.enqueued_at, r.vt, r.message, r.headers
        from removed r
        returning msg_id
        $sql$,
        qtable, atable)
        using archive.msg_ids;
end;
$body$;
