create or replace function pgflow.calculate_retry_delay(base_delay numeric, attempts_count integer)
returns integer
language sql
immutable
parallel safe
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  select case
    when base_delay is null or attempts_count is null then null
    when base_delay <= 0 then 0
    else least(
      floor(base_delay * power(2::numeric, greatest(least(attempts_count, 60000), -60000)::numeric)),
      2147483647
    )::integer
  end;
$$;

comment on function pgflow.calculate_retry_delay(base_delay numeric, attempts_count integer) is $doc$
pgflow.calculate_retry_delay(base_delay, attempts_count) guarantees: the exponential backoff in whole seconds,
floor(base_delay * 2^attempts_count), capped at 2147483647 (the largest integer, about 68 years) instead of
failing with "integer out of range". A base_delay of 0 or less gives 0; NULL arguments give NULL.
The exponent is clamped to +-60000 so numeric arithmetic cannot overflow: 2^60000 times the smallest positive
numeric is still far above the cap, so positive exponents stay exact; negative exponents (pgflow never passes
them, attempts_count is never negative) are exact for every base_delay below 10^16000.
$doc$;
