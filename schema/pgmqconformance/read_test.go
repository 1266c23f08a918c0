package pgmqconformance_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReadOrderingReadCtAndVisibility(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	sent := sendMany(t, ctx, pool, "q", 5)

	first := readMessages(t, ctx, pool, "q", 3600, 2)
	require.Equal(t, sent[:2], sortedIDs(first), "read takes the oldest messages first")
	for _, m := range first {
		require.EqualValues(t, 1, m.ReadCt)
		require.True(t, !m.VT.Before(m.EnqueuedAt.Add(3600*time.Second)), "vt %s is about now + 3600 s", m.VT)
		require.True(t, m.VT.Before(m.EnqueuedAt.Add(3660*time.Second)), "vt %s is about now + 3600 s", m.VT)
	}

	rest := readMessages(t, ctx, pool, "q", 3600, 10)
	require.Equal(t, sent[2:], sortedIDs(rest), "messages being processed are invisible")
	require.Empty(t, readMessages(t, ctx, pool, "q", 3600, 10))

	// vt = 0 hands a message out and leaves it visible; every read counts.
	createQueue(t, ctx, pool, "again")
	id := sendOne(t, ctx, pool, "again", `{}`)
	for want := 1; want <= 3; want++ {
		got := readMessages(t, ctx, pool, "again", 0, 1)
		require.Len(t, got, 1)
		require.Equal(t, id, got[0].MsgID)
		require.EqualValues(t, want, got[0].ReadCt)
	}

	// qty 0 reads nothing.
	require.Empty(t, readMessages(t, ctx, pool, "again", 0, 0))
}

func TestConcurrentReadersNeverShareAMessage(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	sent := sendMany(t, ctx, pool, "q", 3)

	tx1, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx1.Rollback(ctx) }()
	got1 := queryMessages(t, ctx, tx1, "select * from pgmq.read('q', 0, 1)")
	require.Equal(t, sent[:1], ids(got1))

	// tx1 has not committed: its message is locked and skipped, even though its old vt says visible.
	tx2, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx2.Rollback(ctx) }()
	got2 := queryMessages(t, ctx, tx2, "select * from pgmq.read('q', 30, 10)")
	require.Equal(t, sent[1:], sortedIDs(got2))
	require.NoError(t, tx2.Commit(ctx))
	require.NoError(t, tx1.Commit(ctx))

	// tx1 read with vt 0, so its message is visible again now.
	got3 := readMessages(t, ctx, pool, "q", 30, 10)
	require.Equal(t, sent[:1], ids(got3))
	require.EqualValues(t, 2, got3[0].ReadCt)
}

func TestConditionalRead(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	a := sendOne(t, ctx, pool, "q", `{"type": "a", "n": 1}`)
	b := sendOne(t, ctx, pool, "q", `{"type": "b", "n": 2}`)
	c := sendOne(t, ctx, pool, "q", `{"type": "a", "n": 3, "extra": {"deep": true}}`)

	got := queryMessages(t, ctx, pool, `select * from pgmq.read('q', 3600, 10, '{"type": "b"}'::jsonb)`)
	require.Equal(t, []int64{b}, ids(got))

	got = queryMessages(t, ctx, pool, `select * from pgmq.read('q', 3600, 10, conditional => '{"extra": {"deep": true}}'::jsonb)`)
	require.Equal(t, []int64{c}, ids(got))

	got = queryMessages(t, ctx, pool, `select * from pgmq.read('q', 3600, 10, '{"type": "zzz"}'::jsonb)`)
	require.Empty(t, got)

	// '{}' (the default) means no filter.
	got = queryMessages(t, ctx, pool, `select * from pgmq.read('q', 3600, 10, '{}'::jsonb)`)
	require.Equal(t, []int64{a}, ids(got))
}

func TestReadWithPollConditional(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	sendOne(t, ctx, pool, "q", `{"type": "a"}`)
	b := sendOne(t, ctx, pool, "q", `{"type": "b"}`)

	got := queryMessages(t, ctx, pool,
		`select * from pgmq.read_with_poll(queue_name => 'q', vt => 30, qty => 5, max_poll_seconds => 1, poll_interval_ms => 10, conditional => '{"type": "b"}'::jsonb)`)
	require.Equal(t, []int64{b}, ids(got))
}

func TestReadWithPollReturnsAsSoonAsAMessageArrives(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")

	type result struct {
		msgs []message
		err  error
	}
	done := make(chan result, 1)
	pollCtx, cancelPoll := context.WithCancel(ctx)
	defer cancelPoll()
	go func() {
		rows, err := pool.Query(pollCtx,
			"select * from pgmq.read_with_poll(queue_name => 'q', vt => 30, qty => 5, max_poll_seconds => 120, poll_interval_ms => 20)")
		if err != nil {
			done <- result{err: err}
			return
		}
		var msgs []message
		for rows.Next() {
			var m message
			if err := rows.Scan(&m.MsgID, &m.ReadCt, &m.EnqueuedAt, &m.VT, &m.Message, &m.Headers); err != nil {
				done <- result{err: err}
				return
			}
			msgs = append(msgs, m)
		}
		done <- result{msgs: msgs, err: rows.Err()}
	}()

	// Wait until the poller is inside read_with_poll, sleeping between attempts, so it really is polling.
	waitFor(t, 60*time.Second, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `
select count(*) from pg_stat_activity
where datname = current_database() and pid <> pg_backend_pid()
  and query like '%read_with_poll%' and state = 'active' and wait_event = 'PgSleep'`).Scan(&n))
		return n > 0
	})
	select {
	case r := <-done:
		t.Fatalf("read_with_poll returned before any message was sent: %v %v", r.msgs, r.err)
	default:
	}

	id := sendOne(t, ctx, pool, "q", `{"hello": "poller"}`)

	// max_poll_seconds is 120: getting the message well before that shows the poll ended early.
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Equal(t, []int64{id}, ids(r.msgs))
		require.EqualValues(t, 1, r.msgs[0].ReadCt)
		require.Equal(t, map[string]any{"hello": "poller"}, r.msgs[0].Message)
	case <-time.After(60 * time.Second):
		t.Fatal("read_with_poll did not return the message that arrived while it was polling")
	}
}

func TestReadWithPollGivesUpAfterMaxPollSeconds(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	sendOne(t, ctx, pool, "q", `{"hidden": true}`)
	_, err := pool.Exec(ctx, "select * from pgmq.set_vt('q', 1, 3600)")
	require.NoError(t, err)

	start := time.Now()
	got := queryMessages(t, ctx, pool,
		"select * from pgmq.read_with_poll(queue_name => 'q', vt => 30, qty => 5, max_poll_seconds => 1, poll_interval_ms => 50)")
	elapsed := time.Since(start)
	require.Empty(t, got)
	require.GreaterOrEqual(t, elapsed, 900*time.Millisecond, "it polls until max_poll_seconds have passed")

	// Defaults (max_poll_seconds 5, poll_interval_ms 100) apply when omitted; a visible message returns at once.
	id := sendOne(t, ctx, pool, "q", `{}`)
	got = queryMessages(t, ctx, pool, "select * from pgmq.read_with_poll('q', 30, 5)")
	require.Equal(t, []int64{id}, ids(got))
}

// PGMQ checks the deadline before the first attempt, so max_poll_seconds = 0 never reads, even a visible message.
func TestReadWithPollZeroSecondsReadsNothing(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	id := sendOne(t, ctx, pool, "q", `{}`)

	got := queryMessages(t, ctx, pool, "select * from pgmq.read_with_poll('q', 30, 5, 0, 10)")
	require.Empty(t, got)
	require.Equal(t, []int64{id}, ids(readMessages(t, ctx, pool, "q", 30, 5)))
}

func TestSetVT(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	sent := sendMany(t, ctx, pool, "q", 2)

	// Hide a visible message.
	got := queryMessages(t, ctx, pool, "select * from pgmq.set_vt('q', $1::bigint, 3600)", sent[0])
	require.Len(t, got, 1)
	require.Equal(t, sent[0], got[0].MsgID)
	require.EqualValues(t, 0, got[0].ReadCt, "set_vt does not count as a read")
	require.True(t, !got[0].VT.Before(got[0].EnqueuedAt.Add(3600*time.Second)))
	require.True(t, got[0].VT.Before(got[0].EnqueuedAt.Add(3660*time.Second)))
	require.Equal(t, sent[1:], ids(readMessages(t, ctx, pool, "q", 3600, 10)))

	// Make a hidden (read) message visible again.
	got = queryMessages(t, ctx, pool, "select * from pgmq.set_vt('q', $1::bigint, 0)", sent[1])
	require.Len(t, got, 1)
	require.EqualValues(t, 1, got[0].ReadCt)
	again := readMessages(t, ctx, pool, "q", 3600, 10)
	require.Equal(t, sent[1:], ids(again))
	require.EqualValues(t, 2, again[0].ReadCt)

	// Unknown id: no row, no error.
	require.Empty(t, queryMessages(t, ctx, pool, "select * from pgmq.set_vt('q', 999999, 10)"))
}

func TestPop(t *testing.T) {
	t.Parallel()
	ctx, pool := setup(t)
	createQueue(t, ctx, pool, "q")
	require.Empty(t, queryMessages(t, ctx, pool, "select * from pgmq.pop('q')"), "empty queue")

	sent := sendMany(t, ctx, pool, "q", 3)
	// Read the first one with vt 0 so it stays visible with read_ct 1; hide the second one.
	require.Len(t, readMessages(t, ctx, pool, "q", 0, 1), 1)
	_, err := pool.Exec(ctx, "select * from pgmq.set_vt('q', $1::bigint, 3600)", sent[1])
	require.NoError(t, err)

	got := queryMessages(t, ctx, pool, "select * from pgmq.pop('q')")
	require.Len(t, got, 1)
	require.Equal(t, sent[0], got[0].MsgID)
	require.EqualValues(t, 1, got[0].ReadCt, "pop returns read_ct as it was")
	require.Equal(t, map[string]any{"n": float64(0)}, got[0].Message)

	got = queryMessages(t, ctx, pool, "select * from pgmq.pop('q')")
	require.Equal(t, sent[2:], ids(got), "pop skips invisible messages")
	require.Empty(t, queryMessages(t, ctx, pool, "select * from pgmq.pop('q')"))

	require.EqualValues(t, 1, countRows(t, ctx, pool, "q_q"), "only the hidden message is left")
	require.Empty(t, archiveRows(t, ctx, pool, "q"), "pop deletes, it does not archive")
}

// waitFor polls cond every 20 ms until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
