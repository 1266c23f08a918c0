-- Like read, but when nothing qualifies it sleeps poll_interval_ms and tries again until max_poll_seconds have
-- passed since the call. Guarantees: returns the first non-empty batch as soon as one is found; returns an empty set
-- once the deadline passes (the deadline is checked before every attempt, so max_poll_seconds <= 0 reads nothing,
-- as in PGMQ).
create function pgmq.read_with_poll(
    queue_name text,
    vt integer,
    qty integer,
    max_poll_seconds integer default 5,
    poll_interval_ms integer default 100,
    conditional jsonb default '{}'
)
returns setof pgmq.message_record
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    stop_at timestamptz := clock_timestamp() + make_interval(secs => read_with_poll.max_poll_seconds);
begin
    loop
        if clock_timestamp() >= stop_at then
            return;
        end if;

        return query
            select r.msg_id, r.read_ct, r.enqueued_at, r.vt, r.message, r.headers
            from pgmq.read(read_with_poll.queue_name, read_with_poll.vt, read_with_poll.qty,
                           read_with_poll.conditional) r;
        if found then
            return;
        end if;

        perform pg_sleep(read_with_poll.poll_interval_ms::numeric / 1000);
    end loop;
end;
$body$;
