package pgmqconformance_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// column describes one column as "name type [not null] [default …] [identity]".
func columns(t *testing.T, ctx context.Context, pool *pgxpool.Pool, relation string) []string {
	t.Helper()
	rows, err := pool.Query(ctx, `
select a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || case when a.attnotnull then ' not null' else '' end
       || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
       || case a.attidentity when 'a' then ' identity always' when 'd' then ' identity by default' else '' end
from pg_attribute a
left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
where a.attrelid = $1::regclass and a.attnum > 0 and not a.attisdropped
order by a.attnum`, relation)
	require.NoError(t, err, relation)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err, relation)
	return out
}

// indexes lists "indexdef" of every index on the relation, sorted by name.
func indexes(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema, table string) []string {
	t.Helper()
	rows, err := pool.Query(ctx,
		"select indexdef from pg_indexes where schemaname = $1 and tablename = $2 order by indexname", schema, table)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func TestPhysicalLayout(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)

	require.Equal(t, []string{
		"queue_name character varying not null",
		"is_partitioned boolean not null",
		"is_unlogged boolean not null",
		"created_at timestamp with time zone not null default now()",
	}, columns(t, ctx, pool, "pgmq.meta"))

	createQueue(t, ctx, pool, "Layout_Q")
	require.Equal(t, []string{
		"msg_id bigint not null identity always",
		"read_ct integer not null default 0",
		"enqueued_at timestamp with time zone not null default now()",
		"vt timestamp with time zone not null",
		"message jsonb",
		"headers jsonb",
	}, columns(t, ctx, pool, "pgmq.q_layout_q"))
	require.Equal(t, []string{
		"msg_id bigint not null",
		"read_ct integer not null default 0",
		"enqueued_at timestamp with time zone not null default now()",
		"archived_at timestamp with time zone not null default now()",
		"vt timestamp with time zone not null",
		"message jsonb",
		"headers jsonb",
	}, columns(t, ctx, pool, "pgmq.a_layout_q"))

	require.Equal(t, []string{
		"CREATE UNIQUE INDEX q_layout_q_pkey ON pgmq.q_layout_q USING btree (msg_id)",
		"CREATE INDEX q_layout_q_vt_idx ON pgmq.q_layout_q USING btree (vt)",
	}, indexes(t, ctx, pool, "pgmq", "q_layout_q"))
	require.Equal(t, []string{
		"CREATE UNIQUE INDEX a_layout_q_pkey ON pgmq.a_layout_q USING btree (msg_id)",
		`CREATE INDEX "archived_at_idx_Layout_Q" ON pgmq.a_layout_q USING btree (archived_at)`,
	}, indexes(t, ctx, pool, "pgmq", "a_layout_q"))

	// The identity sequence is named after the table, as metrics and pgflow's direct table access expect.
	var seq string
	require.NoError(t, pool.QueryRow(ctx, "select pg_get_serial_sequence('pgmq.q_layout_q', 'msg_id')").Scan(&seq))
	require.Equal(t, "pgmq.q_layout_q_msg_id_seq", seq)

	// Message ids are generated; callers cannot supply their own.
	_, err := pool.Exec(ctx, "insert into pgmq.q_layout_q (msg_id, vt, message) values (1, now(), '{}')")
	require.Error(t, err)
}

func TestCompositeTypes(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)

	require.Equal(t, []string{
		"msg_id bigint", "read_ct integer", "enqueued_at timestamp with time zone", "vt timestamp with time zone",
		"message jsonb", "headers jsonb",
	}, columns(t, ctx, pool, "pgmq.message_record"))
	require.Equal(t, []string{
		"queue_name character varying", "is_partitioned boolean", "is_unlogged boolean",
		"created_at timestamp with time zone",
	}, columns(t, ctx, pool, "pgmq.queue_record"))
	require.Equal(t, []string{
		"queue_name text", "queue_length bigint", "newest_msg_age_sec integer", "oldest_msg_age_sec integer",
		"total_messages bigint", "scrape_time timestamp with time zone", "queue_visible_length bigint",
	}, columns(t, ctx, pool, "pgmq.metrics_result"))
}

// TestPublicFunctionSignatures pins every public function of PGMQ 1.5 (names not starting with "_"): argument names,
// types, defaults and result types. Callers use named arguments, so names matter as much as types.
func TestPublicFunctionSignatures(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)

	rows, err := pool.Query(ctx, `
select p.proname || '(' || pg_get_function_arguments(p.oid) || ') returns ' || pg_get_function_result(p.oid)
from pg_proc p
join pg_namespace n on n.oid = p.pronamespace
where n.nspname = 'pgmq' and p.proname not like '\_%'
order by 1`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	slices.Sort(got) // byte order, independent of the database's collation

	want := []string{
		"archive(queue_name text, msg_id bigint) returns boolean",
		"archive(queue_name text, msg_ids bigint[]) returns SETOF bigint",
		"convert_archive_partitioned(table_name text, partition_interval text DEFAULT '10000'::text, retention_interval text DEFAULT '100000'::text, leading_partition integer DEFAULT 10) returns void",
		"create(queue_name text) returns void",
		"create_non_partitioned(queue_name text) returns void",
		"create_partitioned(queue_name text, partition_interval text DEFAULT '10000'::text, retention_interval text DEFAULT '100000'::text) returns void",
		"create_unlogged(queue_name text) returns void",
		"delete(queue_name text, msg_id bigint) returns boolean",
		"delete(queue_name text, msg_ids bigint[]) returns SETOF bigint",
		"detach_archive(queue_name text) returns void",
		"drop_queue(queue_name text) returns boolean",
		"drop_queue(queue_name text, partitioned boolean) returns boolean",
		"format_table_name(queue_name text, prefix text) returns text",
		"list_queues() returns SETOF pgmq.queue_record",
		"metrics(queue_name text) returns pgmq.metrics_result",
		"metrics_all() returns SETOF pgmq.metrics_result",
		"pop(queue_name text) returns SETOF pgmq.message_record",
		"purge_queue(queue_name text) returns bigint",
		"read(queue_name text, vt integer, qty integer, conditional jsonb DEFAULT '{}'::jsonb) returns SETOF pgmq.message_record",
		"read_with_poll(queue_name text, vt integer, qty integer, max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100, conditional jsonb DEFAULT '{}'::jsonb) returns SETOF pgmq.message_record",
		"send(queue_name text, msg jsonb) returns SETOF bigint",
		"send(queue_name text, msg jsonb, delay integer) returns SETOF bigint",
		"send(queue_name text, msg jsonb, delay timestamp with time zone) returns SETOF bigint",
		"send(queue_name text, msg jsonb, headers jsonb) returns SETOF bigint",
		"send(queue_name text, msg jsonb, headers jsonb, delay integer) returns SETOF bigint",
		"send(queue_name text, msg jsonb, headers jsonb, delay timestamp with time zone) returns SETOF bigint",
		"send_batch(queue_name text, msgs jsonb[]) returns SETOF bigint",
		"send_batch(queue_name text, msgs jsonb[], delay integer) returns SETOF bigint",
		"send_batch(queue_name text, msgs jsonb[], delay timestamp with time zone) returns SETOF bigint",
		"send_batch(queue_name text, msgs jsonb[], headers jsonb[]) returns SETOF bigint",
		"send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay integer) returns SETOF bigint",
		"send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay timestamp with time zone) returns SETOF bigint",
		"set_vt(queue_name text, msg_id bigint, vt integer) returns SETOF pgmq.message_record",
		"validate_queue_name(queue_name text) returns void",
	}
	slices.Sort(want)
	require.Equal(t, want, got, "public pgmq functions:\n%s", strings.Join(got, "\n"))
}
