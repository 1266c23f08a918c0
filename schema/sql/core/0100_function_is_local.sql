create or replace function pgflow.is_local()
returns boolean
language sql
stable
parallel safe
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  select coalesce(current_setting('pgflow.environment', true), '') = 'local'
      or coalesce(current_setting('app.settings.jwt_secret', true), '')
         = 'super-secret-jwt-token-with-at-least-32-characters-long';
$$;

comment on function pgflow.is_local() is $doc$
pgflow.is_local() guarantees: true exactly when this session runs against a local development database, which
pgflow-go recognises in two ways:
  * the custom setting pgflow.environment is 'local' (set by `pgflow dev` / the demo, or by an operator with
    `alter database ... set pgflow.environment = 'local'`);
  * the setting app.settings.jwt_secret holds the fixed JWT secret of a local Supabase CLI stack (as pgflow does).
Missing settings count as "not local". Used by ensure_flow_compiled to allow destructive recompilation.
$doc$;
