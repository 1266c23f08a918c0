-- Converting an archive to a partitioned table needs pg_partman and the real extension.
-- Guarantees: always raises, changing nothing.
create function pgmq.convert_archive_partitioned(
    table_name text,
    partition_interval text default '10000',
    retention_interval text default '100000',
    leading_partition integer default 10
)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
begin
    raise exception 'pgmq.convert_archive_partitioned(%) is not supported by the bundled PGMQ layer; install the pgmq extension (>= 1.5) and pg_partman to use partitioned archives',
        convert_archive_partitioned.table_name
        using errcode = 'feature_not_supported';
end;
$body$;
