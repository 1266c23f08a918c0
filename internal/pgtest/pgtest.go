// Package pgtest gives every test its own PostgreSQL database.
//
// Unless PGFLOW_TEST_DATABASE_URL names a server, the first test that asks for a database starts a throwaway
// cluster (internal/pgcluster) that disappears with the test binary, also after a panic or a kill. Databases are
// cloned from templates built once per test binary (CREATE DATABASE … TEMPLATE), so tests can call t.Parallel()
// and never see each other's rows.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow/internal/pgcluster"
	"github.com/pgflow-go/pgflow/schema"
)

// EnvDatabaseURL names an existing server to use instead of a throwaway cluster. The role must be allowed to
// create databases.
const EnvDatabaseURL = "PGFLOW_TEST_DATABASE_URL"

// EnvPGMQ chooses how test databases get PGMQ: "auto" (default), "extension" or "bundled".
const EnvPGMQ = "PGFLOW_PGMQ"

// DB is one test's own database. Its pool is closed and the database dropped when the test ends.
type DB struct {
	Pool *pgxpool.Pool
	URL  string
	Name string
}

type kind string

const (
	kindEmpty  kind = "empty"
	kindPGMQ   kind = "pgmq"
	kindLatest kind = "latest"
	kindCore   kind = "core"
)

// server is the PostgreSQL server the tests use: a throwaway cluster or PGFLOW_TEST_DATABASE_URL.
type server struct {
	admin   *pgxpool.Pool
	baseURL *url.URL // URL of the server; the path is replaced per database
	prefix  string   // database name prefix unique to this test binary

	createMu  sync.Mutex // CREATE DATABASE … TEMPLATE needs the template to be idle
	templates sync.Map   // kind → *templateOnce
	counter   atomic.Int64
}

type templateOnce struct {
	once sync.Once
	name string
	err  error
}

var (
	serverOnce sync.Once
	theServer  *server
	serverErr  error
)

func getServer() (*server, error) {
	serverOnce.Do(func() { theServer, serverErr = openServer(context.Background()) })
	return theServer, serverErr
}

func openServer(ctx context.Context) (*server, error) {
	rawURL := os.Getenv(EnvDatabaseURL)
	if rawURL == "" {
		c, err := pgcluster.Start(ctx, pgcluster.Options{})
		if err != nil {
			return nil, fmt.Errorf("pgtest: %w (or set %s)", err, EnvDatabaseURL)
		}
		rawURL = c.AdminURL()
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("pgtest: %s must be a postgres:// URL, got %q", EnvDatabaseURL, rawURL)
	}
	admin, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("pgtest: connect to %s: %w", u.Redacted(), err)
	}
	if err := admin.Ping(ctx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("pgtest: connect to %s: %w", u.Redacted(), err)
	}
	s := &server{admin: admin, baseURL: u, prefix: fmt.Sprintf("pgflow_t%d_", os.Getpid())}
	s.dropLeftoverDatabases(ctx)
	return s, nil
}

// dropLeftoverDatabases removes databases that earlier test binaries on this machine left on a shared server.
func (s *server) dropLeftoverDatabases(ctx context.Context) {
	rows, err := s.admin.Query(ctx, `select datname from pg_database where datname like 'pgflow\_t%'`)
	if err != nil {
		return
	}
	names, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, name := range names {
		var pid int
		if _, err := fmt.Sscanf(strings.TrimPrefix(name, "pgflow_t"), "%d_", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			_, _ = s.admin.Exec(ctx, "drop database if exists "+pgx.Identifier{name}.Sanitize()+" with (force)")
		}
	}
}

func (s *server) urlFor(db string) string {
	u := *s.baseURL
	u.Path = "/" + db
	return u.String()
}

// template returns the name of the template database of the given kind, building it on first use.
func (s *server) template(ctx context.Context, k kind) (string, error) {
	if k == kindEmpty {
		return "template0", nil
	}
	v, _ := s.templates.LoadOrStore(k, &templateOnce{})
	t := v.(*templateOnce)
	t.once.Do(func() {
		t.name = s.prefix + "tpl_" + string(k)
		t.err = s.buildTemplate(ctx, k, t.name)
	})
	return t.name, t.err
}

func (s *server) buildTemplate(ctx context.Context, k kind, name string) error {
	if _, err := s.admin.Exec(ctx, "create database "+pgx.Identifier{name}.Sanitize()+" template template0"); err != nil {
		return fmt.Errorf("pgtest: create template %s: %w", name, err)
	}
	conn, err := pgx.Connect(ctx, s.urlFor(name))
	if err != nil {
		return fmt.Errorf("pgtest: connect to template %s: %w", name, err)
	}
	defer conn.Close(ctx)
	prefer := os.Getenv(EnvPGMQ)
	if prefer == "" {
		prefer = "auto"
	}
	if _, err := schema.InstallPGMQ(ctx, conn, prefer); err != nil {
		return fmt.Errorf("pgtest: install PGMQ into template %s: %w", name, err)
	}
	switch k {
	case kindLatest:
		if _, err := schema.NewMigrator(conn, nil).Up(ctx, ""); err != nil {
			return fmt.Errorf("pgtest: migrate template %s: %w", name, err)
		}
	case kindCore:
		if err := schema.InstallCore(ctx, conn); err != nil {
			return fmt.Errorf("pgtest: install sql/core into template %s: %w", name, err)
		}
	}
	return nil
}

// newDB clones a database of the given kind for t.
func newDB(t testing.TB, k kind) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := getServer()
	if err != nil {
		t.Fatalf("%v", err)
	}
	tpl, err := s.template(ctx, k)
	if err != nil {
		t.Fatalf("%v", err)
	}
	name := fmt.Sprintf("%s%d", s.prefix, s.counter.Add(1))
	s.createMu.Lock()
	_, err = s.admin.Exec(ctx, "create database "+pgx.Identifier{name}.Sanitize()+" template "+pgx.Identifier{tpl}.Sanitize())
	s.createMu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: create database %s from %s: %v", name, tpl, err)
	}
	db := &DB{Name: name, URL: s.urlFor(name)}
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatalf("pgtest: parse %s: %v", db.URL, err)
	}
	// An empty search_path makes any unqualified object reference in the code under test fail loudly.
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	cfg.MaxConns = 10
	db.Pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", name, err)
	}
	t.Cleanup(func() {
		db.Pool.Close()
		dropCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := s.admin.Exec(dropCtx, "drop database if exists "+pgx.Identifier{name}.Sanitize()+" with (force)"); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return db
}

// New returns a fresh database with PGMQ installed and the pgflow schema migrated to the latest version.
func New(t testing.TB) *DB { t.Helper(); return newDB(t, kindLatest) }

// NewWithPGMQ returns a fresh database with only PGMQ installed.
func NewWithPGMQ(t testing.TB) *DB { t.Helper(); return newDB(t, kindPGMQ) }

// NewEmpty returns a fresh database with nothing installed.
func NewEmpty(t testing.TB) *DB { t.Helper(); return newDB(t, kindEmpty) }

// NewFromCore returns a fresh database with PGMQ and the pgflow schema built from schema/sql/core directly
// (not from the migrations).
func NewFromCore(t testing.TB) *DB { t.Helper(); return newDB(t, kindCore) }

// AdminURL returns a superuser URL for the server's maintenance database, for tests that create roles or
// databases of their own.
func AdminURL(t testing.TB) string {
	t.Helper()
	s, err := getServer()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return s.urlFor(strings.TrimPrefix(s.baseURL.Path, "/"))
}

// BinPath returns the path of a PostgreSQL client program (pg_dump, psql, …) from the same installation the
// throwaway cluster uses, failing the test with an install hint when it is missing.
func BinPath(t testing.TB, program string) string {
	t.Helper()
	dir, err := pgcluster.BinDir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	p := dir + "/" + program
	if !pgcluster.IsExecutable(p) {
		t.Fatalf("pgtest: %s not found in %s; install the PostgreSQL client programs (Debian: apt-get install postgresql-client)", program, dir)
	}
	return p
}

// SessionPID opens a connection of its own to the test's database, keeps it open until the test ends and returns
// its server process id: a session that exists, for what needs one (a worker's listener_pid). Terminate it with
// pg_terminate_backend to play a process that died.
func (db *DB) SessionPID(t testing.TB) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", db.Name, err)
	}
	t.Cleanup(func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	})
	return conn.PgConn().PID()
}
