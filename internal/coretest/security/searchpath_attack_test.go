// Package security_test attacks the SQL API the way an unprivileged role could: with its own session's temporary
// objects. It proves that no function granted to a role runs attacker code with anybody else's rights.
package security_test

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/schema"
)

// attackMarker starts every notice the attacker's code raises, so the test can tell its runs from other notices.
const attackMarker = "pgflow-attack:"

// The attacker's payload. It reports (through a notice, which survives a rollback) under whose rights it runs,
// then tries to make the attacking role a superuser: that succeeds exactly when it runs as a superuser.
const evilSQL = `
create function pg_temp.evil() returns boolean language plpgsql as $evil$
begin
  raise notice '` + attackMarker + ` current_user=% session_user=%', current_user, session_user;
  begin
    execute format('alter role %I superuser', session_user);
  exception when others then
    null;
  end;
  return true;
end;
$evil$;
grant execute on function pg_temp.evil() to public;
`

// scenario is one way a role can be allowed to call pgflow functions.
type scenario struct {
	name  string
	grant func(role string) string // SQL run as superuser after roles.sql (or instead of it)
	roles bool                     // run roles.sql first
}

var scenarios = []scenario{
	{name: "pgflow_client", roles: true, grant: func(r string) string { return fmt.Sprintf("grant pgflow_client to %s", r) }},
	{name: "pgflow_worker", roles: true, grant: func(r string) string { return fmt.Sprintf("grant pgflow_worker to %s", r) }},
	{name: "broad_grant", grant: func(r string) string {
		return fmt.Sprintf(`grant usage on schema pgflow, pgmq to %[1]s;
			grant execute on all functions in schema pgflow to %[1]s;
			grant execute on all functions in schema pgmq to %[1]s`, r)
	}},
}

// rolesMu serialises roles.sql: it creates cluster-wide roles and default privileges.
var rolesMu sync.Mutex

// For every function any of the scenarios' roles may execute, in schemas pgflow and pgmq: the attacker shadows every
// type and table name the function's definition uses with temporary domains, views and tables that call its code,
// calls the function, and the test proves that the attacker's code never ran with another role's rights (and that
// the role did not become a superuser). A deliberately vulnerable control function proves the harness detects the
// attack, so the test cannot pass vacuously.
func TestNoGrantedFunctionRunsAttackerCodeWithOtherRights(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := pgtest.New(t)
			attacker := newLoginRole(t)
			fx := setupFixture(t, db.Pool)
			if sc.roles {
				rolesSQL, err := schema.OptionalSQL("roles")
				require.NoError(t, err)
				rolesMu.Lock()
				_, err = db.Pool.Exec(ctx, rolesSQL)
				rolesMu.Unlock()
				require.NoError(t, err, "roles.sql")
			}
			_, err := db.Pool.Exec(ctx, sc.grant(attacker))
			require.NoError(t, err)

			fns := grantedFunctions(t, db.Pool, attacker)
			require.NotEmpty(t, fns, "the scenario grants some function")
			if sc.name == "pgflow_client" {
				require.ElementsMatch(t, []string{"pgflow.get_run_with_states", "pgflow.pause_schedule", "pgflow.resume_schedule",
					"pgflow.schema_version", "pgflow.start_flow_with_states", "pgflow.start_flows_with_states"}, fnNames(fns))
			}

			conn, notices := attackerSession(t, db.URL, attacker)
			shadows := shadowNames(t, db.Pool, fns)
			plantShadows(t, conn, shadows)
			t.Logf("%s: %d functions, shadowed types %v, relations %v", sc.name, len(fns), shadows.types, shadows.relations)

			for _, fn := range fns {
				call := fn.call(t, fx)
				_, err := conn.Exec(ctx, call)
				if err != nil {
					t.Logf("%s: %v", fn.name, err) // refusals are fine; only where the attacker's code ran matters
				}
			}

			for _, n := range notices.all() {
				require.Contains(t, n, "current_user="+attacker+" ", "attacker code ran with other rights: %s", n)
			}
			var super bool
			require.NoError(t, db.Pool.QueryRow(ctx, "select rolsuper from pg_roles where rolname = $1", attacker).Scan(&super))
			require.False(t, super, "the attacking role became a superuser")

			// Control: the same harness against a SECURITY DEFINER function that pins search_path = '' (the
			// v0.19.0 setting) must catch the attack.
			_, err = db.Pool.Exec(ctx, `create schema attack_control;
				grant usage on schema attack_control to public;
				create function attack_control.vulnerable(p pg_catalog.text) returns void language plpgsql
				  security definer set search_path = '' as $c$
				declare v uuid := '00000000-0000-0000-0000-000000000000';
				begin
				  perform p::text;
				end $c$;
				grant execute on function attack_control.vulnerable(pg_catalog.text) to public`)
			require.NoError(t, err)
			before := len(notices.all())
			_, err = conn.Exec(ctx, `select attack_control.vulnerable('x'::pg_catalog.text)`)
			require.NoError(t, err)
			caught := notices.all()[before:]
			require.NotEmpty(t, caught, "the harness must detect a vulnerable function")
			require.NotContains(t, caught[0], "current_user="+attacker+" ", "the control ran the attacker's code as its owner")
		})
	}
}

// newLoginRole creates a login role with only the default privileges (TEMP on the database included) and drops it
// when the test ends.
func newLoginRole(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	var name string
	require.NoError(t, admin.QueryRow(ctx, `select 'attacker_' || substr(md5(random()::text), 1, 10)`).Scan(&name))
	_, err = admin.Exec(ctx, fmt.Sprintf("create role %s login nosuperuser", name))
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), fmt.Sprintf("drop owned by %[1]s; drop role if exists %[1]s", name)); err != nil {
			t.Logf("drop role %s: %v", name, err)
		}
	})
	return name
}

type noticeLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *noticeLog) add(n *pgconn.Notice) {
	if !strings.HasPrefix(n.Message, attackMarker) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, n.Message+" ") // trailing space: "current_user=x " never matches a longer name
}

func (l *noticeLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// attackerSession connects as the attacker (simple protocol, so pgx prepares nothing that could resolve a shadowed
// name on its own) and installs the payload.
func attackerSession(t *testing.T, dbURL, role string) (*pgx.Conn, *noticeLog) {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.User = url.User(role)
	cfg, err := pgx.ParseConfig(u.String())
	require.NoError(t, err)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	log := &noticeLog{}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { log.add(n) }
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(context.Background(), evilSQL)
	require.NoError(t, err)
	return conn, log
}

// fixture holds real rows for the calls' arguments: a flow with a root step, a dependent and a map, a started run
// with a claimed task, and a registered worker.
type fixture struct {
	runID, workerID string
	msgID           int64
	shape           string
}

func setupFixture(t *testing.T, pool interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}) fixture {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, `select pgflow.create_flow('sec', max_attempts => 3);
		select pgflow.add_step('sec', 'a');
		select pgflow.add_step('sec', 'b', array['a']);
		select pgflow.add_step('sec', 'm', array['a'], step_type => 'map')`)
	require.NoError(t, err)
	var fx fixture
	fx.workerID = "11111111-2222-3333-4444-555555555555"
	require.NoError(t, pool.QueryRow(ctx, `select run_id::text from pgflow.start_flow('sec', '{}')`).Scan(&fx.runID))
	_, err = pool.Exec(ctx, `select pgflow.register_worker($1::uuid, 'sec', 'attack-test')`, fx.workerID)
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `select msg_id from pgmq.read('sec', 30, 1)`).Scan(&fx.msgID))
	_, err = pool.Exec(ctx, `select * from pgflow.start_tasks('sec', array[$1::bigint], $2::uuid)`, fx.msgID, fx.workerID)
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `select pgflow._get_flow_shape('sec')::text`).Scan(&fx.shape))
	// A schedule named like the flow, so the schedule functions (called with 'sec') run their whole bodies.
	_, err = pool.Exec(ctx, `select pgflow.upsert_schedule('sec', 'sec', '* * * * *', 'UTC', '{}', since => now() - interval '1 hour')`)
	require.NoError(t, err)
	return fx
}

// function is one routine the attacker may execute.
type function struct {
	name     string // schema.name
	argNames []string
	argTypes []string // pg_catalog type names; arrays end in []
	def      string   // pg_get_functiondef: signature, settings and body
}

func fnNames(fns []function) []string {
	out := make([]string, len(fns))
	for i, f := range fns {
		out[i] = f.name
	}
	return out
}

func grantedFunctions(t *testing.T, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, role string) []function {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		select n.nspname || '.' || p.proname,
		       coalesce(p.proargnames[1:p.pronargs], array_fill(''::text, array[p.pronargs])),
		       array(select case when ty.typelem <> 0 and ty.typcategory = 'A'
		                         then (select e.typname from pg_type e where e.oid = ty.typelem) || '[]'
		                         else ty.typname::text end
		               from unnest(p.proargtypes::oid[]) with ordinality as a (oid, pos)
		               join pg_type ty on ty.oid = a.oid
		              order by a.pos),
		       pg_get_functiondef(p.oid)
		  from pg_proc p
		  join pg_namespace n on n.oid = p.pronamespace
		 where n.nspname in ('pgflow', 'pgmq')
		   and p.prokind = 'f'
		   and has_function_privilege($1, p.oid, 'execute')
		   and has_schema_privilege($1, n.oid, 'usage')
		 order by n.nspname = 'pgmq', p.proname, p.oid`, role)
	require.NoError(t, err)
	fns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (function, error) {
		var f function
		err := r.Scan(&f.name, &f.argNames, &f.argTypes, &f.def)
		return f, err
	})
	require.NoError(t, err)
	return fns
}

// call builds a call with real arguments, every literal cast to a pg_catalog-qualified type so the attacker's own
// statement resolves nothing through its shadows.
func (f function) call(t *testing.T, fx fixture) string {
	t.Helper()
	args := make([]string, len(f.argTypes))
	for i, ty := range f.argTypes {
		args[i] = argument(t, f.name, f.argNames[i], ty, fx)
	}
	return fmt.Sprintf("select %s(%s)", f.name, strings.Join(args, ", "))
}

func lit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func argument(t *testing.T, fn, name, ty string, fx fixture) string {
	t.Helper()
	elem, isArray := strings.CutSuffix(ty, "[]")
	scalar := func(name, ty string) string {
		switch {
		case name == "shape" || name == "p_shape":
			return lit(fx.shape) + "::pg_catalog.jsonb"
		case strings.Contains(name, "step_slug") || name == "dep_slug":
			return "'a'::pg_catalog.text"
		case strings.Contains(name, "worker_id"):
			return lit(fx.workerID) + "::pg_catalog.uuid"
		case strings.Contains(name, "msg_id"):
			return fmt.Sprintf("%d::pg_catalog.int8", fx.msgID)
		case strings.Contains(name, "task_index"):
			return "0::pg_catalog.int4"
		case strings.Contains(name, "attempt"):
			return "1::pg_catalog.int4"
		case name == "skip_reason" && fn == "pgflow._finish_run_steps":
			return "'run_cancelled'::pg_catalog.text"
		}
		switch ty {
		case "text", "varchar", "name":
			return "'sec'::pg_catalog." + ty
		case "int2", "int4", "int8", "numeric", "float8":
			return "1::pg_catalog." + ty
		case "bool":
			return "false::pg_catalog.bool"
		case "jsonb", "json":
			return "'{}'::pg_catalog." + ty
		case "uuid":
			return lit(fx.runID) + "::pg_catalog.uuid"
		case "timestamptz", "timestamp":
			return "pg_catalog.now()::pg_catalog." + ty
		case "interval":
			return "'1 second'::pg_catalog.interval"
		case "tid":
			return "'(0,1)'::pg_catalog.tid" // the first row of a table: the fixture's task is there
		}
		t.Fatalf("%s: no test argument for parameter %q of type %s; teach the attack test this type", fn, name, ty)
		return ""
	}
	if isArray {
		return fmt.Sprintf("array[%s]::pg_catalog.%s[]", scalar(strings.TrimSuffix(name, "s"), elem), elem)
	}
	return scalar(name, ty)
}

// shadowSet is what the attacker plants.
type shadowSet struct {
	types     []string // pg_catalog type names the definitions use
	relations []string // table names (pgflow, pgmq, pg_catalog) the definitions use
}

var identRE = regexp.MustCompile(`[a-z_][a-z0-9_$]*`)

// shadowNames collects every identifier of the functions' definitions (signature, settings and body) that names a
// shadowable pg_catalog type or a relation of schema pgflow, pgmq or pg_catalog.
func shadowNames(t *testing.T, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, fns []function) shadowSet {
	t.Helper()
	idents := map[string]bool{}
	for _, f := range fns {
		for _, id := range identRE.FindAllString(strings.ToLower(f.def), -1) {
			idents[id] = true
		}
	}
	words := make([]string, 0, len(idents))
	for w := range idents {
		words = append(words, w)
	}
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		select distinct ty.typname::text
		  from pg_type ty
		 where ty.typnamespace = 'pg_catalog'::regnamespace
		   and ty.typtype in ('b', 'r', 'm', 'e')
		   and ty.typcategory <> 'A'
		   and ty.typname = any ($1)
		 order by 1`, words)
	require.NoError(t, err)
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	rows, err = pool.Query(ctx, `
		select distinct c.relname::text
		  from pg_class c
		 where c.relnamespace in ('pgflow'::regnamespace, 'pgmq'::regnamespace, 'pg_catalog'::regnamespace)
		   and c.relkind in ('r', 'v', 'p')
		   and c.relname = any ($1)
		   and not c.relname = any ($2)
		 order by 1`, words, types)
	require.NoError(t, err)
	rels, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, types, "uuid", "the definitions use uuid")
	require.Contains(t, types, "jsonb", "the definitions use jsonb")
	return shadowSet{types: types, relations: rels}
}

// plantShadows creates, in the attacker's temporary schema, a domain over every type whose CHECK runs the payload,
// and for every relation a view (or, where the attacker cannot see the original, a table) whose reads, writes and
// row checks run it.
func plantShadows(t *testing.T, conn *pgx.Conn, s shadowSet) {
	t.Helper()
	ctx := context.Background()
	try := func(what, sql string) bool {
		_, err := conn.Exec(ctx, "savepoint plant; "+sql+"; release savepoint plant")
		if err != nil {
			_, _ = conn.Exec(ctx, "rollback to savepoint plant; release savepoint plant")
			t.Logf("cannot plant %s: %v", what, err)
			return false
		}
		return true
	}
	_, err := conn.Exec(ctx, "begin")
	require.NoError(t, err)
	planted := 0
	for _, ty := range s.types {
		if try("domain "+ty, fmt.Sprintf(`create domain pg_temp.%[1]s as pg_catalog.%[1]s check (pg_temp.evil())`, ty)) {
			planted++
		}
	}
	sort.Strings(s.relations)
	for _, rel := range s.relations {
		trigger := fmt.Sprintf(`create function pg_temp.evil_trg_%[1]s() returns trigger language plpgsql as $t$
			begin perform pg_temp.evil(); return null; end $t$`, rel)
		if try("view "+rel, fmt.Sprintf(`create view pg_temp.%[1]s as select o.* from pg_catalog.%[1]s o where pg_temp.evil()`, rel)) ||
			try("view "+rel, fmt.Sprintf(`create view pg_temp.%[1]s as select o.* from pgflow.%[1]s o where pg_temp.evil() with check option`, rel)) ||
			try("view "+rel, fmt.Sprintf(`create view pg_temp.%[1]s as select o.* from pgmq.%[1]s o where pg_temp.evil() with check option`, rel)) {
			_, _ = conn.Exec(ctx, fmt.Sprintf("grant all on pg_temp.%s to public", rel))
			planted++
			continue
		}
		if try("table "+rel, fmt.Sprintf(`create table pg_temp.%[1]s (x int);
				insert into pg_temp.%[1]s values (1);
				%[2]s;
				create trigger evil_w before insert or update or delete or truncate on pg_temp.%[1]s
				  for each statement execute function pg_temp.evil_trg_%[1]s();
				alter table pg_temp.%[1]s enable row level security;
				alter table pg_temp.%[1]s force row level security;
				create policy evil_r on pg_temp.%[1]s using (pg_temp.evil());
				grant all on pg_temp.%[1]s to public`, rel, trigger)) {
			planted++
		}
	}
	_, err = conn.Exec(ctx, "commit")
	require.NoError(t, err)
	require.GreaterOrEqual(t, planted, len(s.types), "every type is shadowed")
}
