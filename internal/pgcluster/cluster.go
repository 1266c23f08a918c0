// Package pgcluster starts throwaway PostgreSQL clusters from the machine's server binaries, for tests and for
// `pgflow demo` / `pgflow bench`.
//
// A cluster is initdb'd into a temporary directory and started with fsync, synchronous_commit and
// full_page_writes off (unless durability is asked for), on a unix socket plus a free loopback port. A small
// reaper process stops the server and removes the directory as soon as the owning process exits — normally,
// after a panic, or when it is killed — and leftovers of runs whose reaper was itself killed are removed by the
// next start.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const dirPrefix = "pgflow-cluster-"

// Cluster is a throwaway PostgreSQL server owned by this process.
type Cluster struct {
	dir       string // run directory: data/, sock/, server.log, owner.pid
	port      int
	sockDir   string
	serverPID int
}

// Options tune a cluster.
type Options struct {
	// Durable keeps fsync, synchronous_commit and full_page_writes on, as in production (benchmarks).
	Durable bool
}

// AdminURL is a URL for the superuser on the maintenance database "postgres".
func (c *Cluster) AdminURL() string {
	return c.URL("postgres")
}

// URL returns a connection URL for database db as the superuser "postgres".
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// Dir is the cluster's run directory (data/, server.log).
func (c *Cluster) Dir() string { return c.dir }

// Stop shuts the server down at once and removes its directory. The reaper would do the same when the process
// exits; Stop makes it happen now.
func (c *Cluster) Stop() {
	_ = syscall.Kill(c.serverPID, syscall.SIGQUIT)
	waitGone(c.serverPID, 10*time.Second)
	_ = syscall.Kill(c.serverPID, syscall.SIGKILL)
	_ = os.RemoveAll(c.dir)
}

// BinDir locates a directory holding the PostgreSQL server binaries (initdb, postgres, pg_dump…).
func BinDir() (string, error) {
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	if dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(dirs) > 0 {
		sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
		candidates = append(candidates, dirs...)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		candidates = append(candidates, filepath.Dir(p))
	}
	for _, dir := range candidates {
		if IsExecutable(filepath.Join(dir, "initdb")) && IsExecutable(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, postgres) found via pg_config --bindir, " +
		"/usr/lib/postgresql/*/bin or PATH; install them (Debian: apt-get install postgresql) or point the " +
		"program at an existing server with a database URL")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// IsExecutable reports whether path is an executable file.
func IsExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// serverUser decides which OS user runs initdb and postgres. PostgreSQL refuses to run as root, so when the tests
// run as root the server runs as "postgres" (or "nobody").
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("pgcluster: running as root, but neither a 'postgres' nor a 'nobody' user exists to run the " +
		"server as (PostgreSQL refuses root); create one (useradd postgres) or run the tests as another user")
}

func chownTree(root string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// removeLeftovers deletes run directories of earlier test binaries that no longer run (their reaper was killed
// too, or the machine stopped). A live owner is left alone.
func removeLeftovers() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		if !ownerGone(dir) {
			continue
		}
		if raw, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			if pid, _ := strconv.Atoi(strings.SplitN(string(raw), "\n", 2)[0]); pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGQUIT)
				waitGone(pid, 5*time.Second)
			}
		}
		_ = os.RemoveAll(dir)
	}
}

// writeOwner records this process as the owner of dir. The file appears whole (written aside, then renamed), so
// another binary's leftover sweep never reads it half-written.
func writeOwner(dir string) error {
	tmp := filepath.Join(dir, "owner.pid.tmp")
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "owner.pid"))
}

// ownerGone reports whether the process that created dir no longer runs. Without a readable owner (a directory
// being set up right now by another binary, or one whose owner died before it wrote the file), the directory
// counts as gone only once it is a minute old.
func ownerGone(dir string) bool {
	if raw, err := os.ReadFile(filepath.Join(dir, "owner.pid")); err == nil {
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(raw))); pid > 0 {
			return !processAlive(pid)
		}
	}
	st, err := os.Stat(dir)
	return err == nil && time.Since(st.ModTime()) >= time.Minute
}

func processAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

func waitGone(pid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for processAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

// Start runs initdb and starts a server that lives at most as long as this process.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	removeLeftovers()
	binDir, err := BinDir()
	if err != nil {
		return nil, err
	}
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: create run directory: %w", err)
	}
	if err := writeOwner(dir); err != nil {
		return nil, fmt.Errorf("pgcluster: write owner.pid: %w", err)
	}
	c := &Cluster{dir: dir, sockDir: filepath.Join(dir, "sock")}
	if err := os.Mkdir(c.sockDir, 0o700); err != nil {
		return nil, fmt.Errorf("pgcluster: create socket directory: %w", err)
	}
	if err := chownTree(dir, cred); err != nil {
		return nil, fmt.Errorf("pgcluster: hand %s to the server user: %w", dir, err)
	}
	dataDir := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), "-D", dataDir, "-U", "postgres",
		"--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgcluster: initdb in %s failed: %w\n%s", dataDir, err, out)
	}

	// A port picked this way can be taken by someone else before the server binds it; retry a few times.
	for attempt := 0; ; attempt++ {
		c.port, err = freePort()
		if err != nil {
			return nil, err
		}
		err = c.startServer(ctx, binDir, dataDir, cred, opts)
		if err == nil || attempt == 3 {
			break
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) startServer(ctx context.Context, binDir, dataDir string, cred *syscall.Credential, opts Options) error {
	logPath := filepath.Join(c.dir, "server.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: open server log: %w", err)
	}
	defer logFile.Close()
	if cred != nil {
		_ = os.Chown(logPath, int(cred.Uid), int(cred.Gid))
	}
	args := []string{
		"-D", dataDir,
		"-p", strconv.Itoa(c.port),
		"-k", c.sockDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections=300",
		"-c", "shared_buffers=128MB",
		"-c", "log_min_messages=warning",
		"-c", "max_locks_per_transaction=256",
	}
	if !opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	server := exec.Command(filepath.Join(binDir, "postgres"), args...)
	// The server gets its own session so that Ctrl-C on the test's terminal reaches the reaper's cleanup, not
	// the server directly, and it never holds the test binary's output pipes (go test waits on those).
	server.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setsid: true}
	server.Stdout, server.Stderr = logFile, logFile
	if err := server.Start(); err != nil {
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	c.serverPID = server.Process.Pid
	go func() { _ = server.Wait() }() // reap the child; Stop, the reaper or the next run stops it
	if err := c.startReaper(server.Process.Pid, cred); err != nil {
		_ = server.Process.Signal(syscall.SIGQUIT)
		return err
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.port), time.Second)
		if err == nil {
			conn.Close()
			if err := pingSQL(ctx, c.AdminURL()); err == nil {
				return nil
			}
		}
		if !processAlive(server.Process.Pid) || time.Now().After(deadline) || ctx.Err() != nil {
			logText, _ := os.ReadFile(logPath)
			_ = server.Process.Signal(syscall.SIGQUIT)
			return fmt.Errorf("pgcluster: postgres on port %d did not become ready; server log:\n%s", c.port,
				bytes.TrimSpace(logText))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startReaper starts a detached shell that waits for this process to exit, then stops the server immediately and
// removes the run directory. It survives panics, os.Exit and SIGKILL of the test binary.
func (c *Cluster) startReaper(serverPID int, cred *syscall.Credential) error {
	script := fmt.Sprintf(`while [ -e /proc/%d ]; do sleep 0.3; done
kill -QUIT %d 2>/dev/null
i=0; while [ -e /proc/%d ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
kill -KILL %d 2>/dev/null
rm -rf %q`, os.Getpid(), serverPID, serverPID, serverPID, c.dir)
	reaper := exec.Command("/bin/sh", "-c", script)
	reaper.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setsid: true}
	reaper.Stdin, reaper.Stdout, reaper.Stderr = nil, nil, nil
	if err := reaper.Start(); err != nil {
		return fmt.Errorf("pgcluster: start reaper: %w", err)
	}
	go func() { _ = reaper.Wait() }()
	return nil
}

// pingSQL succeeds once the server accepts queries (it accepts TCP connections a little earlier).
func pingSQL(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}
