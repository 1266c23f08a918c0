create or replace function pgflow._trusted_realtime_send()
returns regprocedure
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_fn      regprocedure := pg_catalog.to_regprocedure('realtime.send(jsonb,text,text,boolean)');
  v_trusted boolean;
  v_owner   text;
begin
  if v_fn is null then
    return null;
  end if;

  select bool_and(o.rolsuper or o.oid = pn.nspowner), pg_catalog.string_agg(o.rolname, ', ')
    into v_trusted, v_owner
    from pg_catalog.pg_proc as p
    join pg_catalog.pg_namespace as rn on rn.oid = p.pronamespace
    join pg_catalog.pg_namespace as pn on pn.nspname = 'pgflow'
    join pg_catalog.pg_roles as o on o.oid in (p.proowner, rn.nspowner)
   where p.oid = v_fn;

  if coalesce(v_trusted, false) then
    return v_fn;
  end if;

  if pg_catalog.current_setting('pgflow.untrusted_realtime_logged', true) is distinct from 'on' then
    raise log 'pgflow: not calling %: it or schema realtime is owned by % (neither a superuser nor the owner of schema pgflow), so events are not sent to Supabase Realtime',
      v_fn, v_owner;
    perform pg_catalog.set_config('pgflow.untrusted_realtime_logged', 'on', false);
  end if;
  return null;
end;
$$;

comment on function pgflow._trusted_realtime_send() is $doc$
pgflow._trusted_realtime_send() guarantees (v0.20.0): returns realtime.send(jsonb, text, text, boolean) when that
function exists and can be trusted with the rights of whoever emits events (the pgflow owner inside SECURITY
DEFINER functions, a worker role otherwise); NULL otherwise. Trusted means: both the function and schema
realtime are owned by a superuser or by the owner of schema pgflow (Supabase: supabase_admin / postgres). A
realtime.send that any other role created (a role with CREATE on the database can create schema realtime) is
never called: its code would run with pgflow's rights on every state change. When such an untrusted function is
found, one LOG line per session says so (server log only; clients do not see it).
$doc$;
