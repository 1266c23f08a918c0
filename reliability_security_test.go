package pgflow_test

// Security (issue 6): the role model of schema/sql/optional/roles.sql (owner, worker, client) holds against real
// sessions, with the bundled PGMQ layer and with the real pgmq extension; no secret reaches handlers, logs or events.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/internal/reliability"
	"github.com/pgflow-go/pgflow/schema"
)

// roleURL returns db's URL for login role user.
func roleURL(t *testing.T, db *pgtest.DB, user string) string {
	t.Helper()
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.User = url.User(user)
	return u.String()
}

// loginRoles creates login roles that are members of the given group roles and drops them when the test ends
// (after its database is gone). Call it before pgtest.New.
func loginRoles(t *testing.T, groups ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	names := map[string]string{}
	suffix := strings.ReplaceAll(reliability.NewUUID()[:8], "-", "")
	for _, g := range groups {
		// The group roles come from roles.sql; create them here too so the login roles can join them.
		_, err := admin.Exec(ctx, fmt.Sprintf(`do $$ begin create role %s nologin; exception when duplicate_object or unique_violation then null; end $$`, g))
		require.NoError(t, err)
		name := "rel_" + strings.TrimPrefix(g, "pgflow_") + "_" + suffix
		_, err = admin.Exec(ctx, fmt.Sprintf(`create role %s login in role %s`, name, g))
		require.NoError(t, err)
		names[g] = name
		t.Cleanup(func() {
			_, err := admin.Exec(context.Background(), fmt.Sprintf(`drop role if exists %s`, name))
			if err != nil {
				t.Logf("drop role %s: %v", name, err)
			}
		})
	}
	return names
}

// requireDenied fails unless err is a privilege error (42501).
func requireDenied(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, what)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%s: %v", what, err)
	require.Equal(t, "42501", pgErr.Code, "%s: %v", what, err)
}

// The role model holds for real sessions: a client role starts, reads and waits for runs but can neither read a
// table nor claim, complete or fail tasks; a worker role runs a real worker to completion but cannot create,
// change or delete definitions (a worker whose flow is missing fails at startup); the owner role compiles new
// flows, whose queues the worker role can then use.
func TestSecurityRoleModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	roles := loginRoles(t, "pgflow_owner", "pgflow_worker", "pgflow_client")
	db := relDB(t)
	compileRelFlow(t, db.Pool, reliability.OneStepFlow)
	rolesSQL, err := schema.OptionalSQL("roles")
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, rolesSQL)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, rolesSQL) // idempotent
	require.NoError(t, err)
	// The test's capture tables are not part of the model; the worker's recorder writes one.
	_, err = db.Pool.Exec(ctx, `grant usage on schema reliability to pgflow_worker;
		grant insert, select (id) on reliability.invocations to pgflow_worker`)
	require.NoError(t, err)

	clientPool := newPool(t, roleURL(t, db, roles["pgflow_client"]), 4)
	workerPool := newPool(t, roleURL(t, db, roles["pgflow_worker"]), 14)
	ownerPool := newPool(t, roleURL(t, db, roles["pgflow_owner"]), 2)

	// Client: starts, reads and waits.
	client := newClient(t, clientPool, &pgflow.ClientConfig{PollInterval: 200 * time.Millisecond})
	defer client.Close()
	run, err := client.StartRunJSON(ctx, reliability.OneStepFlow, json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	got, err := client.GetRun(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, pgflow.RunStarted, got.Status)

	before, err := reliability.Snapshot(ctx, db.Pool)
	require.NoError(t, err)
	workerID := reliability.NewUUID()
	for _, stmt := range []string{
		`select * from pgflow.runs`,
		`select * from pgflow.step_tasks`,
		`select * from pgflow.flows`,
		`select * from pgflow.workers`,
		`select * from pgmq.q_rel_one`,
		`select * from pgmq.read('rel_one', 30, 10)`,
		`select * from reliability.invocations`,
		`select pgflow.start_flow('rel_one', '{}'::jsonb)`,
		`select pgflow.register_worker('` + workerID + `'::uuid, 'rel_one', 'evil')`,
		`select * from pgflow.start_tasks('rel_one', array[1::bigint], '` + workerID + `'::uuid)`,
		`select * from pgflow.complete_task('` + run.ID + `'::uuid, 'work', 0, '{"forged": true}'::jsonb)`,
		`select * from pgflow.fail_task('` + run.ID + `'::uuid, 'work', 0, 'forged')`,
		`select pgflow.requeue_stalled_tasks()`,
		`select pgflow.create_flow('evil')`,
		`update pgflow.step_tasks set status = 'completed'`,
	} {
		_, err := clientPool.Exec(ctx, stmt)
		requireDenied(t, err, "client: "+stmt)
	}

	// Worker: cannot change definitions.
	for _, stmt := range []string{
		`select pgflow.create_flow('evil')`,
		`select pgflow.add_step('rel_one', 'evil')`,
		`select pgflow.delete_flow_and_data('rel_one')`,
		`select pgflow._create_flow_from_shape('evil', '{"steps": []}'::jsonb)`,
		`select pgflow.ensure_flow_compiled('evil', '{"steps": []}'::jsonb)`,
		`select pgflow.ensure_flow_compiled('rel_one', '{"steps": []}'::jsonb, true)`,
		`insert into pgflow.flows (flow_slug) values ('evil')`,
		`update pgflow.flows set opt_timeout = 1`,
		`update pgflow.steps set opt_max_attempts = 100`,
		`delete from pgflow.deps`,
		`delete from pgflow.runs`,
		`create table pgflow.evil (id int)`,
		`create table pgmq.evil (id int)`,
		`drop table pgflow.runs`,
		`alter table pgflow.steps add column evil int`,
		`select pgmq.create('evil')`,
		`select * from reliability.invocations`,
	} {
		_, err := workerPool.Exec(ctx, stmt)
		require.Error(t, err, "worker: "+stmt)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "worker: %s: %v", stmt, err)
		require.Contains(t, []string{"42501"}, pgErr.Code, "worker: %s: %v", stmt, err)
	}
	after, err := reliability.Snapshot(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, before, after, "denied statements changed nothing")

	// Worker: a real worker verifies its flow, runs the client's run, heartbeats and stops.
	logger, _ := newRelLogger(t, "worker")
	flow := relFlow(t, reliability.OneStepFlow, reliability.Handlers{Recorder: reliability.DBRecorder{DB: workerPool}})
	cfg := relWorkerConfig(logger)
	cfg.MaintenanceInterval = 300 * time.Millisecond
	w := runInProc(t, workerPool, flow, cfg)
	waitCtx, cancel := context.WithTimeout(ctx, relWait)
	defer cancel()
	done, err := client.WaitRun(waitCtx, run.ID)
	require.NoError(t, err)
	require.Equal(t, pgflow.RunCompleted, done.Status)

	// Worker: may apply its code's message retention to a flow (and nothing else of a definition, above).
	var status, retention string
	require.NoError(t, workerPool.QueryRow(ctx, `select pgflow.ensure_flow_compiled('rel_one', pgflow._get_flow_shape('rel_one'),
		message_retention => 'delete') ->> 'status'`).Scan(&status))
	require.Equal(t, "verified", status)
	require.NoError(t, db.Pool.QueryRow(ctx, `select message_retention from pgflow.flows where flow_slug = 'rel_one'`).Scan(&retention))
	require.Equal(t, "delete", retention)
	require.NoError(t, w.stop())

	// A worker whose flow is not in the database cannot compile it.
	missing := relFlow(t, reliability.MapFlow, reliability.Handlers{Recorder: reliability.DBRecorder{DB: workerPool}})
	mw, err := newFlowWorker(t, workerPool, missing, cfg)
	require.NoError(t, err)
	runErr := mw.Run(ctx)
	requireDenied(t, runErr, "worker compiling a missing flow")
	require.EqualValues(t, 0, queryInt(t, db.Pool, `select count(*) from pgflow.flows where flow_slug = $1`, reliability.MapFlow))

	// Owner: compiles the new flow; the worker role can then run it and the client start it. pgflow_owner creates
	// the flow's queue with the bundled layer (or a pgmq extension it owns). With a pgmq extension another role owns,
	// only that role may create queues (pgmq.create adds their tables to the extension), so it compiles, and
	// roles.sql's default privileges give pgflow_owner and pgflow_worker the new queue's tables.
	shape, err := missing.Shape()
	require.NoError(t, err)
	compileAs := func(pool *pgxpool.Pool, role string) error {
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		_, err = conn.Exec(ctx, `set role `+pgx.Identifier{role}.Sanitize())
		require.NoError(t, err)
		defer func() {
			_, err := conn.Exec(ctx, `reset role`)
			require.NoError(t, err)
		}()
		var status json.RawMessage
		if err := conn.QueryRow(ctx, `select pgflow.ensure_flow_compiled($1, $2::jsonb)`, reliability.MapFlow, string(shape)).Scan(&status); err != nil {
			return err
		}
		require.Contains(t, string(status), `"compiled"`)
		return nil
	}
	var extOwner *string
	require.NoError(t, db.Pool.QueryRow(ctx,
		`select (select pg_get_userbyid(e.extowner)::text from pg_extension as e where e.extname = 'pgmq')`).Scan(&extOwner))
	if extOwner != nil && *extOwner != "pgflow_owner" {
		err := compileAs(ownerPool, "pgflow_owner")
		requireDenied(t, err, "pgflow_owner creating a queue of a pgmq extension it does not own")
		require.ErrorContains(t, err, "must be owner of extension pgmq")
		require.EqualValues(t, 0, queryInt(t, db.Pool, `select count(*) from pgflow.flows where flow_slug = $1`, reliability.MapFlow))
		require.NoError(t, compileAs(db.Pool, *extOwner))
	} else {
		require.NoError(t, compileAs(ownerPool, "pgflow_owner"))
	}
	mw2 := runInProc(t, workerPool, missing, cfg)
	mapRun, err := client.StartRunJSON(ctx, reliability.MapFlow, json.RawMessage(`{"items": 3}`), nil)
	require.NoError(t, err)
	done, err = client.WaitRun(waitCtx, mapRun.ID)
	require.NoError(t, err)
	require.Equal(t, pgflow.RunCompleted, done.Status)
	require.NoError(t, mw2.stop())
}

// secretWalker reports whether a value graph (followed through pointers, interfaces, structs, slices and maps,
// unexported fields included; functions and channels cannot be looked into) contains a string holding secret.
// It does not look into what other goroutines change under locks or atomics while it walks (sync and
// sync/atomic values, a context's set of children) nor into io.Writers (sinks such as a logger's output, which
// the log checks cover), so it can run under the race detector.
type secretWalker struct {
	secret  string
	visited map[uintptr]bool
	steps   int
	found   []string
}

var writerType = reflect.TypeFor[io.Writer]()

func (w *secretWalker) walk(v reflect.Value, path string) {
	w.steps++
	if w.steps > 500000 || len(w.found) > 0 || !v.IsValid() {
		return
	}
	if pkg := v.Type().PkgPath(); pkg == "sync" || pkg == "sync/atomic" {
		return
	}
	if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && !v.IsNil() && v.Type().Implements(writerType) {
		return
	}
	if v.Kind() == reflect.Interface && !v.IsNil() && v.Elem().Type().Implements(writerType) {
		return
	}
	if v.Kind() == reflect.Map && v.Type().Key().PkgPath() == "context" {
		return
	}
	switch v.Kind() {
	case reflect.String:
		if strings.Contains(v.String(), w.secret) {
			w.found = append(w.found, path)
		}
	case reflect.Pointer, reflect.Map, reflect.Slice:
		if v.IsNil() {
			return
		}
		if v.Kind() != reflect.Slice || v.Cap() > 0 {
			p := v.Pointer()
			key := p ^ uintptr(v.Kind())
			if w.visited[key] {
				return
			}
			w.visited[key] = true
		}
		switch v.Kind() {
		case reflect.Pointer:
			w.walk(v.Elem(), path)
		case reflect.Map:
			it := v.MapRange()
			for it.Next() {
				w.walk(it.Key(), path+"[key]")
				w.walk(it.Value(), path+"[value]")
			}
		case reflect.Slice:
			if v.Type().Elem().Kind() == reflect.Uint8 {
				if strings.Contains(string(v.Bytes()), w.secret) {
					w.found = append(w.found, path)
				}
				return
			}
			for i := range v.Len() {
				w.walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
			}
		}
	case reflect.Interface:
		if !v.IsNil() {
			w.walk(v.Elem(), path)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			w.walk(v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	case reflect.Array:
		for i := range v.Len() {
			w.walk(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

func containsSecret(v any, secret string) []string {
	w := &secretWalker{secret: secret, visited: map[uintptr]bool{}}
	w.walk(reflect.ValueOf(v), reflect.TypeOf(v).String())
	return w.found
}

// No secret reaches handlers, logs or events. A worker whose database URL carries a password (and whose
// environment holds a secret) runs tasks, fails some, loses its connections and is restarted; then: the handler's
// Task and context hold neither the password nor the URL (checked by walking every reachable value); the
// worker's logs (debug level), every notification on the pgflow channels, every event payload and every row of
// the pgflow, pgmq and capture tables contain neither; and a worker that cannot connect reports an error without
// them.
func TestSecurityNoSecretsInHandlersLogsEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := relDB(t)
	compileRelFlow(t, db.Pool, reliability.OneStepFlow)
	const password = "S3cr3t-P4ssw0rd-b9e1"
	const envSecret = "ENV-SECRET-77c1a0"
	// The test cluster trusts local connections, so the password is accepted and never needed: what matters is
	// that the worker holds it.
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), password)
	secretURL := u.String()

	// Everything published on the pgflow channels while the test runs.
	listener, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer listener.Close(ctx)
	_, err = listener.Exec(ctx, `listen pgflow`)
	require.NoError(t, err)
	var notes []string
	var notesMu sync.Mutex
	listenCtx, stopListen := context.WithCancel(ctx)
	listenDone := make(chan struct{})
	go func() {
		defer close(listenDone)
		for {
			n, err := listener.WaitForNotification(listenCtx)
			if err != nil {
				return
			}
			notesMu.Lock()
			notes = append(notes, n.Payload)
			notesMu.Unlock()
		}
	}()

	// In-process worker: handlers walk everything they can reach.
	type seen struct{ task, ctx []string }
	var findings []seen
	var findMu sync.Mutex
	inspect := func(hctx context.Context, t any) {
		s := seen{}
		for _, secret := range []string{password, secretURL, envSecret} {
			s.task = append(s.task, containsSecret(t, secret)...)
			s.ctx = append(s.ctx, containsSecret(hctx, secret)...)
		}
		findMu.Lock()
		findings = append(findings, s)
		findMu.Unlock()
	}
	secretPool := newPool(t, secretURL, 8)
	f := pgflow.NewFlow[reliability.Input]("rel_secret", reliability.FlowOptions()...)
	pgflow.Step(f, "inspect", func(hctx context.Context, task *pgflow.Task[reliability.Input]) (string, error) {
		in, err := task.FlowInput(hctx)
		if err != nil {
			return "", err
		}
		inspect(hctx, task)
		if task.Attempt <= in.FailAttempts {
			return "", fmt.Errorf("failing attempt %d on purpose", task.Attempt)
		}
		return "ok", nil
	})
	logger, logs := newRelLogger(t, "in-process worker")
	cfg := relWorkerConfig(logger)
	w := runInProc(t, secretPool, f, cfg)
	waitRegistered(t, db.Pool, w.w.ID())

	// Subprocess worker: URL with the password in its environment, plus another secret variable.
	bin := reliability.BuildTestWorker(t)
	proc := reliability.StartProcess(t, bin, reliability.ProcConfig{
		DatabaseURL: secretURL, Flow: reliability.OneStepFlow, Env: []string{"RELIABILITY_UNRELATED_SECRET=" + envSecret},
	})
	waitRegistered(t, db.Pool, proc.Config.WorkerID)

	_, err = db.Pool.Exec(ctx, `select pgflow.start_flow('rel_secret', '{"fail_attempts": 1}'::jsonb) from generate_series(1, 3)`)
	require.NoError(t, err)
	startRelRuns(t, db.Pool, reliability.OneStepFlow, reliability.Input{FailAttempts: 1}, 3)
	// Kill every worker connection once: the workers log the errors and carry on.
	eventually(t, relWait, "the first attempts to fail", func() bool {
		return queryInt(t, db.Pool, `select count(*) from pgflow.step_tasks where error_message is not null`) >= 6
	})
	// The subprocess's LISTEN session must be up before the kill, so that its loss is always logged
	// (a poll or heartbeat in flight at that moment is a matter of timing; the held LISTEN connection is not).
	eventually(t, relWait, "the subprocess to record its listening session", func() bool {
		return queryInt(t, db.Pool, `select count(*) from pgflow.workers where worker_id = $1::uuid and listener_pid is not null`, proc.Config.WorkerID) == 1
	})
	_, err = db.Pool.Exec(ctx, `select pg_terminate_backend(pid) from pg_stat_activity
	                             where datname = $1 and pid <> pg_backend_pid() and backend_type = 'client backend'
	                               and application_name not like 'pgflow-go client%'`, db.Name)
	require.NoError(t, err)
	eventually(t, relWait, "every run to complete", func() bool {
		return queryInt(t, db.Pool, `select count(*) from pgflow.runs where status <> 'completed'`) == 0 &&
			queryInt(t, db.Pool, `select count(*) from pgflow.runs`) == 6
	})
	require.NoError(t, w.stop())
	require.NoError(t, proc.Stop(relWait))

	// A worker that cannot connect (unknown database) says so without the password.
	u.Path = "/no_such_database"
	bad := reliability.StartProcess(t, bin, reliability.ProcConfig{DatabaseURL: u.String(), Flow: reliability.OneStepFlow})
	select {
	case <-bad.Done():
	case <-time.After(relWait):
		require.NoError(t, bad.Signal(syscall.SIGKILL))
		t.Fatal("the worker with an unknown database did not exit")
	}
	require.Error(t, bad.ExitErr())
	require.Contains(t, bad.Output(), "no_such_database")

	stopListen()
	<-listenDone

	findMu.Lock()
	require.GreaterOrEqual(t, len(findings), 6, "every attempt inspected its task and context")
	for _, s := range findings {
		require.Empty(t, s.task, "the handler's Task holds a secret")
		require.Empty(t, s.ctx, "the handler's context holds a secret")
	}
	findMu.Unlock()

	texts := map[string]string{
		"in-process worker logs": logs.String(),
		"subprocess logs":        proc.Output(),
		"failed startup output":  bad.Output(),
	}
	notesMu.Lock()
	texts["notifications"] = strings.Join(notes, "\n")
	require.NotEmpty(t, notes)
	notesMu.Unlock()
	rows, err := db.Pool.Query(ctx, `
		select c.relnamespace::regnamespace::text || '.' || c.relname
		  from pg_class as c
		 where c.relkind = 'r' and c.relnamespace::regnamespace::text in ('pgflow', 'pgmq', 'realtime', 'reliability')`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, tbl := range tables {
		var dump string
		require.NoError(t, db.Pool.QueryRow(ctx, fmt.Sprintf(`select coalesce(string_agg(x::text, e'\n'), '') from %s as x`, tbl)).Scan(&dump))
		texts["table "+tbl] = dump
	}
	require.Contains(t, texts["subprocess logs"], "notify: listener connection lost", "the subprocess logged the lost connection")
	require.Contains(t, texts["table pgflow.step_tasks"], "failing attempt 1 on purpose")
	for where, text := range texts {
		for _, secret := range []string{password, envSecret, secretURL} {
			require.NotContains(t, text, secret, "%s leaks a secret", where)
		}
	}
}
