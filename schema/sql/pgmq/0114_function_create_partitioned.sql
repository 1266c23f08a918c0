-- Partitioned queues need pg_partman and the real extension. Guarantees: always raises (after the usual name checks),
-- creating nothing.
create function pgmq.create_partitioned(
    queue_name text,
    partition_interval text default '10000',
    retention_interval text default '100000'
)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
begin
    perform pgmq.format_table_name(create_partitioned.queue_name, 'q');
    perform pgmq.validate_queue_name(create_partitioned.queue_name);
    raise exception 'pgmq.create_partitioned(%) is not supported by the bundled PGMQ layer; install the pgmq extension (>= 1.5) and pg_partman to use partitioned queues',
        create_partitioned.queue_name
        using errcode = 'feature_not_supported';
end;
$body$;
