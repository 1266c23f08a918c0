package pgmqconformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

func TestArchiveOne(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `select pgmq.send('q', '{"k": "v"}'::jsonb, '{"h": 1}'::jsonb)`).Scan(&id))
	read := readMessages(t, ctx, pool, "q", 3600, 1)
	require.Len(t, read, 1)
	other := sendOne(t, ctx, pool, "q", `{}`)

	var ok bool
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.archive('q', $1::bigint)", id).Scan(&ok))
	require.True(t, ok)

	arch := archiveRows(t, ctx, pool, "q")
	require.Len(t, arch, 1)
	require.Equal(t, id, arch[0].MsgID)
	require.EqualValues(t, 1, arch[0].ReadCt)
	require.True(t, read[0].EnqueuedAt.Equal(arch[0].EnqueuedAt))
	require.True(t, read[0].VT.Equal(arch[0].VT), "the archive keeps the message's vt")
	require.False(t, arch[0].ArchivedAt.Before(arch[0].EnqueuedAt))
	require.Equal(t, map[string]any{"k": "v"}, arch[0].Message)
	require.Equal(t, map[string]any{"h": float64(1)}, arch[0].Headers)

	require.Equal(t, []int64{other}, ids(readMessages(t, ctx, pool, "q", 3600, 10)), "the archived message left the queue")

	// Unknown id, or one already archived: false, not an error.
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.archive('q', $1::bigint)", id).Scan(&ok))
	require.False(t, ok)
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.archive('q', 999999::bigint)").Scan(&ok))
	require.False(t, ok)
	require.Len(t, archiveRows(t, ctx, pool, "q"), 1)
}

func TestArchiveMany(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	sent := sendMany(t, ctx, pool, "q", 4)

	got := queryIDs(t, ctx, pool, "select * from pgmq.archive('q', $1::bigint[])", []int64{sent[0], sent[2], 999999})
	require.ElementsMatch(t, []int64{sent[0], sent[2]}, got, "unknown ids are left out, not an error")

	arch := archiveRows(t, ctx, pool, "q")
	require.Len(t, arch, 2)
	require.Equal(t, sent[0], arch[0].MsgID)
	require.Equal(t, sent[2], arch[1].MsgID)
	require.Equal(t, []int64{sent[1], sent[3]}, sortedIDs(readMessages(t, ctx, pool, "q", 3600, 10)))

	require.Empty(t, queryIDs(t, ctx, pool, "select * from pgmq.archive('q', $1::bigint[])", []int64{sent[0], 424242}))
	require.Empty(t, queryIDs(t, ctx, pool, "select * from pgmq.archive('q', array[]::bigint[])"))
	require.Len(t, archiveRows(t, ctx, pool, "q"), 2)
}

func TestDeleteOne(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	sent := sendMany(t, ctx, pool, "q", 2)

	var ok bool
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.delete('q', $1::bigint)", sent[0]).Scan(&ok))
	require.True(t, ok)
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.delete('q', $1::bigint)", sent[0]).Scan(&ok))
	require.False(t, ok, "deleting twice gives false")
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.delete('q', 999999::bigint)").Scan(&ok))
	require.False(t, ok)

	require.Equal(t, sent[1:], ids(readMessages(t, ctx, pool, "q", 3600, 10)))
	require.Empty(t, archiveRows(t, ctx, pool, "q"), "delete does not archive")
}

func TestDeleteMany(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	sent := sendMany(t, ctx, pool, "q", 4)

	got := queryIDs(t, ctx, pool, "select * from pgmq.delete('q', $1::bigint[])", []int64{sent[1], sent[3], 999999})
	require.ElementsMatch(t, []int64{sent[1], sent[3]}, got)
	require.Equal(t, []int64{sent[0], sent[2]}, sortedIDs(readMessages(t, ctx, pool, "q", 3600, 10)))
	require.Empty(t, queryIDs(t, ctx, pool, "select * from pgmq.delete('q', $1::bigint[])", []int64{sent[1]}))
	require.Empty(t, archiveRows(t, ctx, pool, "q"))
}

func TestPurgeQueue(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	sent := sendMany(t, ctx, pool, "q", 5)
	var ok bool
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.archive('q', $1::bigint)", sent[0]).Scan(&ok))
	require.True(t, ok)

	var purged int64
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.purge_queue('q')").Scan(&purged))
	require.EqualValues(t, 4, purged)
	require.EqualValues(t, 0, countRows(t, ctx, pool, "q_q"))
	require.Len(t, archiveRows(t, ctx, pool, "q"), 1, "purge leaves the archive alone")

	require.NoError(t, pool.QueryRow(ctx, "select pgmq.purge_queue('q')").Scan(&purged))
	require.EqualValues(t, 0, purged)

	// Ids keep counting after a purge.
	next := sendOne(t, ctx, pool, "q", `{}`)
	require.Greater(t, next, sent[len(sent)-1])
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "Metered")

	m := metrics(t, ctx, pool, "Metered")
	require.Equal(t, "Metered", m.QueueName, "metrics echoes the name as given")
	require.EqualValues(t, 0, m.QueueLength)
	require.EqualValues(t, 0, m.QueueVisibleLength)
	require.EqualValues(t, 0, m.TotalMessages)
	require.Nil(t, m.NewestMsgAgeSec)
	require.Nil(t, m.OldestMsgAgeSec)
	require.False(t, m.ScrapeTime.IsZero())

	sent := sendMany(t, ctx, pool, "metered", 3)
	_, err := pool.Exec(ctx, "select pgmq.send('metered', '{}'::jsonb, 3600)")
	require.NoError(t, err)
	var ok bool
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.archive('metered', $1::bigint)", sent[0]).Scan(&ok))
	require.True(t, ok)
	require.Len(t, readMessages(t, ctx, pool, "metered", 3600, 1), 1)

	m = metrics(t, ctx, pool, "metered")
	require.Equal(t, "metered", m.QueueName)
	require.EqualValues(t, 3, m.QueueLength, "4 sent, 1 archived")
	require.EqualValues(t, 1, m.QueueVisibleLength, "1 read with vt 3600, 1 sent with delay 3600")
	require.EqualValues(t, 4, m.TotalMessages, "every message ever sent")
	require.NotNil(t, m.NewestMsgAgeSec)
	require.NotNil(t, m.OldestMsgAgeSec)
	require.GreaterOrEqual(t, *m.OldestMsgAgeSec, *m.NewestMsgAgeSec)
	require.GreaterOrEqual(t, *m.NewestMsgAgeSec, int32(0))

	var purged int64
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.purge_queue('metered')").Scan(&purged))
	m = metrics(t, ctx, pool, "metered")
	require.EqualValues(t, 0, m.QueueLength)
	require.EqualValues(t, 4, m.TotalMessages, "purge does not reset the total")

	_, err = pool.Exec(ctx, "select * from pgmq.metrics('no_such_queue')")
	requirePgError(t, err, "42P01", `relation "pgmq.q_no_such_queue" does not exist`)
}

func TestMetricsAll(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	rows, err := pool.Query(ctx, "select * from pgmq.metrics_all()")
	require.NoError(t, err)
	rows.Close()
	require.NoError(t, rows.Err())

	createQueue(t, ctx, pool, "one")
	createQueue(t, ctx, pool, "two")
	createQueue(t, ctx, pool, "Two")
	sendMany(t, ctx, pool, "one", 2)
	sendMany(t, ctx, pool, "two", 1)

	all := metricsAll(t, ctx, pool)
	require.Len(t, all, 3, "one result per meta row")
	require.EqualValues(t, 2, all["one"].QueueLength)
	require.EqualValues(t, 1, all["two"].QueueLength)
	require.EqualValues(t, 1, all["Two"].QueueLength, "both spellings see the shared table")
	require.EqualValues(t, 2, all["one"].TotalMessages)
	require.EqualValues(t, 1, all["two"].TotalMessages)
}

func metrics(t *testing.T, ctx context.Context, pool *pgxpool.Pool, queue string) metricsRow {
	t.Helper()
	var m metricsRow
	require.NoError(t, pool.QueryRow(ctx, "select * from pgmq.metrics($1)", queue).Scan(
		&m.QueueName, &m.QueueLength, &m.NewestMsgAgeSec, &m.OldestMsgAgeSec, &m.TotalMessages, &m.ScrapeTime,
		&m.QueueVisibleLength))
	return m
}

func metricsAll(t *testing.T, ctx context.Context, pool *pgxpool.Pool) map[string]metricsRow {
	t.Helper()
	rows, err := pool.Query(ctx, "select * from pgmq.metrics_all()")
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]metricsRow{}
	for rows.Next() {
		var m metricsRow
		require.NoError(t, rows.Scan(&m.QueueName, &m.QueueLength, &m.NewestMsgAgeSec, &m.OldestMsgAgeSec,
			&m.TotalMessages, &m.ScrapeTime, &m.QueueVisibleLength))
		require.NotContains(t, out, m.QueueName)
		require.WithinDuration(t, time.Now(), m.ScrapeTime, time.Hour)
		out[m.QueueName] = m
	}
	require.NoError(t, rows.Err())
	return out
}

// detach_archive keeps the archive table and its rows; the queue keeps working. (With the extension it also takes
// the table out of the extension, after which drop_queue of that queue fails; the bundled layer has no extension
// membership, so that part is not pinned here.)
func TestDetachArchiveKeepsTheArchive(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	id := sendOne(t, ctx, pool, "q", `{}`)
	var ok bool
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.archive('q', $1::bigint)", id).Scan(&ok))
	require.True(t, ok)

	_, err := pool.Exec(ctx, "select pgmq.detach_archive('q')")
	require.NoError(t, err)
	require.Len(t, archiveRows(t, ctx, pool, "q"), 1)
	next := sendOne(t, ctx, pool, "q", `{}`)
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.archive('q', $1::bigint)", next).Scan(&ok))
	require.True(t, ok)
	require.Len(t, archiveRows(t, ctx, pool, "q"), 2)

	_, err = pool.Exec(ctx, "select pgmq.detach_archive('no_such_queue')")
	requirePgError(t, err, "42P01", `relation "pgmq.a_no_such_queue" does not exist`)
}
