package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func startClusterAndBouncer(t *testing.T) (*Cluster, *PgBouncer) {
	t.Helper()
	ctx := context.Background()
	c, err := Start(ctx, Options{})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	b, err := StartPgBouncer(ctx, PgBouncerOptions{ServerURL: c.AdminURL()})
	require.NoError(t, err, "a missing pgbouncer is installed with: "+PgBouncerInstallHint)
	t.Cleanup(b.Stop)
	return c, b
}

func connectVia(t *testing.T, rawURL string, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(rawURL)
	require.NoError(t, err)
	cfg.DefaultQueryExecMode = mode
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func backendPID(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) int {
	t.Helper()
	var pid int
	require.NoError(t, db.QueryRow(context.Background(), `select pg_backend_pid()`).Scan(&pid))
	return pid
}

// The bouncer pools in transaction mode: a client is not tied to one server session. While another client holds
// the only idle server connection in a transaction, the next statement of the first client runs on another one.
func TestPgBouncerPoolsInTransactionMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, b := startClusterAndBouncer(t)
	require.Regexp(t, `^\d+\.\d+\.\d+$`, b.Version())

	a := connectVia(t, b.URL("postgres"), pgx.QueryExecModeSimpleProtocol)
	first := backendPID(t, a)

	other := connectVia(t, b.URL("postgres"), pgx.QueryExecModeSimpleProtocol)
	tx, err := other.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	held := backendPID(t, tx)
	require.Equal(t, first, held, "the idle server connection is reused (LIFO)")

	second := backendPID(t, a)
	require.NotEqual(t, first, second, "in transaction mode a client's next statement goes to another server connection")

	admin := connectVia(t, b.URL("pgbouncer"), pgx.QueryExecModeSimpleProtocol)
	rows, err := admin.Query(ctx, "SHOW CONFIG")
	require.NoError(t, err)
	settings := map[string]string{}
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(t, err)
		if len(vals) >= 2 && vals[0] != nil {
			settings[fmt.Sprint(vals[0])] = fmt.Sprint(vals[1])
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, "transaction", settings["pool_mode"])
	if b.MaxPreparedStatements() > 0 {
		require.Equal(t, "200", settings["max_prepared_statements"])
	}
}

// Which of pgx's query modes survive transaction pooling with the installed PgBouncer. Two clients share one
// server connection in turn; the second one prepares the same statement the first one already prepared there.
// pgx's default (QueryExecModeCacheStatement, named prepared statements) then fails with "prepared statement
// already exists" unless PgBouncer tracks prepared statements itself (1.21+, max_prepared_statements > 0).
// QueryExecModeExec, CacheDescribe and SimpleProtocol never leave a named statement behind and always work.
// (DescribeExec is not listed: it describes an unnamed statement in one round trip and executes it in the next,
// and a pooler may hand the second one to another server connection.)
// docs/deploy.md states this.
func TestPgBouncerQueryExecModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, b := startClusterAndBouncer(t)
	const query = `select $1::int + 1`

	for _, tc := range []struct {
		name     string
		mode     pgx.QueryExecMode
		survives bool
	}{
		{"CacheStatement(pgx default)", pgx.QueryExecModeCacheStatement, b.MaxPreparedStatements() > 0},
		{"CacheDescribe", pgx.QueryExecModeCacheDescribe, true},
		{"Exec", pgx.QueryExecModeExec, true},
		{"SimpleProtocol", pgx.QueryExecModeSimpleProtocol, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := "mode_" + filepath.Base(t.Name())
			db = sanitizeDBName(db)
			setup := connectVia(t, b.URL("postgres"), pgx.QueryExecModeSimpleProtocol)
			_, err := setup.Exec(ctx, "create database "+pgx.Identifier{db}.Sanitize())
			require.NoError(t, err)
			// The database's own pool has one server connection at most after this, and only these two clients.
			a := connectVia(t, b.URL(db), tc.mode)
			var got int
			require.NoError(t, a.QueryRow(ctx, query, 41).Scan(&got))
			require.Equal(t, 42, got)

			other := connectVia(t, b.URL(db), tc.mode)
			tx, err := other.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			err = tx.QueryRow(ctx, query, 1).Scan(&got)
			if tc.survives {
				require.NoError(t, err)
				require.Equal(t, 2, got)
				return
			}
			var pgErr *pgconn.PgError
			require.Error(t, err, "PgBouncer %s without prepared-statement support: a named statement leaks between clients", b.Version())
			t.Logf("as expected with PgBouncer %s: %v", b.Version(), err)
			if errors.As(err, &pgErr) {
				require.Contains(t, []string{"42P05", "26000"}, pgErr.Code, "prepared statement already exists / does not exist: %v", err)
			}
		})
	}
}

func sanitizeDBName(s string) string {
	out := make([]byte, 0, len(s))
	for i := range len(s) {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			out = append(out, c)
		case c >= 'A' && c <= 'Z':
			out = append(out, c+'a'-'A')
		default:
			out = append(out, '_')
		}
	}
	return string(out)
}

// A missing binary is reported with the command that installs it.
func TestPgBouncerMissingNamesTheInstallCommand(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findPgBouncer([]string{filepath.Join(t.TempDir(), "pgbouncer")})
	require.ErrorIs(t, err, ErrPgBouncerMissing)
	require.Contains(t, err.Error(), "apt-get install pgbouncer")
}

func TestParseBouncerVersion(t *testing.T) {
	for out, want := range map[string][3]int{
		"PgBouncer 1.18.0\nlibevent 2.1.12-stable\n": {1, 18, 0},
		"pgbouncer version 1.21.0":                   {1, 21, 0},
		"PgBouncer 1.24.1":                           {1, 24, 1},
	} {
		v, err := parseBouncerVersion(out)
		require.NoError(t, err)
		require.Equal(t, want, v)
	}
	require.False(t, bouncerSupportsPrepared([3]int{1, 20, 1}))
	require.True(t, bouncerSupportsPrepared([3]int{1, 21, 0}))
	require.True(t, bouncerSupportsPrepared([3]int{2, 0, 0}))
	_, err := parseBouncerVersion("something else")
	require.Error(t, err)
}

// Stop ends the process and removes the directory.
func TestPgBouncerStopRemovesItsDirectory(t *testing.T) {
	t.Parallel()
	_, b := startClusterAndBouncer(t)
	pid := b.pid
	require.True(t, processAlive(pid))
	b.Stop()
	require.False(t, processAlive(pid))
	_, err := os.Stat(b.Dir())
	require.True(t, os.IsNotExist(err))
}
