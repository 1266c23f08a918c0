-- With the extension this removes the archive table from the extension so it survives drop extension. The bundled
-- layer owns no extension, so there is nothing to detach. Guarantees: changes nothing; raises 42P01 when the archive
-- table does not exist (as the extension does); otherwise only emits a notice.
create function pgmq.detach_archive(queue_name text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    atable text := pgmq.format_table_name(detach_archive.queue_name, 'a');
begin
    if to_regclass(format('pgmq.%I', atable)) is null then
        raise exception 'relation "pgmq.%" does not exist', atable
            using errcode = 'undefined_table';
    end if;
    raise notice 'pgmq.detach_archive(%): the bundled PGMQ layer is not an extension; pgmq.% is left as it is',
        detach_archive.queue_name, atable;
end;
$body$;
