package reliability

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestWorkerPackage is the import path of the test worker binary.
const TestWorkerPackage = "github.com/pgflow-go/pgflow/internal/reliability/testworker"

// EnvDatabaseURL is the environment variable the test worker reads its database URL from.
const EnvDatabaseURL = "RELIABILITY_DATABASE_URL"

// BuildTestWorker builds the test worker binary into t.TempDir() and returns its path.
func BuildTestWorker(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "testworker")
	cmd := exec.Command("go", "build", "-o", bin, TestWorkerPackage)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("reliability: go build %s: %v\n%s", TestWorkerPackage, err, out)
	}
	return bin
}

// ProcConfig configures one test worker process.
type ProcConfig struct {
	DatabaseURL   string
	Flow          string        // OneStepFlow or MapFlow
	WorkerID      string        // default: a random UUID
	ReleaseDir    string        // FileGate directory; default: a new temporary directory
	MaxConcurrent int           // default 10
	BatchSize     int           // default 10
	Maintenance   time.Duration // MaintenanceInterval; 0: off
	PoolSize      int           // default MaxConcurrent + 4
	LogLevel      string        // debug (default), info, warn
	ShutdownAfter time.Duration // WorkerConfig.ShutdownTimeout; default 5 s
	Env           []string      // extra environment variables ("NAME=value")
}

// Process is a running test worker.
type Process struct {
	Config ProcConfig
	cmd    *exec.Cmd
	out    *SyncBuffer
	done   chan struct{}
	err    error
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// NewUUID returns a random version-4 UUID.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// StartProcess starts the test worker bin with cfg. The process is killed at the end of the test if it still
// runs; its output (JSON logs) is printed when the test failed.
func StartProcess(t testing.TB, bin string, cfg ProcConfig) *Process {
	t.Helper()
	if cfg.WorkerID == "" {
		cfg.WorkerID = NewUUID()
	}
	if cfg.ReleaseDir == "" {
		cfg.ReleaseDir = t.TempDir()
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "debug"
	}
	args := []string{
		"-flow", cfg.Flow,
		"-worker-id", cfg.WorkerID,
		"-release-dir", cfg.ReleaseDir,
		"-max-concurrent", strconv.Itoa(cfg.MaxConcurrent),
		"-batch-size", strconv.Itoa(cfg.BatchSize),
		"-maintenance", cfg.Maintenance.String(),
		"-pool-size", strconv.Itoa(cfg.PoolSize),
		"-log-level", cfg.LogLevel,
		"-shutdown-timeout", cfg.ShutdownAfter.String(),
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), EnvDatabaseURL+"="+cfg.DatabaseURL), cfg.Env...)
	out := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	// The worker dies with the test binary even if the test binary is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("reliability: start test worker: %v", err)
	}
	p := &Process{Config: cfg, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("test worker %s (pid %d) output:\n%s", cfg.WorkerID, cmd.Process.Pid, out.String())
		}
	})
	return p
}

// PID returns the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Output returns what the process printed so far (JSON log lines).
func (p *Process) Output() string { return p.out.String() }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill sends SIGKILL (resuming a stopped process first is not needed) and waits for the process to exit.
func (p *Process) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to limit for a graceful exit; it returns the exit error (nil for status 0).
func (p *Process) Stop(limit time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(limit):
		p.Kill()
		return fmt.Errorf("reliability: test worker %s did not stop within %s after SIGTERM", p.Config.WorkerID, limit)
	}
}

// ExitErr returns the exit error once the process has exited.
func (p *Process) ExitErr() error {
	<-p.done
	return p.err
}
