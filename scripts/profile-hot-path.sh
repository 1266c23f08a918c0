#!/usr/bin/env bash
# Per-transition accounting of the hot path (docs/performance.md, "Where a task's cost goes").
#
# Starts a throwaway durable cluster with pg_stat_statements and auto_explain, installs the schema with the CLI,
# and for each scenario (one-step, chain, map over 100) drives the worker's SQL calls by hand from one session:
# start RUNS runs (pgflow.start_flows), then rounds of pgflow.read_and_start_tasks and pgflow.complete_tasks of
# BATCH tasks each, until every run has finished (and, for comparison, one batch through pgflow's own path:
# pgmq.read, then pgflow.start_tasks). Each phase runs in its own transaction; before it commits, the
# script reads pg_stat_xact_user_tables (rows inserted, updated - HOT or not - and deleted by this transaction,
# per table) and the WAL position, so the figures are exact and need no quiet machine. At the end it prints
# pg_stat_statements (nested statements included) and leaves auto_explain's plans (ANALYZE, BUFFERS, WAL of every
# nested statement of one batch per phase) in the server log.
#
# Usage: scripts/profile-hot-path.sh [OUTDIR]
# env: RUNS=1000 BATCH=100 PORT=55990 PGFLOW=path/to/pgflow EXPLAIN=1 (0: no plans, timings without auto_explain)
#      EXPLAIN_ROUND=1 (the batch whose plans are logged) SCENARIOS=one-step,chain,map
set -euo pipefail

out=${1:-$(mktemp -d /tmp/pgflow-profile.XXXXXX)}
runs=${RUNS:-1000}
batch=${BATCH:-100}
port=${PORT:-55990}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
data="$out/data"

pgflow=${PGFLOW:-}
if [[ -z "$pgflow" ]]; then
  pgflow="$out/pgflow"
  (cd "$root/cmd/pgflow" && go build -o "$pgflow" .)
fi

# PostgreSQL refuses to run as root: then the server runs as the postgres user.
as_server() { if [[ $EUID -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if [[ $EUID -eq 0 ]]; then chown postgres "$out"; fi
as_server initdb -D "$data" -U postgres --auth=trust >"$out/initdb.log"
as_server tee -a "$data/postgresql.conf" >/dev/null <<EOF
port = $port
listen_addresses = ''
unix_socket_directories = '$out'
fsync = on
synchronous_commit = on
full_page_writes = on
shared_buffers = 128MB
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.track_utility = off
pg_stat_statements.max = 5000
track_functions = all
autovacuum = off
logging_collector = off
EOF
as_server pg_ctl -D "$data" -l "$out/server.log" -w start >/dev/null
trap 'as_server pg_ctl -D "$data" -m immediate -w stop >/dev/null' EXIT

url="postgres://postgres@/postgres?host=$out&port=$port&sslmode=disable"
"$pgflow" migrate up --database-url "$url" >"$out/migrate.log"
psql() { command psql -X -q -v ON_ERROR_STOP=1 -h "$out" -p "$port" -U postgres -d postgres "$@"; }

psql <<'SQL'
create extension pg_stat_statements;
select pgflow.create_flow('prof_one_step', 3, 1, 60);
select pgflow.add_step('prof_one_step', 'work');
select pgflow.create_flow('prof_chain', 3, 1, 60);
select pgflow.add_step('prof_chain', 'first');
select pgflow.add_step('prof_chain', 'second', array['first']);
select pgflow.add_step('prof_chain', 'third', array['second']);
select pgflow.create_flow('prof_map', 3, 1, 60);
select pgflow.add_step('prof_map', 'each', step_type => 'map');
select pgflow.register_worker('00000000-0000-0000-0000-000000000001', 'prof_one_step', 'prof');
select pgflow.register_worker('00000000-0000-0000-0000-000000000002', 'prof_chain', 'prof');
select pgflow.register_worker('00000000-0000-0000-0000-000000000003', 'prof_map', 'prof');

-- Per-table counts of the current transaction, as one line per table with something written.
create function public.prof_xact() returns table (rel text, ins bigint, upd bigint, hot bigint, del bigint)
language sql as $$
  select schemaname || '.' || relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
    from pg_stat_xact_user_tables
   where n_tup_ins + n_tup_upd + n_tup_del > 0
   order by 1
$$;
create table public.prof_phase (
  scenario text, phase text, tasks integer, rel text, ins bigint, upd bigint, hot bigint, del bigint);
create table public.prof_wal (scenario text, phase text, tasks integer, wal_bytes numeric, cpu_ns numeric);
create table public.prof_plans (done boolean);
insert into public.prof_plans values (false);
SQL

# phase SCENARIO PHASE SQL: run SQL in one transaction (the SQL sets psql variable n to the tasks it handled) and
# record its rows, WAL and the backend's CPU time (from /proc/<pid>/schedstat, nanoseconds on a CPU: the work of
# the statements and the commit, not counting the reading of the counters in between).
phase_sql() {
  local scenario=$1 name=$2 body=$3
  # A session's table counters (pg_stat_xact_*) also hold its earlier transactions' counts until the session
  # publishes them, which it does only when idle outside a transaction: the phase's rows are the difference of
  # two readings inside its transaction. WAL and CPU leave out the readings' own work.
  cat <<SQL
\set scenario '$scenario'
\set phase '$name'
select pg_backend_pid() as pid \gset
begin;
insert into public.prof_phase select :'scenario', :'phase', 0, x.rel, -x.ins, -x.upd, -x.hot, -x.del
  from public.prof_xact() as x where x.rel not like 'public.prof_%';
select pg_current_wal_insert_lsn() as w0 \gset
\set t0 \`awk '{print \$1}' /proc/:pid/schedstat\`
$body
\set t1 \`awk '{print \$1}' /proc/:pid/schedstat\`
select pg_current_wal_insert_lsn() as w1 \gset
insert into public.prof_phase select :'scenario', :'phase', :n, x.* from public.prof_xact() as x
 where x.rel not like 'public.prof_%';
select pg_current_wal_insert_lsn() as w2 \gset
\set t2 \`awk '{print \$1}' /proc/:pid/schedstat\`
commit;
\set t3 \`awk '{print \$1}' /proc/:pid/schedstat\`
insert into public.prof_wal values (:'scenario', :'phase', :n,
  (:'w1'::pg_lsn - :'w0'::pg_lsn) + (pg_current_wal_insert_lsn() - :'w2'::pg_lsn), (:t1 - :t0) + (:t3 - :t2));
SQL
}
phase() { phase_sql "$@" | psql; }

# Plans of one batch of each phase go to the server log (auto_explain, nested statements included).
explain_on="load 'auto_explain'; set auto_explain.log_min_duration = 0; set auto_explain.log_analyze = on;
set auto_explain.log_buffers = on; set auto_explain.log_wal = on; set auto_explain.log_nested_statements = on;
set auto_explain.log_format = text;"
explain_off="set auto_explain.log_min_duration = -1;"

scenario() {
  local name=$1 flow=$2 queue=$2 worker=$3 input=$4 nruns=$5 per_run=$6
  local script="$out/$name.sql"
  psql -c "select pg_stat_statements_reset()" >/dev/null
  # One session for the whole scenario, as a worker's pooled connection: plans are made once, not per batch.
  phase_sql "$name" start "
    select count(*) as n from pgflow.start_flows('$flow',
      array(select '$input'::jsonb from generate_series(1, $nruns))) \gset" >"$script"
  local rounds=$(((nruns * per_run + batch - 1) / batch + 2)) round
  for ((round = 0; round < rounds; round++)); do
    local explain=""
    local at=${EXPLAIN_ROUND:-1}
    if ((round == at)) && [[ ${EXPLAIN:-1} == 1 ]]; then explain=$explain_on; fi
    if ((round == at + 1)); then echo "$explain_off" >>"$script"; fi
    # What a listening worker sends: read and claim in one call, then complete the claimed tasks.
    if [[ $combined == t ]]; then
      phase_sql "$name" claim "$explain
        select count(*) filter (where claimed) as n
          from pgflow.read_and_start_tasks('$flow', '$queue', '$worker', $batch, 30) \gset"
    else
      # A schema before read_and_start_tasks: pgmq.read and start_tasks, accounted as one phase.
      phase_sql "$name" claim "$explain
        select count(*) as n from pgflow.start_tasks('$flow',
          array(select m.msg_id from pgmq.read('$queue', 30, $batch) as m), '$worker', '$queue') \gset"
    fi >>"$script"
    phase_sql "$name" complete "
      with t as (
        select run_id, step_slug, task_index, attempts_count
          from pgflow.step_tasks where last_worker_id = '$worker' and status = 'started'
         order by message_id)
      select count(*) as n from pgflow.complete_tasks(
        array(select run_id from t), array(select step_slug from t), array(select task_index from t),
        array(select '{\"ok\":true}'::jsonb from t), array(select attempts_count from t)) \gset" >>"$script"
  done
  psql -f "$script"
  local left
  left=$(psql -At -c "select count(*) from pgflow.runs where flow_slug = '$flow' and status <> 'completed'")
  if ((left != 0)); then
    echo "profile-hot-path: $left runs of $flow did not complete" >&2
    exit 1
  fi
  psql -At -F $'\t' >"$out/$name.statements.tsv" <<'SQL'
select calls, rows, round(total_exec_time::numeric, 1) as ms, shared_blks_hit + shared_blks_read as blks,
       shared_blks_dirtied as dirtied, wal_records, wal_bytes, regexp_replace(left(query, 160), '\s+', ' ', 'g')
  from pg_stat_statements
 where query not like '%prof_%' and query not like '%pg_stat%' and query not like '%pg_current_wal%'
 order by total_exec_time desc
 limit 40;
SQL
}

# pgflow's own path, for comparison: pgmq.read, then start_tasks of the ids read (two transactions), on a fresh
# batch of one-step runs.
pgflow_path() {
  local name=$1 flow=$2 worker=$3 input=$4 nruns=$5
  psql -c "select count(*) from pgflow.start_flows('$flow', array(select '$input'::jsonb from generate_series(1, $nruns)))" >/dev/null
  psql -At -c "select coalesce(string_agg(m.msg_id::text, ','), '') from pgmq.read('$flow', 30, 1) as m" >/dev/null
  phase "$name" pgmq.read "select count(*) as n from pgmq.read('$flow', 30, $batch) as m \gset"
  local ids
  ids=$(psql -At -c "select string_agg(message_id::text, ',') from pgflow.step_tasks
                      where flow_slug = '$flow' and status = 'queued'")
  phase "$name" start_tasks "select count(*) as n from pgflow.start_tasks('$flow', '{$ids}'::bigint[], '$worker', '$flow') \gset"
}

combined=$(psql -At -c "select to_regprocedure('pgflow.read_and_start_tasks(text,text,uuid,integer,integer)') is not null")
only=${SCENARIOS:-one-step,chain,map}
if [[ ,$only, == *,one-step,* ]]; then
  scenario one-step prof_one_step 00000000-0000-0000-0000-000000000001 '{}' "$runs" 1
fi
if [[ ,$only, == *,chain,* ]]; then
  scenario chain prof_chain 00000000-0000-0000-0000-000000000002 '{}' "$runs" 3
fi
map_input=$(python3 -c 'import json; print(json.dumps(list(range(100))))')
if [[ ,$only, == *,map,* ]]; then
  scenario map prof_map 00000000-0000-0000-0000-000000000003 "$map_input" $((runs / 100)) 100
fi
pgflow_path one-step prof_one_step 00000000-0000-0000-0000-000000000001 '{}' "$((batch + 1))"

psql <<'SQL' | tee "$out/accounting.txt"
\echo rows written per task (start: per run), by table; hot = HOT updates among upd
select p.scenario, p.phase, p.rel,
       round(sum(p.ins)::numeric / w.tasks, 2) as ins, round(sum(p.upd)::numeric / w.tasks, 2) as upd,
       round(sum(p.hot)::numeric / w.tasks, 2) as hot, round(sum(p.del)::numeric / w.tasks, 2) as del
  from public.prof_phase as p
  join (select scenario, phase, sum(tasks) as tasks from public.prof_wal group by 1, 2) as w using (scenario, phase)
 group by p.scenario, p.phase, p.rel, w.tasks
having sum(p.ins) <> 0 or sum(p.upd) <> 0 or sum(p.del) <> 0
 order by 1, 2, 3;
\echo totals per task (start: per run)
select w.scenario, w.phase, w.tasks,
       round((select sum(p.ins + p.upd + p.del) from public.prof_phase as p
               where p.scenario = w.scenario and p.phase = w.phase)::numeric / w.tasks, 2) as rows,
       round(w.wal / w.tasks) as wal_bytes,
       round(w.cpu / w.tasks / 1000) as cpu_us
  from (select scenario, phase, sum(tasks) as tasks, sum(wal_bytes) as wal, sum(cpu_ns) as cpu
          from public.prof_wal group by 1, 2) as w
 order by 1, 2;
SQL
echo "statements: $out/*.statements.tsv; plans: $out/server.log"
