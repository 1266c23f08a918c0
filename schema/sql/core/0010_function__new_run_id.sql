create or replace function pgflow._new_run_id()
returns uuid
language sql
volatile
parallel safe
set search_path = pg_catalog, pg_temp
as $$
  -- gen_random_uuid() already carries the RFC variant bits (10) and 122 random bits: its first 6 bytes become the
  -- Unix time in milliseconds (big-endian, the low 6 bytes of an int8) and its version nibble 4 becomes 7.
  select encode(set_byte(overlay(r.b placing substring(int8send(r.ms) from 3 for 6) from 1 for 6),
                         6, (get_byte(r.b, 6) & 15) | 112),
                'hex')::uuid
    from (select uuid_send(gen_random_uuid()) as b,
                 floor(extract(epoch from clock_timestamp()) * 1000)::int8 as ms) as r
$$;

comment on function pgflow._new_run_id() is $doc$
pgflow._new_run_id() guarantees (v0.20.0): a fresh run id in the version 7 layout of RFC 9562 - the id
start_flow and start_flows give a run when the caller passes none, and the default of runs.run_id. Bits 0-47 are
the Unix time in milliseconds of clock_timestamp() at the call (not of the transaction's start), then version 7,
then the RFC variant bits 10; the other 74 bits are random (from gen_random_uuid, the same source as before
v0.20.0). Ids made in different milliseconds never collide; within one millisecond two ids collide with
probability 2^-74. Ids made in different milliseconds sort (uuid order, bytewise) in the order of their clocks,
so new runs land at the right end of every index that leads with run_id instead of on random pages of it.
Within one millisecond the order is random: not monotonic, no counter, no state shared between sessions. The
order holds only as far as the server's clock does (a clock set back gives smaller ids). Volatile; reads and
writes no table. The time of the start is readable from the id.
$doc$;
