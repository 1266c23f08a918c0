-- Deletes one message from the queue table for good (the archive is not touched).
-- Guarantees: true when it was deleted; false (not an error) when no such message is in the queue.
create function pgmq.delete(queue_name text, msg_id bigint)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    qtable text := pgmq.format_table_name(delete.queue_name, 'q');
    removed bigint;
begin
    execute format('delete from pgmq.%I q where q.msg_id = $1 returning q.msg_id', qtable)
        into removed
        using delete.msg_id;
    return removed is not null;
end;
$body$;
