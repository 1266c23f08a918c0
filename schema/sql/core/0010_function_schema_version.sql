create or replace function pgflow.schema_version()
returns text
language sql
immutable
parallel safe
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  select '0.20.0'::text
$$;

comment on function pgflow.schema_version() is $doc$
pgflow.schema_version() guarantees (since v0.20.0): returns the version of the pgflow-go schema installed in this
database, e.g. '0.20.0' - the version of the newest migration applied (each migration redefines it). Clients and
workers check it once at startup and refuse to run against an older schema ("run `pgflow migrate up`"); a
database without this function is older than v0.20.0.
$doc$;
