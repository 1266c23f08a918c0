package pgflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
	"github.com/pgflow-go/pgflow/internal/testutil"
)

// switchDialer opens connections while refuse is false and refuses them while it is true: a LISTEN connection the
// test can make unavailable.
type switchDialer struct{ refuse atomic.Bool }

func (d *switchDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.refuse.Load() {
		return nil, fmt.Errorf("simulated: the LISTEN connection is unavailable (dial %s %s)", network, addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// runWorker starts a worker on client and stops it when the test ends.
func runWorker(t *testing.T, client *Client, cfg WorkerConfig) *Worker {
	t.Helper()
	w, err := NewWorker(client, &cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitTimeout):
			t.Errorf("worker %s did not stop", w.ID())
		}
	})
	return w
}

// The schema wakes a worker alone only while its LISTEN on its own channel is in effect, as its heartbeats say.
// Worker A listens; worker B's LISTEN connection can never be opened (not PollOnly: it keeps trying), so B is
// alive but never woken alone, and every start wakes A, on A's channel (before, about half of them went to B and
// waited for a periodic read). When A's LISTEN connection is lost and cannot come back, A says so at once: starts
// are announced on the queue's channel. Once A listens again, they wake A alone again. Each heartbeat names the
// server session A listens in (listener_pid), the new one after the reconnect.
func TestTargetedWakeChoosesOnlyWorkersThatListen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	f := NewFlow[int]("listening")
	Step(f, "only", func(context.Context, *Task[int]) (json.RawMessage, error) { return json.RawMessage(`1`), nil })
	const idA, idB = "a1000000-0000-4000-8000-00000000000a", "a1000000-0000-4000-8000-00000000000b"

	cfg, _ := testConfig(t)
	dialA, dialB := &switchDialer{}, &switchDialer{}
	dialB.refuse.Store(true)
	clientFor := func(d *switchDialer) *Client {
		listen, err := pgx.ParseConfig(db.URL)
		require.NoError(t, err)
		listen.DialFunc = d.dial
		return newClient(t, db.Pool, &ClientConfig{Logger: cfg.Logger, ListenConfig: listen})
	}
	clientA, clientB := clientFor(dialA), clientFor(dialB)
	cfgA, cfgB := cfg, cfg
	cfgA.Flows, cfgA.WorkerID = []WorkerFlow{{Flow: f}}, idA
	cfgB.Flows, cfgB.WorkerID = []WorkerFlow{{Flow: f}}, idB
	runWorker(t, clientA, cfgA)
	runWorker(t, clientB, cfgB)

	type row struct {
		alive       bool
		listensAt   *time.Time
		listenerPID *int32
	}
	rowOf := func(id string) row {
		var r row
		err := db.Pool.QueryRow(ctx, `
			select stopped_at is null and deprecated_at is null and last_heartbeat_at >= now() - interval '30 seconds'
			       and last_heartbeat_at > started_at,
			       listens_at, listener_pid
			  from pgflow.workers where worker_id = $1`, id).Scan(&r.alive, &r.listensAt, &r.listenerPID)
		if errors.Is(err, pgx.ErrNoRows) {
			return row{} // not registered yet
		}
		require.NoError(t, err)
		return r
	}
	waitFor(t, "A heartbeats that it listens, B that it does not", func() bool {
		a, b := rowOf(idA), rowOf(idB)
		return a.alive && a.listensAt != nil && b.alive && b.listensAt == nil
	})
	collect := testutil.Notifications(t, db.URL, sqlapi.WorkerChannel(idA), sqlapi.WorkerChannel(idB), sqlapi.QueueChannel("listening"))
	wakeA := sqlapi.WorkerChannel(idA) + " "
	broadcast := sqlapi.QueueChannel("listening") + " "

	for i := range 10 {
		runID := startRun(t, db.Pool, "listening", i)
		require.Equal(t, []string{wakeA}, collect(), "start %d: A alone is woken, B never", i)
		require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)
	}
	require.Nil(t, rowOf(idB).listensAt, "B still says it does not listen")
	require.Nil(t, rowOf(idB).listenerPID)
	require.EqualValues(t, clientA.listener.BackendPID(), *rowOf(idA).listenerPID, "A says which session listens")

	// A's LISTEN connection is lost and cannot be opened again: A's next heartbeat (written as soon as the listener
	// noticed) says it does not listen, and a start is announced to every listener of the queue.
	first := *rowOf(idA).listensAt
	dialA.refuse.Store(true)
	pid := clientA.listener.BackendPID()
	require.NotZero(t, pid)
	var terminated bool
	require.NoError(t, db.Pool.QueryRow(ctx, `select pg_terminate_backend($1)`, int32(pid)).Scan(&terminated))
	require.True(t, terminated)
	waitFor(t, "A says it no longer listens", func() bool { return rowOf(idA).listensAt == nil })
	runID := startRun(t, db.Pool, "listening", 100)
	require.Equal(t, []string{broadcast}, collect(), "no worker listens on its own channel: the queue channel")
	require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status, "the workers poll meanwhile")

	// A listens again: it says so (since a new time), and starts wake it alone again.
	dialA.refuse.Store(false)
	waitFor(t, "A says it listens again", func() bool { return rowOf(idA).listensAt != nil })
	require.True(t, rowOf(idA).listensAt.After(first), "listens_at: since when it listens, after the reconnect")
	waitFor(t, "A's row names its new listening session", func() bool {
		p := rowOf(idA).listenerPID
		return p != nil && uint32(*p) == clientA.listener.BackendPID()
	})
	require.NotEqual(t, pid, uint32(*rowOf(idA).listenerPID))
	runID = startRun(t, db.Pool, "listening", 101)
	require.Equal(t, []string{wakeA}, collect())
	require.Equal(t, "completed", waitRun(t, db.Pool, runID).Status)

	infos, err := clientA.ListWorkers(ctx, 0)
	require.NoError(t, err)
	listening := map[string]bool{}
	for _, w := range infos {
		listening[w.ID] = w.ListensAt != nil
	}
	require.Equal(t, map[string]bool{idA: true, idB: false}, listening, "WorkerInfo.ListensAt")
	for _, w := range infos {
		if w.ID == idA {
			require.Equal(t, clientA.listener.BackendPID(), w.ListenerPID, "WorkerInfo.ListenerPID")
		}
	}
}
