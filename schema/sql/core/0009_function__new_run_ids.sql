create or replace function pgflow._new_run_ids(n integer)
returns uuid[]
language plpgsql
volatile
parallel safe
set search_path = pg_catalog, pg_temp
set jit = off
-- PL/pgSQL rather than SQL: PostgreSQL 15 plans the body of an SQL function that it cannot inline (this one pins
-- its search_path) on every call; PL/pgSQL keeps the plan for the session.
as $$
begin
  -- gen_random_uuid() already carries the RFC variant bits (10) and 122 random bits: its first 6 bytes become the
  -- Unix time in milliseconds (big-endian, the low 6 bytes of an int8) and its version nibble 4 becomes 7. The
  -- subquery in FROM is evaluated once per element (its volatile target list keeps it from being pulled up).
  return (
    select coalesce(array_agg(encode(set_byte(overlay(r.b placing substring(int8send(r.ms) from 3 for 6) from 1 for 6),
                                              6, (get_byte(r.b, 6) & 15) | 112),
                                     'hex')::uuid order by r.i),
                    '{}')
      from (select g.i,
                   uuid_send(gen_random_uuid()) as b,
                   floor(extract(epoch from clock_timestamp()) * 1000)::int8 as ms
              from generate_series(1, _new_run_ids.n) as g (i)) as r);
end;
$$;

comment on function pgflow._new_run_ids(n integer) is $doc$
pgflow._new_run_ids(n) guarantees (v0.20.0): an array of n fresh run ids, each exactly what pgflow._new_run_id()
makes (the version 7 layout of RFC 9562: the Unix time in milliseconds of clock_timestamp() when that element is
made, version 7, the RFC variant, 74 random bits), in the order they were made; an empty array for n 0 or less
or NULL. One call for a batch of runs (start_flows): a call per id costs more than the id.
$doc$;
