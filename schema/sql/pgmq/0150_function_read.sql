-- Claims up to qty visible messages (vt <= clock_timestamp()), oldest msg_id first, skipping rows other sessions have
-- locked; each claimed message gets vt = clock_timestamp() + vt seconds and read_ct + 1. With a non-empty
-- conditional only messages whose body contains it (jsonb @>) qualify; '{}' and null mean no filter.
-- Guarantees: two concurrent readers never receive the same message; the rows come back ordered by msg_id;
-- unknown queue raises 42P01.
create function pgmq.read(queue_name text, vt integer, qty integer, conditional jsonb default '{}')
returns setof pgmq.message_record
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    qtable text := pgmq.format_table_name(read.queue_name, 'q');
begin
    return query execute format(
        $sql$
        with picked as (
            select q.msg_id
            from pgmq.%1$I q
            where q.vt <= clock_timestamp()
              and ($3 is null or $3 = '{}'::jsonb or q.message @> $3)
            order by q.msg_id
            limit $1
            for update skip locked
        ),
        claimed as (
            update pgmq.%1$I m
            set vt = clock_timestamp() + $2,
                read_ct = m.read_ct + 1
            from picked
            where m.msg_id = picked.msg_id
            returning m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers
        )
        select c.msg_id, c.read_ct, c.enqueued_at, c.vt, c.message, c.headers
        from claimed c
        order by c.msg_id
        $sql$,
        qtable)
        using read.qty, make_interval(secs => read.vt), read.conditional;
end;
$body$;
