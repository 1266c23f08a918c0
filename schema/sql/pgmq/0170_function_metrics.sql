-- Statistics of one queue at the transaction's now(): messages in the queue, how many are visible, age in seconds of
-- the newest and oldest (null when empty), and total_messages = the last msg_id ever handed out (0 before the first
-- send; not reduced by archive, delete or purge). queue_name is echoed as given. Unknown queue raises 42P01.
create function pgmq.metrics(queue_name text)
returns pgmq.metrics_result
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    qtable text := pgmq.format_table_name(metrics.queue_name, 'q');
    seq text;
    result pgmq.metrics_result;
begin
    execute format(
        $sql$
        select $1::text,
               count(*),
               extract(epoch from now() - max(q.enqueued_at))::integer,
               extract(epoch from now() - min(q.enqueued_at))::integer,
               0::bigint,
               now(),
               count(*) filter (where q.vt <= now())
        from pgmq.%I q
        $sql$,
        qtable)
        into result
        using metrics.queue_name;

    seq := pg_get_serial_sequence(format('pgmq.%I', qtable), 'msg_id');
    execute format('select case when s.is_called then s.last_value else 0 end from %s s', seq)
        into result.total_messages;

    return result;
end;
$body$;
