package schema

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PGMQMode says how PGMQ was provided.
type PGMQMode string

const (
	// PGMQExtension: the real pgmq extension (created by InstallPGMQ or found installed).
	PGMQExtension PGMQMode = "extension"
	// PGMQBundled: pgflow-go's SQL-only PGMQ-compatible layer from sql/pgmq.
	PGMQBundled PGMQMode = "bundled"
	// PGMQPreexisting: a schema pgmq with PGMQ's API that is neither the extension nor the bundled layer
	// (for example PGMQ's SQL installed by hand).
	PGMQPreexisting PGMQMode = "preexisting"
)

// PGMQ preferences accepted by InstallPGMQ.
const (
	PGMQPreferAuto      = "auto"
	PGMQPreferExtension = "extension"
	PGMQPreferBundled   = "bundled"
)

// BundledPGMQMarker starts the comment on schema pgmq that marks a bundled install.
const BundledPGMQMarker = "pgflow-go bundled pgmq-compatible layer"

// pgmqMinVersion is the oldest PGMQ whose API pgflow works with (1.5.0 added message headers).
var pgmqMinVersion = []int{1, 5}

// pgmqInstallLockKey serialises concurrent InstallPGMQ calls on one database (pg_advisory_xact_lock key).
const pgmqInstallLockKey int64 = 0x7067666c6f77_01 // "pgflow" + 01

// bundledPGMQDir is where the bundled layer's files live inside sqlFiles; they run in file-name order.
const bundledPGMQDir = "sql/pgmq"

// PGMQConn is what InstallPGMQ needs from a connection. *pgx.Conn, pgx.Tx and *pgxpool.Pool satisfy it.
type PGMQConn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InstallPGMQ makes sure schema pgmq with PGMQ >= 1.5's API exists. prefer is "auto" ("" means the same: the
// extension when the server offers pgmq >= 1.5 in pg_available_extension_versions, else the bundled layer),
// "extension" or "bundled".
//
// It is idempotent: when PGMQ is already there (the extension, the bundled layer, or another schema pgmq with a
// pgmq.meta table) it changes nothing and reports what it found, whatever prefer says. Everything happens in one
// transaction (a savepoint when conn is a pgx.Tx) under an advisory lock, so concurrent calls do not race and a
// failed install leaves nothing behind.
func InstallPGMQ(ctx context.Context, conn PGMQConn, prefer string) (PGMQMode, error) {
	switch prefer {
	case "":
		prefer = PGMQPreferAuto
	case PGMQPreferAuto, PGMQPreferExtension, PGMQPreferBundled:
	default:
		return "", fmt.Errorf("schema: unknown PGMQ preference %q: use %q, %q or %q",
			prefer, PGMQPreferAuto, PGMQPreferExtension, PGMQPreferBundled)
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		return "", fmt.Errorf("schema: install PGMQ: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()

	if _, err := tx.Exec(ctx, "select pg_advisory_xact_lock($1)", pgmqInstallLockKey); err != nil {
		return "", fmt.Errorf("schema: install PGMQ: take advisory lock %d: %w", pgmqInstallLockKey, err)
	}

	mode, found, err := DetectPGMQ(ctx, tx)
	if err != nil {
		return "", err
	}
	if !found {
		mode, err = installPGMQ(ctx, tx, prefer)
		if err != nil {
			return "", err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return "", fmt.Errorf("schema: install PGMQ (%s): commit: %w", mode, err)
	}
	return mode, nil
}

func installPGMQ(ctx context.Context, tx pgx.Tx, prefer string) (PGMQMode, error) {
	version, offered, err := availablePGMQExtension(ctx, tx)
	if err != nil {
		return "", err
	}
	switch {
	case prefer == PGMQPreferBundled, prefer == PGMQPreferAuto && version == "":
		if err := installBundledPGMQ(ctx, tx); err != nil {
			return "", err
		}
		return PGMQBundled, nil
	case version == "":
		have := "no pgmq extension at all"
		if len(offered) > 0 {
			have = "pgmq versions " + strings.Join(offered, ", ")
		}
		return "", fmt.Errorf("schema: PGMQ preference %q, but the server offers %s and pgflow needs pgmq >= %s: "+
			"install the pgmq extension (>= %[3]s) into the server's extension directory, or use preference %q",
			prefer, have, formatVersion(pgmqMinVersion), PGMQPreferBundled)
	default:
		stmt := "create extension if not exists pgmq version " + quoteLiteral(version)
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return "", fmt.Errorf("schema: create extension pgmq version %s: %w", version, err)
		}
		return PGMQExtension, nil
	}
}

// DetectPGMQ reports how PGMQ is provided in the database conn is connected to. found is false when there is no
// PGMQ yet. It fails when the PGMQ found is older than 1.5.
func DetectPGMQ(ctx context.Context, conn interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (mode PGMQMode, found bool, err error) {
	var extVersion *string
	var schemaExists, metaExists, hasHeaders bool
	var comment string
	err = conn.QueryRow(ctx, `
select (select e.extversion from pg_catalog.pg_extension e where e.extname = 'pgmq'),
       n.oid is not null,
       coalesce(pg_catalog.obj_description(n.oid, 'pg_namespace'), ''),
       pg_catalog.to_regclass('pgmq.meta') is not null,
       exists (select 1
               from pg_catalog.pg_attribute a
               join pg_catalog.pg_type t on t.typrelid = a.attrelid
               where t.oid = pg_catalog.to_regtype('pgmq.message_record')
                 and a.attname = 'headers' and not a.attisdropped)
from (select 1) one
left join pg_catalog.pg_namespace n on n.nspname = 'pgmq'`).
		Scan(&extVersion, &schemaExists, &comment, &metaExists, &hasHeaders)
	if err != nil {
		return "", false, fmt.Errorf("schema: look for PGMQ: %w", err)
	}

	switch {
	case extVersion != nil:
		if !versionAtLeast(*extVersion, pgmqMinVersion) {
			return PGMQExtension, true, fmt.Errorf("schema: the pgmq extension is at version %s but pgflow needs >= %s: "+
				"run `alter extension pgmq update` after installing a newer pgmq on the server",
				*extVersion, formatVersion(pgmqMinVersion))
		}
		return PGMQExtension, true, nil
	case schemaExists && strings.HasPrefix(comment, BundledPGMQMarker):
		if !metaExists {
			return PGMQBundled, true, errors.New("schema: schema pgmq is marked as the bundled PGMQ layer but has no " +
				"table pgmq.meta; drop schema pgmq (it holds no queues) and install again")
		}
		return PGMQBundled, true, nil
	case schemaExists && metaExists:
		if !hasHeaders {
			return PGMQPreexisting, true, fmt.Errorf("schema: schema pgmq holds a PGMQ older than %s "+
				"(type pgmq.message_record has no headers column); upgrade it to pgmq >= %[1]s",
				formatVersion(pgmqMinVersion))
		}
		return PGMQPreexisting, true, nil
	default:
		return "", false, nil
	}
}

// availablePGMQExtension returns the pgmq extension version to create: the server's default version when it is
// >= 1.5, else the newest offered version >= 1.5, else "". offered lists every version the server has.
func availablePGMQExtension(ctx context.Context, tx pgx.Tx) (version string, offered []string, err error) {
	rows, err := tx.Query(ctx, `
select v.version, coalesce(v.version = a.default_version, false)
from pg_catalog.pg_available_extension_versions v
left join pg_catalog.pg_available_extensions a on a.name = v.name
where v.name = 'pgmq'`)
	if err != nil {
		return "", nil, fmt.Errorf("schema: list available pgmq extension versions: %w", err)
	}
	type candidate struct {
		version   string
		isDefault bool
	}
	cands, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (candidate, error) {
		var c candidate
		return c, r.Scan(&c.version, &c.isDefault)
	})
	if err != nil {
		return "", nil, fmt.Errorf("schema: list available pgmq extension versions: %w", err)
	}
	var newest string
	for _, c := range cands {
		offered = append(offered, c.version)
		if !versionAtLeast(c.version, pgmqMinVersion) {
			continue
		}
		if c.isDefault {
			return c.version, offered, nil
		}
		if newest == "" || compareVersions(parseVersion(c.version), parseVersion(newest)) > 0 {
			newest = c.version
		}
	}
	return newest, offered, nil
}

// installBundledPGMQ runs every file of sql/pgmq in name order.
func installBundledPGMQ(ctx context.Context, tx pgx.Tx) error {
	files, err := BundledPGMQFiles()
	if err != nil {
		return err
	}
	for _, f := range files {
		if _, err := tx.Exec(ctx, f.SQL); err != nil {
			return fmt.Errorf("schema: install bundled PGMQ layer: %s: %w", f.Name, err)
		}
	}
	return nil
}

// SQLFile is one embedded SQL file.
type SQLFile struct {
	Name string // path inside the embedded tree, e.g. "sql/pgmq/0001_schema.sql"
	SQL  string
}

// BundledPGMQFiles returns the bundled PGMQ layer's files in the order they are executed.
func BundledPGMQFiles() ([]SQLFile, error) {
	entries, err := fs.ReadDir(sqlFiles, bundledPGMQDir)
	if err != nil {
		return nil, fmt.Errorf("schema: read embedded %s: %w", bundledPGMQDir, err)
	}
	var out []SQLFile
	for _, e := range entries { // fs.ReadDir sorts by name
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		name := path.Join(bundledPGMQDir, e.Name())
		b, err := fs.ReadFile(sqlFiles, name)
		if err != nil {
			return nil, fmt.Errorf("schema: read embedded %s: %w", name, err)
		}
		out = append(out, SQLFile{Name: name, SQL: string(b)})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("schema: no SQL files embedded under %s", bundledPGMQDir)
	}
	return out, nil
}

// parseVersion turns "1.5.1" into [1 5 1]; a part that is not a number ends the parse ("1.5beta" → [1]).
func parseVersion(v string) []int {
	var out []int
	for _, p := range strings.Split(v, ".") {
		n, err := strconv.Atoi(p)
		if err != nil {
			break
		}
		out = append(out, n)
	}
	return out
}

// compareVersions compares part by part; missing parts count as 0.
func compareVersions(a, b []int) int {
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

func versionAtLeast(v string, min []int) bool {
	p := parseVersion(v)
	return len(p) > 0 && compareVersions(p, min) >= 0
}

func formatVersion(v []int) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ".")
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
