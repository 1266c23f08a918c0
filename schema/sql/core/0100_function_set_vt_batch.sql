create or replace function pgflow.set_vt_batch(queue_name text, msg_ids bigint[], vt_offsets integer[])
returns table (
  msg_id      bigint,
  read_ct     integer,
  enqueued_at timestamptz,
  vt          timestamptz,
  message     jsonb,
  headers     jsonb
)
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
begin
  if set_vt_batch.msg_ids is null or set_vt_batch.vt_offsets is null
     or coalesce(cardinality(set_vt_batch.msg_ids), 0) = 0 then
    return;
  end if;

  if cardinality(set_vt_batch.msg_ids) <> cardinality(set_vt_batch.vt_offsets) then
    raise exception 'msg_ids length (%) must equal vt_offsets length (%)',
      cardinality(set_vt_batch.msg_ids), cardinality(set_vt_batch.vt_offsets);
  end if;

  return query execute format(
    $sql$
    update pgmq.%I as q
       set vt = clock_timestamp() + make_interval(secs => v.vt_offset)
      from unnest($1::bigint[], $2::integer[]) as v(msg_id, vt_offset)
     where q.msg_id = v.msg_id
    returning q.msg_id, q.read_ct, q.enqueued_at, q.vt, q.message, q.headers
    $sql$,
    pgmq.format_table_name(set_vt_batch.queue_name, 'q'))
    using set_vt_batch.msg_ids, set_vt_batch.vt_offsets;
end;
$$;

comment on function pgflow.set_vt_batch(queue_name text, msg_ids bigint[], vt_offsets integer[]) is $doc$
pgflow.set_vt_batch(queue_name, msg_ids, vt_offsets) guarantees: for each pair (msg_ids[i], vt_offsets[i]) the
message in queue queue_name becomes invisible until clock_timestamp() + vt_offsets[i] seconds (0 = visible now),
in one statement; read_ct is unchanged. Returns the updated messages; ids not in the queue are not returned.
NULL or empty arrays change nothing and return no rows. Arrays of different lengths raise
'msg_ids length (<a>) must equal vt_offsets length (<b>)'; an unknown queue raises
'relation "pgmq.q_<name>" does not exist' (42P01). PGMQ has no batch set_vt, so this is one of the two places
that update a PGMQ queue table directly (the table name comes from pgmq.format_table_name, which validates it).
$doc$;
