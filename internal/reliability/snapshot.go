package reliability

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// SnapshotSchemas are the schemas whose every table Snapshot digests.
var SnapshotSchemas = []string{"pgflow", "pgmq", "realtime", "reliability"}

// Snapshot digests the content of every table of SnapshotSchemas: table name → "rows:md5". Comparing two
// snapshots tells whether anything was written in between. Reading a PGMQ message changes its read_ct and vt
// but not its content, so queue tables are digested by (msg_id, message, headers) only; sequences are not
// included (a rolled-back insert may consume a value). Tables named in ignore ("pgflow.workers") are skipped.
func Snapshot(ctx context.Context, db sqlapi.DBTX, ignore ...string) (map[string]string, error) {
	rows, err := db.Query(ctx, `
		select c.relnamespace::regnamespace::text, c.relname::text
		  from pg_class as c
		 where c.relkind in ('r', 'p') and c.relnamespace::regnamespace::text = any ($1::text[])
		 order by 1, 2`, SnapshotSchemas)
	if err != nil {
		return nil, fmt.Errorf("reliability: list tables: %w", err)
	}
	type table struct{ schema, name string }
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		err := r.Scan(&t.schema, &t.name)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("reliability: list tables: %w", err)
	}
	snap := make(map[string]string, len(tables))
	for _, t := range tables {
		full := t.schema + "." + t.name
		if slices.Contains(ignore, full) {
			continue
		}
		ident := pgx.Identifier{t.schema, t.name}.Sanitize()
		row := "x::text"
		if t.schema == "pgmq" && (strings.HasPrefix(t.name, "q_") || strings.HasPrefix(t.name, "a_")) {
			row = "jsonb_build_array(x.msg_id, x.message, x.headers)::text"
		}
		var n int64
		var digest string
		err := db.QueryRow(ctx, fmt.Sprintf(
			`select count(*), md5(coalesce(string_agg(%s, e'\n' order by %s), '')) from %s as x`, row, row, ident)).
			Scan(&n, &digest)
		if err != nil {
			return nil, fmt.Errorf("reliability: digest %s: %w", full, err)
		}
		snap[full] = fmt.Sprintf("%d:%s", n, digest)
	}
	return snap, nil
}
