create or replace function pgflow.track_worker_function(function_name text)
returns void
language sql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  insert into pgflow.worker_functions as wf (function_name, updated_at)
  values (track_worker_function.function_name, clock_timestamp())
  on conflict on constraint worker_functions_pkey do update set updated_at = clock_timestamp();
$$;

comment on function pgflow.track_worker_function(function_name text) is $doc$
pgflow.track_worker_function(function_name) guarantees: a worker_functions row for function_name exists
afterwards; a new row gets the table defaults, an existing one only has updated_at refreshed to
clock_timestamp() (enabled, debounce and last_invoked_at are left alone).
$doc$;
