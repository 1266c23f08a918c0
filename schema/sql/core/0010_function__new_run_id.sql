create or replace function pgflow._new_run_id()
returns uuid
language sql
volatile
parallel safe
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  select (pgflow._new_run_ids(1))[1]
$$;

comment on function pgflow._new_run_id() is $doc$
pgflow._new_run_id() guarantees (v0.20.0): a fresh run id in the version 7 layout of RFC 9562 - the id start_flow
and start_flows give a run when the caller passes none (they make it with pgflow._new_run_ids), and the default of
runs.run_id. Bits 0-47 are the Unix time in milliseconds of clock_timestamp() at the call (not of the transaction's
start), then version 7, then the RFC variant bits 10; the other 74 bits are random (from gen_random_uuid, the same
source as before v0.20.0). Ids made in different milliseconds never collide; within one millisecond two ids collide
with probability 2^-74. Ids made in different milliseconds sort (uuid order, bytewise) in the order of their
clocks, so new runs land at the right end of every index that leads with run_id instead of on random pages of it.
Within one millisecond the order is random: not monotonic, no counter, no state shared between sessions. The order
holds only as far as the server's clock does (a clock set back gives smaller ids). Volatile; reads and writes no
table. The time of the start is readable from the id.
$doc$;
