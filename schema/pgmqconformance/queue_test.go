package pgmqconformance_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)

	createQueue(t, ctx, pool, "orders")
	id := sendOne(t, ctx, pool, "orders", `{"k": 1}`)
	createQueue(t, ctx, pool, "orders")
	_, err := pool.Exec(ctx, "select pgmq.create_non_partitioned('orders')")
	require.NoError(t, err)

	queues := listQueues(t, ctx, pool)
	require.Equal(t, []string{"orders"}, queueNames(queues))
	require.False(t, queues[0].IsPartitioned)
	require.False(t, queues[0].IsUnlogged)
	require.False(t, queues[0].CreatedAt.IsZero())

	// The message sent before the second create is still there.
	msgs := readMessages(t, ctx, pool, "orders", 30, 10)
	require.Equal(t, []int64{id}, ids(msgs))
}

func TestQueueNameLength(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)

	name47 := strings.Repeat("a", 47)
	name48 := strings.Repeat("b", 48)

	createQueue(t, ctx, pool, name47)
	require.True(t, relationExists(t, ctx, pool, "q_"+name47))
	require.True(t, relationExists(t, ctx, pool, "a_"+name47))
	sendOne(t, ctx, pool, name47, `{}`)
	require.Len(t, readMessages(t, ctx, pool, name47, 30, 1), 1)

	for _, fn := range []string{"create", "create_non_partitioned", "create_unlogged", "validate_queue_name"} {
		_, err := pool.Exec(ctx, "select pgmq."+fn+"($1)", name48)
		requirePgError(t, err, "P0001", msgTooLong)
	}
	_, err := pool.Exec(ctx, "select pgmq.validate_queue_name($1)", name47)
	require.NoError(t, err)

	require.Equal(t, []string{name47}, queueNames(listQueues(t, ctx, pool)))
	require.False(t, relationExists(t, ctx, pool, "q_"+name48))
	require.False(t, relationExists(t, ctx, pool, "a_"+name48))
}

func TestFormatTableName(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)

	for _, c := range []struct{ queue, prefix, want string }{
		{"cat", "q", "q_cat"},
		{"MyQueue", "q", "q_myqueue"},
		{"cat-dog", "a", "a_cat-dog"},
		{"Mixed_Case-1", "a", "a_mixed_case-1"},
	} {
		var got string
		require.NoError(t, pool.QueryRow(ctx, "select pgmq.format_table_name($1, $2)", c.queue, c.prefix).Scan(&got))
		require.Equal(t, c.want, got, "format_table_name(%q, %q)", c.queue, c.prefix)
	}
}

func TestBadCharactersAreRejected(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "fine")

	for _, bad := range []string{"dollar$sign", "semi;colon", "double--dash", "single'quote", "x; drop table pgmq.meta"} {
		_, err := pool.Exec(ctx, "select pgmq.format_table_name($1, 'q')", bad)
		requirePgError(t, err, "P0001", msgInvalidChars)

		_, err = pool.Exec(ctx, "select pgmq.create($1)", bad)
		requirePgError(t, err, "P0001", msgInvalidChars)

		_, err = pool.Exec(ctx, "select pgmq.send($1, '{}'::jsonb)", bad)
		requirePgError(t, err, "P0001", msgInvalidChars)

		_, err = pool.Exec(ctx, "select * from pgmq.read($1, 30, 1)", bad)
		requirePgError(t, err, "P0001", msgInvalidChars)

		_, err = pool.Exec(ctx, "select pgmq.drop_queue($1)", bad)
		requirePgError(t, err, "P0001", msgInvalidChars)
	}
	// A bad name that is also too long reports the bad characters (they are checked first).
	_, err := pool.Exec(ctx, "select pgmq.create($1)", strings.Repeat("x", 50)+"$")
	requirePgError(t, err, "P0001", msgInvalidChars)

	require.Equal(t, []string{"fine"}, queueNames(listQueues(t, ctx, pool)))

	// A single hyphen, spaces and dots are fine.
	for _, ok := range []string{"with-hyphen", "with space", "with.dot"} {
		createQueue(t, ctx, pool, ok)
		sendOne(t, ctx, pool, ok, `{"ok": true}`)
		require.Len(t, readMessages(t, ctx, pool, ok, 30, 5), 1, ok)
	}
}

func TestMixedCaseSpellingsShareTablesButNotMetaRows(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)

	createQueue(t, ctx, pool, "MixedCase")
	createQueue(t, ctx, pool, "mixedcase")

	require.Equal(t, []string{"MixedCase", "mixedcase"}, queueNames(listQueues(t, ctx, pool)))
	require.True(t, relationExists(t, ctx, pool, "q_mixedcase"))
	require.True(t, relationExists(t, ctx, pool, "a_mixedcase"))
	require.False(t, relationExists(t, ctx, pool, "q_MixedCase"))
	require.False(t, relationExists(t, ctx, pool, "a_MixedCase"))

	// Both spellings address the same physical queue.
	id := sendOne(t, ctx, pool, "MixedCase", `{"from": "upper"}`)
	msgs := readMessages(t, ctx, pool, "mixedcase", 30, 10)
	require.Equal(t, []int64{id}, ids(msgs))
	var archivedOK bool
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.archive('MIXEDCASE', $1::bigint)", id).Scan(&archivedOK))
	require.True(t, archivedOK)
	require.Len(t, archiveRows(t, ctx, pool, "mixedcase"), 1)
}

func TestDropQueueWithOtherSpelling(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)

	// One meta row: dropping with another spelling drops the tables but leaves the meta row of the original spelling.
	createQueue(t, ctx, pool, "DropMe")
	sendOne(t, ctx, pool, "DropMe", `{}`)
	var dropped bool
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.drop_queue('dropme')").Scan(&dropped))
	require.True(t, dropped)
	require.False(t, relationExists(t, ctx, pool, "q_dropme"))
	require.False(t, relationExists(t, ctx, pool, "a_dropme"))
	require.Equal(t, []string{"DropMe"}, queueNames(listQueues(t, ctx, pool)))

	// Two meta rows: dropping with one spelling removes the tables and that spelling's row only.
	createQueue(t, ctx, pool, "Both")
	createQueue(t, ctx, pool, "both")
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.drop_queue('Both')").Scan(&dropped))
	require.True(t, dropped)
	require.False(t, relationExists(t, ctx, pool, "q_both"))
	require.Equal(t, []string{"DropMe", "both"}, queueNames(listQueues(t, ctx, pool)))

	// Creating again restores the tables; the remaining meta row is kept, not duplicated.
	createQueue(t, ctx, pool, "both")
	require.True(t, relationExists(t, ctx, pool, "q_both"))
	require.Equal(t, []string{"DropMe", "both"}, queueNames(listQueues(t, ctx, pool)))
}

func TestDropQueue(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)

	createQueue(t, ctx, pool, "gone")
	createQueue(t, ctx, pool, "kept")
	sendOne(t, ctx, pool, "gone", `{}`)
	sendOne(t, ctx, pool, "kept", `{}`)

	var dropped bool
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.drop_queue('gone')").Scan(&dropped))
	require.True(t, dropped)
	require.False(t, relationExists(t, ctx, pool, "q_gone"))
	require.False(t, relationExists(t, ctx, pool, "a_gone"))
	require.Equal(t, []string{"kept"}, queueNames(listQueues(t, ctx, pool)))
	require.Len(t, readMessages(t, ctx, pool, "kept", 30, 10), 1)

	_, err := pool.Exec(ctx, "select pgmq.send('gone', '{}'::jsonb)")
	requirePgError(t, err, "42P01", `relation "pgmq.q_gone" does not exist`)

	// The same name can be created again and starts empty.
	createQueue(t, ctx, pool, "gone")
	require.Empty(t, readMessages(t, ctx, pool, "gone", 30, 10))
}

func TestDropQueueDeprecatedTwoArgumentForm(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)

	createQueue(t, ctx, pool, "old_style")
	var dropped bool
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.drop_queue('old_style', false)").Scan(&dropped))
	require.True(t, dropped)
	require.False(t, relationExists(t, ctx, pool, "q_old_style"))
	require.Empty(t, listQueues(t, ctx, pool))
}

// PGMQ 1.5 (as an extension) raises for a queue that does not exist; drop_queue does not return false.
func TestDropUnknownQueueRaises(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "other")

	_, err := pool.Exec(ctx, "select pgmq.drop_queue('no_such_queue')")
	requirePgError(t, err, "42P01", `relation "pgmq.q_no_such_queue" does not exist`)

	_, err = pool.Exec(ctx, "select pgmq.drop_queue('No_Such_Queue')")
	requirePgError(t, err, "42P01", `relation "pgmq.q_no_such_queue" does not exist`)

	require.Equal(t, []string{"other"}, queueNames(listQueues(t, ctx, pool)))
}

func TestListQueuesAndUnlogged(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	require.Empty(t, listQueues(t, ctx, pool))

	createQueue(t, ctx, pool, "logged")
	_, err := pool.Exec(ctx, "select pgmq.create_unlogged('fast')")
	require.NoError(t, err)

	queues := listQueues(t, ctx, pool)
	require.Equal(t, []string{"fast", "logged"}, queueNames(queues))
	require.True(t, queues[0].IsUnlogged)
	require.False(t, queues[0].IsPartitioned)
	require.False(t, queues[1].IsUnlogged)
	require.False(t, queues[1].IsPartitioned)

	persistence := func(rel string) string {
		var p string
		require.NoError(t, pool.QueryRow(ctx,
			"select c.relpersistence::text from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'pgmq' and c.relname = $1",
			rel).Scan(&p))
		return p
	}
	require.Equal(t, "u", persistence("q_fast"))
	require.Equal(t, "p", persistence("a_fast"), "the archive of an unlogged queue is logged")
	require.Equal(t, "p", persistence("q_logged"))

	sendOne(t, ctx, pool, "fast", `{"x": 1}`)
	require.Len(t, readMessages(t, ctx, pool, "fast", 30, 1), 1)
}

func TestCreatePartitionedRaisesWithoutPartman(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)

	// Neither the bundled layer nor the extension without pg_partman can make partitioned queues.
	_, err := pool.Exec(ctx, "select pgmq.create_partitioned('parts')")
	require.Error(t, err)
	require.Empty(t, listQueues(t, ctx, pool))
	require.False(t, relationExists(t, ctx, pool, "q_parts"))
}
