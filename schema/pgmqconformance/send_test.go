package pgmqconformance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSendReturnsIncreasingIDs(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")

	got := sendMany(t, ctx, pool, "q", 3)
	require.Equal(t, []int64{1, 2, 3}, got)

	msgs := readMessages(t, ctx, pool, "q", 30, 10)
	require.Equal(t, []int64{1, 2, 3}, sortedIDs(msgs))
	for _, m := range msgs {
		require.Nil(t, m.Headers, "send without headers stores null headers")
		require.EqualValues(t, m.MsgID-1, m.Message["n"])
		require.False(t, m.EnqueuedAt.IsZero())
	}
}

func TestSendToUnknownQueueRaises(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)

	_, err := pool.Exec(ctx, "select pgmq.send('missing', '{}'::jsonb)")
	requirePgError(t, err, "42P01", `relation "pgmq.q_missing" does not exist`)
	_, err = pool.Exec(ctx, "select pgmq.send_batch('missing', array['{}']::jsonb[])")
	requirePgError(t, err, "42P01", `relation "pgmq.q_missing" does not exist`)
	_, err = pool.Exec(ctx, "select * from pgmq.read('missing', 30, 1)")
	requirePgError(t, err, "42P01", `relation "pgmq.q_missing" does not exist`)
}

func TestSendWithIntegerDelay(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")

	var hidden int64
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.send('q', '{\"d\": 3600}'::jsonb, 3600)").Scan(&hidden))
	var enqueued, vt time.Time
	require.NoError(t, pool.QueryRow(ctx, "select enqueued_at, vt from pgmq.q_q where msg_id = $1", hidden).Scan(&enqueued, &vt))
	require.True(t, !vt.Before(enqueued.Add(3600*time.Second)), "vt %s must be >= enqueued_at %s + 3600 s", vt, enqueued)
	require.True(t, vt.Before(enqueued.Add(3660*time.Second)), "vt %s must be about enqueued_at %s + 3600 s", vt, enqueued)
	require.Empty(t, readMessages(t, ctx, pool, "q", 30, 10), "a delayed message is invisible")

	// A short delay: invisible now, readable once it has passed.
	var soon int64
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.send('q', '{\"d\": 1}'::jsonb, 1)").Scan(&soon))
	require.Greater(t, soon, hidden)
	deadline := time.Now().Add(30 * time.Second)
	var got []message
	for time.Now().Before(deadline) {
		got = readMessages(t, ctx, pool, "q", 30, 10)
		if len(got) > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, []int64{soon}, ids(got), "the 1 s message becomes visible, the 3600 s one does not")

	// Zero delay is immediately visible.
	var now int64
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.send('q', '{}'::jsonb, 0)").Scan(&now))
	require.Equal(t, []int64{now}, ids(readMessages(t, ctx, pool, "q", 30, 10)))
}

func TestSendWithTimestampDelay(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")

	at := time.Date(2999, 1, 2, 3, 4, 5, 0, time.UTC)
	var future int64
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.send('q', '{}'::jsonb, $1::timestamptz)", at).Scan(&future))
	var vt time.Time
	require.NoError(t, pool.QueryRow(ctx, "select vt from pgmq.q_q where msg_id = $1", future).Scan(&vt))
	require.True(t, at.Equal(vt), "vt %s must equal the given time %s", vt, at)

	var past int64
	require.NoError(t, pool.QueryRow(ctx, "select pgmq.send('q', '{}'::jsonb, now() - interval '1 hour')").Scan(&past))
	require.Equal(t, []int64{past}, ids(readMessages(t, ctx, pool, "q", 30, 10)), "a past vt is visible at once")
}

func TestSendWithHeaders(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")

	var withHeaders, withHeadersDelayed, withHeadersAt int64
	require.NoError(t, pool.QueryRow(ctx,
		"select pgmq.send('q', '{\"body\": 1}'::jsonb, '{\"trace\": \"abc\"}'::jsonb)").Scan(&withHeaders))
	require.NoError(t, pool.QueryRow(ctx,
		"select pgmq.send('q', '{\"body\": 2}'::jsonb, '{\"trace\": \"def\"}'::jsonb, 0)").Scan(&withHeadersDelayed))
	require.NoError(t, pool.QueryRow(ctx,
		"select pgmq.send('q', '{\"body\": 3}'::jsonb, '{\"trace\": \"ghi\"}'::jsonb, now() + interval '1 hour')").Scan(&withHeadersAt))

	msgs := readMessages(t, ctx, pool, "q", 30, 10)
	require.Equal(t, []int64{withHeaders, withHeadersDelayed}, sortedIDs(msgs))
	byID := map[int64]message{}
	for _, m := range msgs {
		byID[m.MsgID] = m
	}
	require.Equal(t, map[string]any{"trace": "abc"}, byID[withHeaders].Headers)
	require.Equal(t, map[string]any{"body": float64(1)}, byID[withHeaders].Message)
	require.Equal(t, map[string]any{"trace": "def"}, byID[withHeadersDelayed].Headers)

	var headers map[string]any
	require.NoError(t, pool.QueryRow(ctx, "select headers from pgmq.q_q where msg_id = $1", withHeadersAt).Scan(&headers))
	require.Equal(t, map[string]any{"trace": "ghi"}, headers)
}

func TestSendBatchReturnsIDsInOrder(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	sendOne(t, ctx, pool, "q", `{"first": true}`)

	got := queryIDs(t, ctx, pool,
		`select * from pgmq.send_batch('q', array['{"i": 0}', '{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[])`)
	require.Equal(t, []int64{2, 3, 4, 5}, got)

	rows, err := pool.Query(ctx, "select msg_id, (message->>'i')::int, vt = (select vt from pgmq.q_q where msg_id = 2) from pgmq.q_q where msg_id >= 2 order by msg_id")
	require.NoError(t, err)
	defer rows.Close()
	i := 0
	for rows.Next() {
		var id int64
		var n int
		var sameVT bool
		require.NoError(t, rows.Scan(&id, &n, &sameVT))
		require.Equal(t, got[i], id)
		require.Equal(t, i, n, "message %d of the batch got id %d", n, id)
		require.True(t, sameVT, "a batch shares one vt")
		i++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, 4, i)

	require.Empty(t, queryIDs(t, ctx, pool, "select * from pgmq.send_batch('q', array[]::jsonb[])"))
}

func TestSendBatchDelaysAndHeaders(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")

	delayedInt := queryIDs(t, ctx, pool, `select * from pgmq.send_batch('q', array['{"a": 1}', '{"a": 2}']::jsonb[], 3600)`)
	delayedAt := queryIDs(t, ctx, pool,
		`select * from pgmq.send_batch('q', array['{"b": 1}']::jsonb[], '2999-01-01 00:00:00+00'::timestamptz)`)
	require.Len(t, delayedInt, 2)
	require.Len(t, delayedAt, 1)
	require.Empty(t, readMessages(t, ctx, pool, "q", 30, 10))

	// headers[i] goes with msgs[i]; a shorter headers array leaves the rest null.
	withHeaders := queryIDs(t, ctx, pool,
		`select * from pgmq.send_batch('q', array['{"c": 1}', '{"c": 2}', '{"c": 3}']::jsonb[], array['{"h": 1}', '{"h": 2}']::jsonb[])`)
	require.Len(t, withHeaders, 3)
	headersDelayed := queryIDs(t, ctx, pool,
		`select * from pgmq.send_batch('q', array['{"d": 1}']::jsonb[], array['{"h": 9}']::jsonb[], 0)`)
	headersAt := queryIDs(t, ctx, pool,
		`select * from pgmq.send_batch('q', array['{"e": 1}']::jsonb[], array['{"h": 10}']::jsonb[], now() - interval '1 second')`)

	msgs := readMessages(t, ctx, pool, "q", 30, 10)
	want := append(append(append([]int64{}, withHeaders...), headersDelayed...), headersAt...)
	require.Equal(t, want, sortedIDs(msgs))
	byID := map[int64]message{}
	for _, m := range msgs {
		byID[m.MsgID] = m
	}
	require.Equal(t, map[string]any{"h": float64(1)}, byID[withHeaders[0]].Headers)
	require.Equal(t, map[string]any{"c": float64(1)}, byID[withHeaders[0]].Message)
	require.Equal(t, map[string]any{"h": float64(2)}, byID[withHeaders[1]].Headers)
	require.Nil(t, byID[withHeaders[2]].Headers)
	require.Equal(t, map[string]any{"c": float64(3)}, byID[withHeaders[2]].Message)
	require.Equal(t, map[string]any{"h": float64(9)}, byID[headersDelayed[0]].Headers)
	require.Equal(t, map[string]any{"h": float64(10)}, byID[headersAt[0]].Headers)
}
