#!/usr/bin/env bash
# How PostgreSQL's notification lock limits concurrent starts (docs/performance.md, "Notifications after the
# commit"). Starts a throwaway durable cluster, installs the schema, and runs pgbench with 1, 4 and 16 clients,
# each transaction one pgflow.start_flow of a one-step flow:
#   in-transaction   start_flow notifies inside its transaction (what a SQL caller gets);
#   after-commit     start_flow with pgflow.defer_notifications on, then the deferred notifications sent in a
#                    transaction of their own with synchronous_commit off (what the Go client does).
# Also prints the disk's fdatasync time (pg_test_fsync), which bounds the first variant.
#
# Usage: scripts/notify-lock.sh [OUTDIR]   env: PORT=55991 SECONDS_PER_RUN=8 PGFLOW=path/to/pgflow
set -euo pipefail

out=${1:-$(mktemp -d /tmp/pgflow-notify-lock.XXXXXX)}
port=${PORT:-55991}
secs=${SECONDS_PER_RUN:-8}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
data="$out/data"
pgflow=${PGFLOW:-}
if [[ -z "$pgflow" ]]; then
  pgflow="$out/pgflow"
  (cd "$root/cmd/pgflow" && go build -o "$pgflow" .)
fi

as_server() { if [[ $EUID -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if [[ $EUID -eq 0 ]]; then chown postgres "$out"; fi
bindir=$(pg_config --bindir)
as_server "$bindir/initdb" -D "$data" -U postgres --auth=trust >"$out/initdb.log"
as_server tee -a "$data/postgresql.conf" >/dev/null <<CONF
port = $port
listen_addresses = ''
unix_socket_directories = '$out'
fsync = on
synchronous_commit = on
full_page_writes = on
shared_buffers = 128MB
max_connections = 100
CONF
as_server "$bindir/pg_ctl" -D "$data" -l "$out/server.log" -w start >/dev/null
trap 'as_server "$bindir/pg_ctl" -D "$data" -m immediate -w stop >/dev/null' EXIT

url="postgres://postgres@/postgres?host=$out&port=$port&sslmode=disable"
"$pgflow" migrate up --database-url "$url" >"$out/migrate.log"
psql -X -q -h "$out" -p "$port" -U postgres -d postgres \
  -c "select pgflow.create_flow('lock_probe')" -c "select pgflow.add_step('lock_probe', 'work')" >/dev/null

cat >"$out/in-transaction.sql" <<'SQL'
select pgflow.start_flow('lock_probe', '{}');
SQL
# What the Go client sends, in two round trips: the start with its notifications deferred (one transaction; here a
# helper function, as pgbench cannot read a result inside a pipeline), then the send, pipelined.
psql -X -q -h "$out" -p "$port" -U postgres -d postgres <<'SQL'
create function public.start_deferred() returns text language plpgsql as $$
begin
  perform pg_catalog.set_config('pgflow.defer_notifications', 'on', true);
  perform pgflow.start_flow('lock_probe', '{}');
  return pg_catalog.current_setting('pgflow.deferred_notifications');
end $$;
SQL
cat >"$out/after-commit.sql" <<'SQL'
select public.start_deferred() as pending \gset
\startpipeline
begin;
set local synchronous_commit = off;
select pg_catalog.pg_notify(e.v ->> 0, e.v ->> 1) from pg_catalog.jsonb_array_elements(:pending::jsonb) with ordinality as e (v, i) order by e.i;
commit;
\endpipeline
SQL

echo "fdatasync: $(as_server "$bindir/pg_test_fsync" -s 2 -f "$data/fsync_probe" | awk '/^ +fdatasync/ {print $(NF-1), $NF}' | head -1)"
rm -f "$data/fsync_probe"
for script in in-transaction after-commit; do
  for clients in 1 4 16; do
    tps=$("$bindir/pgbench" -n -M extended -h "$out" -p "$port" -U postgres -c "$clients" -j 2 -T "$secs" -f "$out/$script.sql" postgres \
          | awk '/^tps/ {print $3}')
    printf '%-15s clients %2d: %8.0f starts/s\n' "$script" "$clients" "$tps"
  done
done
