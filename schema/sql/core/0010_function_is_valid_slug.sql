create or replace function pgflow.is_valid_slug(slug text)
returns boolean
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
set jit = off
as $$
begin
  if slug is null or slug = '' then
    return false;
  end if;
  return length(slug) <= 128
    and slug ~ '^[a-zA-Z_][a-zA-Z0-9_]*$'
    and slug <> 'run';
end;
$$;

comment on function pgflow.is_valid_slug(slug text) is $doc$
pgflow.is_valid_slug(slug) guarantees: true exactly when slug is not NULL, not empty, at most 128 characters,
starts with an ASCII letter or underscore, continues with ASCII letters, digits or underscores, and is not the
reserved word 'run' (case-sensitive, so 'Run' is valid). Pure function; used by the slug CHECK constraints, so
it exists before the tables.
$doc$;
