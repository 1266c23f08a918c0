-- Guarantees: queue names of 48 characters or more are rejected with PGMQ's error text (47 is the longest accepted),
-- so every derived table, sequence and index name fits in PostgreSQL's 63-byte identifier limit for ASCII names.
create function pgmq.validate_queue_name(queue_name text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
begin
    if length(validate_queue_name.queue_name) >= 48 then
        raise exception 'queue name is too long, maximum length is 48 characters'
            using detail = format('queue name %s has %s characters; use at most 47',
                                  validate_queue_name.queue_name, length(validate_queue_name.queue_name));
    end if;
end;
$body$;
