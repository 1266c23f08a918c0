package pgcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Restart restarts the server the way an operator does, with `pg_ctl restart -m fast`: every session is
// terminated (clients see their connections fail), uncommitted transactions roll back, and the server comes back
// on the same port with the same settings (pg_ctl reuses the postmaster's recorded command line). Restart returns
// once the server accepts queries again. The cluster keeps its cleanup guarantees: a reaper watches the new
// server process too.
func (c *Cluster) Restart(ctx context.Context) error {
	binDir, err := BinDir()
	if err != nil {
		return err
	}
	pgctl := filepath.Join(binDir, "pg_ctl")
	if !IsExecutable(pgctl) {
		return fmt.Errorf("pgcluster: restart: %s not found; install the PostgreSQL server package", pgctl)
	}
	cred, err := serverUser()
	if err != nil {
		return err
	}
	dataDir := filepath.Join(c.dir, "data")
	logPath := filepath.Join(c.dir, "server.log")
	// pg_ctl's own output goes to a file, not a pipe: the server it starts must not hold our pipes open.
	outPath := filepath.Join(c.dir, "pg_ctl.out")
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: restart: open %s: %w", outPath, err)
	}
	defer out.Close()
	cmd := exec.CommandContext(ctx, pgctl, "restart", "-D", dataDir, "-m", "fast", "-w", "-t", "120", "-l", logPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setsid: true}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		text, _ := os.ReadFile(outPath)
		return fmt.Errorf("pgcluster: pg_ctl restart -m fast in %s failed: %w\n%s", dataDir, err, strings.TrimSpace(string(text)))
	}

	pid, err := postmasterPID(dataDir)
	if err != nil {
		return err
	}
	c.serverPID = pid
	if err := c.startReaper(pid, cred); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := pingSQL(ctx, c.AdminURL()); err == nil {
			return nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("pgcluster: server did not accept queries after the restart: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// postmasterPID reads the server's process id from the first line of postmaster.pid.
func postmasterPID(dataDir string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pgcluster: read postmaster.pid after restart: %w", err)
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pgcluster: postmaster.pid starts with %q, not a process id", first)
	}
	return pid, nil
}
