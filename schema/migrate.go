package schema

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultLockTimeout bounds how long one migration waits for a table lock before it gives up (and rolls back).
const DefaultLockTimeout = 5 * time.Second

// migrationLockKey is the advisory lock every migrator takes, so two of them never apply the same migration.
// The value is arbitrary but fixed: the ASCII bytes of "pgflowgo".
const migrationLockKey int64 = 0x7067666c6f77676f

// Migration is one released migration: the SQL that moves a database from the previous version to Version.
type Migration struct {
	Seq     int    // position in the lineage, from the file name
	Version string // e.g. "v0.16.0"
	File    string // file name under sql/migrations
	SQL     string
}

// Checksum is the SHA-256 of the migration's SQL, recorded when it is applied.
func (m Migration) Checksum() string {
	sum := sha256.Sum256([]byte(m.SQL))
	return hex.EncodeToString(sum[:])
}

var migrationName = regexp.MustCompile(`^(\d{4})_(v\d+\.\d+\.\d+)\.sql$`)

// Migrations lists the released migrations in the order they apply.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(sqlFiles, "sql/migrations")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("schema: read embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("schema: migration file %q is not named NNNN_vX.Y.Z.sql", e.Name())
		}
		body, err := fs.ReadFile(sqlFiles, path.Join("sql/migrations", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("schema: read migration %s: %w", e.Name(), err)
		}
		var seq int
		fmt.Sscanf(m[1], "%d", &seq)
		out = append(out, Migration{Seq: seq, Version: m[2], File: e.Name(), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	for i, m := range out {
		if m.Seq != i+1 {
			return nil, fmt.Errorf("schema: migration %s is number %d, expected %d (no gaps allowed)", m.File, m.Seq, i+1)
		}
	}
	return out, nil
}

// CoreSQL returns the declarative schema: every file of sql/core concatenated in name order.
func CoreSQL() (string, error) {
	return concatDir("sql/core")
}

func concatDir(dir string) (string, error) {
	entries, err := fs.ReadDir(sqlFiles, dir)
	if err != nil {
		return "", fmt.Errorf("schema: read %s: %w", dir, err)
	}
	var b strings.Builder
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		body, err := fs.ReadFile(sqlFiles, path.Join(dir, e.Name()))
		if err != nil {
			return "", fmt.Errorf("schema: read %s/%s: %w", dir, e.Name(), err)
		}
		fmt.Fprintf(&b, "-- %s\n%s\n", e.Name(), strings.TrimRight(string(body), "\n"))
		b.WriteString("\n")
	}
	return b.String(), nil
}

// InstallCore builds the pgflow schema straight from sql/core in one transaction. It exists for the
// schema-equality check and for development; real databases are built with the Migrator.
func InstallCore(ctx context.Context, conn *pgx.Conn) error {
	sql, err := CoreSQL()
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "set local check_function_bodies = off"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("schema: install sql/core: %w", err)
		}
		return nil
	})
}

// bootstrapSQL creates the version table. It runs inside every migration's transaction, so a failed first
// migration leaves no trace at all.
const bootstrapSQL = `create schema if not exists pgflow;
create table if not exists pgflow.schema_migrations (
  version    text primary key,
  file       text not null,
  checksum   text not null,
  applied_at timestamptz not null default now()
);
comment on table pgflow.schema_migrations is 'pgflow-go: released migrations applied to this database (written by the migrator).';`

// Migrator applies the embedded migrations to one database connection.
type Migrator struct {
	conn        *pgx.Conn
	lockTimeout time.Duration
	pgmq        string
	log         func(format string, args ...any)
	migrations  func() ([]Migration, error) // the embedded lineage; replaced only by this package's tests
}

// MigratorConfig configures a Migrator. A nil *MigratorConfig, and the zero value of each field, mean the
// defaults.
type MigratorConfig struct {
	// LockTimeout bounds how long each migration waits for a lock. Default DefaultLockTimeout.
	LockTimeout time.Duration
	// PGMQ chooses how PGMQ is installed: "auto" (the default: the extension when the server offers it, else the
	// bundled layer), "extension" or "bundled".
	PGMQ string
	// Progress receives one line per step the migrator takes. Default: nothing is reported.
	Progress func(format string, args ...any)
}

// NewMigrator returns a migrator that works on conn. The connection must not be used by anything else while a
// migration runs.
func NewMigrator(conn *pgx.Conn, cfg *MigratorConfig) *Migrator {
	m := &Migrator{conn: conn, lockTimeout: DefaultLockTimeout, pgmq: "auto", log: func(string, ...any) {},
		migrations: Migrations}
	if cfg != nil {
		if cfg.LockTimeout > 0 {
			m.lockTimeout = cfg.LockTimeout
		}
		if cfg.PGMQ != "" {
			m.pgmq = cfg.PGMQ
		}
		if cfg.Progress != nil {
			m.log = cfg.Progress
		}
	}
	return m
}

// UpReport says what Up did.
type UpReport struct {
	PGMQ    PGMQMode
	Applied []Migration // applied by this call, in order
	Current string      // version of the database afterwards ("" when none)
}

// Up installs PGMQ when missing, then applies every pending migration up to and including version to ("" or
// "latest" means all), each in its own transaction under an advisory lock. A concurrent Up waits for the lock,
// then finds nothing left to do.
func (m *Migrator) Up(ctx context.Context, to string) (*UpReport, error) {
	all, err := m.migrations()
	if err != nil {
		return nil, err
	}
	target, err := resolveTarget(all, to)
	if err != nil {
		return nil, err
	}
	report := &UpReport{}
	err = m.inLockedTx(ctx, func(tx pgx.Tx) error {
		mode, err := InstallPGMQ(ctx, tx, m.pgmq)
		report.PGMQ = mode
		return err
	})
	if err != nil {
		return report, fmt.Errorf("schema: install PGMQ: %w", err)
	}
	m.log("pgmq: %s", report.PGMQ)

	for _, mig := range all[:target] {
		applied := false
		err := m.inLockedTx(ctx, func(tx pgx.Tx) error {
			done, err := appliedVersions(ctx, tx)
			if err != nil {
				return err
			}
			if sum, ok := done[mig.Version]; ok {
				if sum != mig.Checksum() {
					m.log("warning: %s was applied from a different file than the one embedded (checksum differs)", mig.Version)
				}
				return nil
			}
			if newer := newerThanKnown(done, all); newer != "" {
				return fmt.Errorf("database has version %s applied, which this binary does not know; upgrade the binary", newer)
			}
			if _, err := tx.Exec(ctx, bootstrapSQL); err != nil {
				return fmt.Errorf("create pgflow.schema_migrations: %w", err)
			}
			if _, err := tx.Exec(ctx, mig.SQL); err != nil {
				return fmt.Errorf("apply %s (%s): %w", mig.Version, mig.File, err)
			}
			if _, err := tx.Exec(ctx, `insert into pgflow.schema_migrations (version, file, checksum) values ($1, $2, $3)`,
				mig.Version, mig.File, mig.Checksum()); err != nil {
				return fmt.Errorf("record %s: %w", mig.Version, err)
			}
			applied = true
			return nil
		})
		if err != nil {
			return report, fmt.Errorf("schema: %w", err)
		}
		if applied {
			report.Applied = append(report.Applied, mig)
			m.log("applied %s (%s)", mig.Version, mig.File)
		}
	}
	st, err := m.Status(ctx)
	if err != nil {
		return report, err
	}
	report.Current = st.Current
	return report, nil
}

// inLockedTx runs f in a transaction that holds the migration advisory lock and a bounded lock_timeout.
func (m *Migrator) inLockedTx(ctx context.Context, f func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, m.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "select pg_catalog.pg_advisory_xact_lock($1)", migrationLockKey); err != nil {
			return fmt.Errorf("take the migration lock: %w", err)
		}
		ms := m.lockTimeout.Milliseconds()
		if ms <= 0 {
			ms = 1
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf("set local lock_timeout = %d", ms)); err != nil {
			return err
		}
		return f(tx)
	})
}

func resolveTarget(all []Migration, to string) (int, error) {
	if to == "" || to == "latest" {
		return len(all), nil
	}
	want := to
	if !strings.HasPrefix(want, "v") {
		want = "v" + want
	}
	var known []string
	for i, m := range all {
		if m.Version == want {
			return i + 1, nil
		}
		known = append(known, m.Version)
	}
	return 0, fmt.Errorf("schema: unknown version %q; known versions: %s", to, strings.Join(known, ", "))
}

func newerThanKnown(done map[string]string, all []Migration) string {
	known := map[string]bool{}
	for _, m := range all {
		known[m.Version] = true
	}
	for v := range done {
		if !known[v] {
			return v
		}
	}
	return ""
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// appliedVersions maps applied versions to their recorded checksums; empty when the table does not exist yet.
func appliedVersions(ctx context.Context, q querier) (map[string]string, error) {
	var exists bool
	if err := q.QueryRow(ctx, `select to_regclass('pgflow.schema_migrations') is not null`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("look for pgflow.schema_migrations: %w", err)
	}
	out := map[string]string{}
	if !exists {
		return out, nil
	}
	rows, err := q.Query(ctx, `select version, checksum from pgflow.schema_migrations`)
	if err != nil {
		return nil, fmt.Errorf("read pgflow.schema_migrations: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var v, sum string
		if err := rows.Scan(&v, &sum); err != nil {
			return nil, err
		}
		out[v] = sum
	}
	return out, rows.Err()
}

// MigrationStatus is one migration's state in a database.
type MigrationStatus struct {
	Migration
	Applied   bool
	AppliedAt time.Time
}

// Status describes a database's schema version.
type Status struct {
	Migrations []MigrationStatus
	Current    string   // newest applied version, "" when none
	Pending    []string // versions not applied yet
	Unknown    []string // applied versions this binary does not know (the database is newer)
}

// Status reports which migrations are applied. It takes no locks and changes nothing.
func (m *Migrator) Status(ctx context.Context) (*Status, error) {
	all, err := m.migrations()
	if err != nil {
		return nil, err
	}
	st := &Status{}
	var exists bool
	if err := m.conn.QueryRow(ctx, `select to_regclass('pgflow.schema_migrations') is not null`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("schema: status: %w", err)
	}
	appliedAt := map[string]time.Time{}
	if exists {
		rows, err := m.conn.Query(ctx, `select version, applied_at from pgflow.schema_migrations`)
		if err != nil {
			return nil, fmt.Errorf("schema: status: %w", err)
		}
		for rows.Next() {
			var v string
			var at time.Time
			if err := rows.Scan(&v, &at); err != nil {
				rows.Close()
				return nil, err
			}
			appliedAt[v] = at
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	known := map[string]bool{}
	for _, mig := range all {
		known[mig.Version] = true
		at, ok := appliedAt[mig.Version]
		st.Migrations = append(st.Migrations, MigrationStatus{Migration: mig, Applied: ok, AppliedAt: at})
		if ok {
			st.Current = mig.Version
		} else {
			st.Pending = append(st.Pending, mig.Version)
		}
	}
	for v := range appliedAt {
		if !known[v] {
			st.Unknown = append(st.Unknown, v)
		}
	}
	sort.Strings(st.Unknown)
	return st, nil
}

// Export writes every migration as a plain SQL file into dir, for teams that run Supabase's or another migration
// runner. Each file also records its version in pgflow.schema_migrations, so `pgflow migrate status` and a later
// `pgflow migrate up` know what was applied. PGMQ is not part of the files: install the pgmq extension (or the
// bundled layer with `pgflow migrate up`) first. Existing files with the same names are overwritten.
func Export(dir string) ([]string, error) {
	all, err := Migrations()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("schema: export: create %s: %w", dir, err)
	}
	var written []string
	for _, mig := range all {
		name := fmt.Sprintf("%04d_pgflow_%s.sql", mig.Seq, mig.Version)
		body := fmt.Sprintf("-- pgflow-go migration %s (%s), exported by `pgflow migrate export`.\n"+
			"-- Apply in order, each file in one transaction. Requires schema pgmq (PGMQ >= 1.5).\n"+
			"set lock_timeout = '%ds';\n\n%s\n\n%s\n\ninsert into pgflow.schema_migrations (version, file, checksum)\nvalues ('%s', '%s', '%s')\non conflict (version) do nothing;\n",
			mig.Version, mig.File, int(DefaultLockTimeout.Seconds()), bootstrapSQL, strings.TrimRight(mig.SQL, "\n"),
			mig.Version, mig.File, mig.Checksum())
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return written, fmt.Errorf("schema: export: write %s: %w", p, err)
		}
		written = append(written, p)
	}
	if len(written) == 0 {
		return nil, errors.New("schema: export: no migrations are embedded in this binary")
	}
	return written, nil
}
