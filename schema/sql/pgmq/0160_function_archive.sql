-- Moves one message from pgmq.q_<name> to pgmq.a_<name> (archived_at = now()) in one statement.
-- Guarantees: true when the message was moved; false (not an error) when no such message is in the queue.
create function pgmq.archive(queue_name text, msg_id bigint)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    qtable text := pgmq.format_table_name(archive.queue_name, 'q');
    atable text := pgmq.format_table_name(archive.queue_name, 'a');
    moved bigint;
begin
    execute format(
        $sql$
        with removed as (
            delete from pgmq.%I q
            where q.msg_id = $1
            returning q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers
        )
        insert into pgmq.%I (msg_id, read_ct, enqueued_at, vt, message, headers)
        select r.msg_id, r.read_ct, r.enqueued_at, r.vt, r.message, r.headers
        from removed r
        returning msg_id
        $sql$,
        qtable, atable)
        into moved
        using archive.msg_id;
    return moved is not null;
end;
$body$;
