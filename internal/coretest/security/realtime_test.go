package security_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// connAs connects to db as role, collecting every notice (client_min_messages = log, so LOG lines reach the test
// too).
func connAs(t *testing.T, dbURL, role string) (*pgx.Conn, func() []string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	if role != "" {
		u.User = url.User(role)
	}
	cfg, err := pgx.ParseConfig(u.String())
	require.NoError(t, err)
	var mu sync.Mutex
	var msgs []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		msgs = append(msgs, n.Severity+": "+n.Message)
	}
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(context.Background(), "set client_min_messages = log")
	require.NoError(t, err)
	return conn, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), msgs...)
	}
}

const realtimeSendSQL = `
create schema realtime;
create table realtime.captured (caller text, topic text, event text);
grant usage on schema realtime to public;
grant insert on realtime.captured to public;
create function realtime.send(payload jsonb, event text, topic text, private boolean) returns void
language plpgsql as $f$
begin
  raise notice 'realtime.send ran as %', current_user;
  insert into realtime.captured values (current_user, topic, event);
end $f$;
grant execute on function realtime.send(jsonb, text, text, boolean) to public;
`

func countCaptured(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), "select count(*) from realtime.captured").Scan(&n))
	return n
}

func startRun(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	_, err := conn.Exec(context.Background(), "select pgflow.start_flow('rt', '{}')")
	require.NoError(t, err)
}

func filter(msgs []string, substr string) []string {
	var out []string
	for _, m := range msgs {
		if strings.Contains(m, substr) {
			out = append(out, m)
		}
	}
	return out
}

// A realtime.send owned by a superuser (Supabase's case) receives every event.
func TestRealtimeSendOwnedBySuperuserIsCalled(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, realtimeSendSQL+`; select pgflow.create_flow('rt'); select pgflow.add_step('rt', 'a')`)
	require.NoError(t, err)
	conn, notices := connAs(t, db.URL, "")
	startRun(t, conn)
	require.Positive(t, countCaptured(t, conn), "run:started and step:started went to realtime.send")
	require.Empty(t, filter(notices(), "not calling"))
}

// A realtime.send planted by a role that may only create schemas is never called, whoever emits the events, and
// the server log says so once per session. The same holds when a trusted role owns the function but the planting
// role owns schema realtime (it could drop and replace the function at will).
func TestPlantedRealtimeSendIsNotCalled(t *testing.T) {
	for _, ownSchemaOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("schema_only=%v", ownSchemaOnly), func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			ctx := context.Background()
			planter := newLoginRole(t)
			_, err := db.Pool.Exec(ctx, fmt.Sprintf(`grant create on database %s to %s;
				select pgflow.create_flow('rt'); select pgflow.add_step('rt', 'a')`,
				pgx.Identifier{db.Name}.Sanitize(), planter))
			require.NoError(t, err)
			if ownSchemaOnly {
				_, err = db.Pool.Exec(ctx, realtimeSendSQL+fmt.Sprintf("; alter schema realtime owner to %s", planter))
			} else {
				planterConn, _ := connAs(t, db.URL, planter)
				_, err = planterConn.Exec(ctx, realtimeSendSQL)
			}
			require.NoError(t, err)

			conn, notices := connAs(t, db.URL, "")
			startRun(t, conn)
			startRun(t, conn)
			require.Zero(t, countCaptured(t, conn), "the planted function never ran")
			require.Empty(t, filter(notices(), "realtime.send ran as"))
			logged := filter(notices(), "not calling realtime.send")
			require.Len(t, logged, 1, "said once per session: %v", notices())
			require.True(t, strings.HasPrefix(logged[0], "LOG: "), "a server-log line, not a warning to clients: %s", logged[0])
			require.Contains(t, logged[0], planter)
		})
	}
}
