package pgcluster

// A throwaway PgBouncer in front of a PostgreSQL server, for the tests that prove pgflow-go works behind a pooler
// in transaction mode (docs/deploy.md). Like a cluster, it lives in a temporary directory, listens on a free
// loopback port and is stopped by a reaper process when the owning process exits, however it exits.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const bouncerDirPrefix = "pgflow-pgbouncer-"

// PgBouncerInstallHint is what to run when the pgbouncer binary is missing.
const PgBouncerInstallHint = "apt-get install pgbouncer"

// ErrPgBouncerMissing is wrapped by the error of PgBouncerBinary (and StartPgBouncer) when pgbouncer is not
// installed.
var ErrPgBouncerMissing = errors.New("pgbouncer is not installed")

// PgBouncerOptions configure a throwaway PgBouncer.
type PgBouncerOptions struct {
	// ServerURL is a postgres:// URL of the PostgreSQL server to pool (its host and port; a password in it is
	// used for the server connections). Required. Every database of that server is reachable through the bouncer
	// under its own name.
	ServerURL string
	// Users may connect (auth_type trust: no password asked). Default: the user of ServerURL, or "postgres".
	Users []string
	// PoolMode is pool_mode: "transaction" (default), "session" or "statement".
	PoolMode string
	// DefaultPoolSize is default_pool_size, the server connections per database and user. Default: 10.
	DefaultPoolSize int
	// MaxPreparedStatements is max_prepared_statements (protocol-level named prepared statements in transaction
	// mode, PgBouncer ≥ 1.21). 0: 200 when the installed version supports it, else off; negative: off (the
	// setting is then not written at all). A positive value with an older PgBouncer is an error.
	MaxPreparedStatements int
}

// PgBouncer is a running throwaway PgBouncer owned by this process.
type PgBouncer struct {
	dir      string
	port     int
	pid      int
	version  [3]int
	prepared int // max_prepared_statements in effect (0: off)
	user     string
}

// PgBouncerBinary locates the pgbouncer program (PATH, then /usr/sbin, where Debian puts it).
func PgBouncerBinary() (string, error) {
	return findPgBouncer([]string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"})
}

func findPgBouncer(candidates []string) (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range candidates {
		if IsExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: pgbouncer not found in PATH or /usr/sbin; install it (Debian: %s)", ErrPgBouncerMissing,
		PgBouncerInstallHint)
}

var bouncerVersionRE = regexp.MustCompile(`(?i)pgbouncer(?:\s+version)?\s+(\d+)\.(\d+)(?:\.(\d+))?`)

// PgBouncerVersion returns the installed PgBouncer's version (major, minor, patch) from `pgbouncer --version`.
func PgBouncerVersion() ([3]int, error) {
	bin, err := PgBouncerBinary()
	if err != nil {
		return [3]int{}, err
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		return [3]int{}, fmt.Errorf("pgcluster: %s --version: %w\n%s", bin, err, out)
	}
	return parseBouncerVersion(string(out))
}

func parseBouncerVersion(out string) ([3]int, error) {
	m := bouncerVersionRE.FindStringSubmatch(out)
	if m == nil {
		return [3]int{}, fmt.Errorf("pgcluster: cannot read a version in `pgbouncer --version` output %q", strings.TrimSpace(out))
	}
	var v [3]int
	for i := range 3 {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return v, nil
}

// bouncerSupportsPrepared reports whether a PgBouncer version has max_prepared_statements (1.21.0 and later).
func bouncerSupportsPrepared(v [3]int) bool {
	return v[0] > 1 || (v[0] == 1 && v[1] >= 21)
}

// Version is the PgBouncer's version, e.g. "1.18.0".
func (b *PgBouncer) Version() string {
	return fmt.Sprintf("%d.%d.%d", b.version[0], b.version[1], b.version[2])
}

// MaxPreparedStatements is the max_prepared_statements in effect: 0 when PgBouncer does not keep named prepared
// statements across transactions (older than 1.21, or turned off), in which case pgx's default
// QueryExecModeCacheStatement breaks and a pool needs default_query_exec_mode=exec (docs/deploy.md).
func (b *PgBouncer) MaxPreparedStatements() int { return b.prepared }

// Port is the loopback port the PgBouncer listens on.
func (b *PgBouncer) Port() int { return b.port }

// Dir is the PgBouncer's run directory (pgbouncer.ini, users.txt, pgbouncer.log).
func (b *PgBouncer) Dir() string { return b.dir }

// URL returns a connection URL for database db through the PgBouncer, as the first of Options.Users.
func (b *PgBouncer) URL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", url.PathEscape(b.user), b.port, url.PathEscape(db))
}

// Log returns what the PgBouncer logged so far (for failure messages).
func (b *PgBouncer) Log() string {
	raw, _ := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
	return string(bytes.TrimSpace(raw))
}

// Stop shuts the PgBouncer down at once and removes its directory.
func (b *PgBouncer) Stop() {
	_ = syscall.Kill(b.pid, syscall.SIGINT) // immediate shutdown
	waitGone(b.pid, 10*time.Second)
	_ = syscall.Kill(b.pid, syscall.SIGKILL)
	_ = os.RemoveAll(b.dir)
}

// StartPgBouncer starts a PgBouncer in front of opts.ServerURL that lives at most as long as this process. It
// fails, naming `apt-get install pgbouncer`, when the program is missing.
func StartPgBouncer(ctx context.Context, opts PgBouncerOptions) (*PgBouncer, error) {
	removeBouncerLeftovers()
	bin, err := PgBouncerBinary()
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	version, err := PgBouncerVersion()
	if err != nil {
		return nil, err
	}
	server, err := url.Parse(opts.ServerURL)
	if err != nil || (server.Scheme != "postgres" && server.Scheme != "postgresql") {
		return nil, fmt.Errorf("pgcluster: PgBouncerOptions.ServerURL must be a postgres:// URL, got %q", opts.ServerURL)
	}
	host, port := server.Hostname(), server.Port()
	if host == "" {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "5432"
	}
	users := opts.Users
	if len(users) == 0 {
		u := "postgres"
		if server.User != nil && server.User.Username() != "" {
			u = server.User.Username()
		}
		users = []string{u}
	}
	poolMode := opts.PoolMode
	if poolMode == "" {
		poolMode = "transaction"
	}
	poolSize := opts.DefaultPoolSize
	if poolSize <= 0 {
		poolSize = 10
	}
	prepared := opts.MaxPreparedStatements
	switch {
	case prepared == 0 && bouncerSupportsPrepared(version):
		prepared = 200
	case prepared > 0 && !bouncerSupportsPrepared(version):
		return nil, fmt.Errorf("pgcluster: max_prepared_statements = %d needs PgBouncer 1.21 or newer; this one is %d.%d.%d",
			prepared, version[0], version[1], version[2])
	case prepared < 0 || !bouncerSupportsPrepared(version):
		prepared = 0
	}

	cred, err := serverUser() // PgBouncer, like PostgreSQL, refuses to run as root
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", bouncerDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: create PgBouncer directory: %w", err)
	}
	if err := writeOwner(dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgcluster: write owner.pid: %w", err)
	}
	var auth strings.Builder
	for _, u := range users {
		fmt.Fprintf(&auth, "%q \"\"\n", u)
	}
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(auth.String()), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgcluster: write users.txt: %w", err)
	}
	// Every database name maps to the same database on the server (the "*" fallback entry).
	dbEntry := fmt.Sprintf("* = host=%s port=%s", host, port)
	if server.User != nil {
		if pw, ok := server.User.Password(); ok {
			dbEntry += " password=" + quoteBouncerValue(pw)
		}
	}
	b := &PgBouncer{dir: dir, version: version, prepared: prepared, user: users[0]}
	for attempt := 0; ; attempt++ {
		b.port, err = freePort()
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		var ini strings.Builder
		fmt.Fprintf(&ini, "[databases]\n%s\n\n[pgbouncer]\n", dbEntry)
		fmt.Fprintf(&ini, "listen_addr = 127.0.0.1\nlisten_port = %d\nunix_socket_dir =\n", b.port)
		fmt.Fprintf(&ini, "auth_type = trust\nauth_file = %s\nadmin_users = %s\n", filepath.Join(dir, "users.txt"),
			strings.Join(users, ","))
		fmt.Fprintf(&ini, "pool_mode = %s\ndefault_pool_size = %d\nmax_client_conn = 500\n", poolMode, poolSize)
		fmt.Fprintf(&ini, "logfile = %s\npidfile = %s\n", filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
		// Drivers send application_name (tracked by PgBouncer itself); these others are accepted and ignored.
		ini.WriteString("ignore_startup_parameters = extra_float_digits\n")
		ini.WriteString("log_connections = 0\nlog_disconnections = 0\n")
		if prepared > 0 {
			fmt.Fprintf(&ini, "max_prepared_statements = %d\n", prepared)
		}
		if err := os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini.String()), 0o644); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgcluster: write pgbouncer.ini: %w", err)
		}
		if err := chownTree(dir, cred); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgcluster: hand %s to the PgBouncer user: %w", dir, err)
		}
		err = b.start(ctx, bin, cred)
		if err == nil || attempt == 3 || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return b, nil
}

// quoteBouncerValue quotes a connection-string value of pgbouncer.ini's [databases] section.
func quoteBouncerValue(v string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), "'", `\'`) + "'"
}

func (b *PgBouncer) start(ctx context.Context, bin string, cred *syscall.Credential) error {
	logPath := filepath.Join(b.dir, "pgbouncer.log")
	_ = os.Remove(logPath)
	stderr := &bytes.Buffer{}
	cmd := exec.Command(bin, filepath.Join(b.dir, "pgbouncer.ini"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setsid: true}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgcluster: start pgbouncer: %w", err)
	}
	b.pid = cmd.Process.Pid
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	if err := b.startReaper(cred); err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("pgcluster: pgbouncer on port %d exited at once: %s\n%s", b.port,
				bytes.TrimSpace(stderr.Bytes()), b.Log())
		default:
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", b.port), time.Second)
		if err == nil {
			conn.Close()
			if err := pingBouncer(ctx, b.port, b.user); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = cmd.Process.Kill()
			return fmt.Errorf("pgcluster: pgbouncer on port %d did not become ready: %s\n%s", b.port,
				bytes.TrimSpace(stderr.Bytes()), b.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pingBouncer succeeds once PgBouncer answers on its admin console (SHOW VERSION, simple protocol only).
func pingBouncer(ctx context.Context, port int, user string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://%s@127.0.0.1:%d/pgbouncer?sslmode=disable", url.PathEscape(user), port))
	if err != nil {
		return err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SHOW VERSION")
	return err
}

// startReaper starts a detached shell that stops the PgBouncer and removes its directory once this process exits.
func (b *PgBouncer) startReaper(cred *syscall.Credential) error {
	script := fmt.Sprintf(`while [ -e /proc/%d ]; do sleep 0.3; done
kill -INT %d 2>/dev/null
i=0; while [ -e /proc/%d ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
kill -KILL %d 2>/dev/null
rm -rf %q`, os.Getpid(), b.pid, b.pid, b.pid, b.dir)
	reaper := exec.Command("/bin/sh", "-c", script)
	reaper.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setsid: true}
	if err := reaper.Start(); err != nil {
		return fmt.Errorf("pgcluster: start PgBouncer reaper: %w", err)
	}
	go func() { _ = reaper.Wait() }()
	return nil
}

// removeBouncerLeftovers stops and deletes PgBouncers of earlier processes that no longer run.
func removeBouncerLeftovers() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), bouncerDirPrefix+"*"))
	for _, dir := range dirs {
		if !ownerGone(dir) {
			continue
		}
		if raw, err := os.ReadFile(filepath.Join(dir, "pgbouncer.pid")); err == nil {
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(raw))); pid > 0 && isPgBouncer(pid) {
				_ = syscall.Kill(pid, syscall.SIGINT)
				waitGone(pid, 5*time.Second)
			}
		}
		_ = os.RemoveAll(dir)
	}
}

// isPgBouncer reports whether pid runs pgbouncer (a stale pid file may name a reused pid).
func isPgBouncer(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(comm)) == "pgbouncer"
}
