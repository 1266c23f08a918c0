package upgrade_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/schema"
)

// v016 is a database migrated to v0.16.0 only, with a dedicated connection for the migrator.
type v016 struct {
	*pgtest.DB
	conn *pgx.Conn
}

func newV016(t *testing.T) v016 { return newAt(t, "v0.16.0") }

// newAt returns a database migrated to version only (v016 is the oldest such database the tests use), with a
// dedicated connection for the migrator.
func newAt(t *testing.T, version string) v016 {
	t.Helper()
	db := pgtest.NewWithPGMQ(t)
	conn, err := pgx.Connect(fx.Ctx(t), db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	report, err := schema.NewMigrator(conn, nil).Up(fx.Ctx(t), version)
	require.NoError(t, err)
	require.Equal(t, version, report.Current)
	return v016{DB: db, conn: conn}
}

// upTo applies the migrations up to version.
func (d v016) upTo(t *testing.T, version string) (*schema.UpReport, error) {
	t.Helper()
	return schema.NewMigrator(d.conn, nil).Up(fx.Ctx(t), version)
}

// upgrade applies the v0.17.0 migration, as `pgflow migrate up --to v0.17.0` does (later migrations have
// their own tests).
func (d v016) upgrade(t *testing.T) (*schema.UpReport, error) {
	t.Helper()
	return schema.NewMigrator(d.conn, nil).Up(fx.Ctx(t), "v0.17.0")
}

func (d v016) mustUpgrade(t *testing.T) {
	t.Helper()
	report, err := d.upgrade(t)
	require.NoError(t, err)
	require.Equal(t, "v0.17.0", report.Current)
	require.Len(t, report.Applied, 1)
}

// claim016 reads up to qty messages of queue and claims them the way a v0.16.0 worker does: three named arguments.
func claim016(t *testing.T, db fx.DB, flow, queue string, qty int) []int64 {
	t.Helper()
	fx.EnsureWorker(t, db, queue, fx.DefaultWorker)
	ids := fx.ReadMessages(t, db, queue, 30, qty)
	return fx.Val[[]int64](t, db, `select coalesce(array_agg(msg_id order by msg_id), '{}')
		from pgflow.start_tasks(flow_slug => $1::text, msg_ids => $2::bigint[], worker_id => $3::uuid)`,
		flow, ids, fx.DefaultWorker)
}

func complete(t *testing.T, db fx.DB, runID, step string, index int, output string) {
	t.Helper()
	fx.Exec(t, db, "select count(*) from pgflow.complete_task($1, $2, $3, $4::jsonb)", runID, step, index, output)
}

func fail(t *testing.T, db fx.DB, runID, step string, index int, message string) {
	t.Helper()
	fx.Exec(t, db, "select count(*) from pgflow.fail_task($1, $2, $3, $4)", runID, step, index, message)
}

func count(t *testing.T, db fx.DB, sql string, args ...any) int {
	t.Helper()
	return fx.Val[int](t, db, `select count(*)::int from (`+sql+`) as c`, args...)
}

// dumpAll is pg_dump of the whole database, schema and data of every schema, with the lines that differ between two
// dumps of the same database (comments, \restrict keys) removed.
func dumpAll(t *testing.T, url string) string {
	t.Helper()
	out, err := exec.Command(pgtest.BinPath(t, "pg_dump"), "--dbname="+url).CombinedOutput()
	require.NoError(t, err, "pg_dump: %s", out)
	var kept []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "--") || strings.HasPrefix(line, `\restrict`) || strings.HasPrefix(line, `\unrestrict`) {
			continue
		}
		kept = append(kept, line)
	}
	return strings.Join(kept, "\n")
}
