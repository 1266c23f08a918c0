package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/backoff"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// scaleScenario names the one-step flow of the scale-out mode (bench_scale_out).
const scaleScenario = "scale-out"

// EnvWorkerProcess carries a worker process's settings (JSON) from the scale-out mode to the process it starts.
const EnvWorkerProcess = "PGFLOW_BENCH_WORKER"

// trickleInterval separates the single starts of the scale-out mode's notification check.
const trickleInterval = 250 * time.Millisecond

// ScalePoint is the scale-out mode's outcome for one number of worker processes.
type ScalePoint struct {
	Processes int `json:"processes"`
	// Baseline is the baseline measured right before this point (BaselineDuration): on a shared machine the
	// commit rate drifts during a run, so rates are divided by the adjacent measurement (Ratios.TasksPerSec).
	Baseline Baseline `json:"baseline"`
	// The burn-down of Runs one-step runs by the processes: steady-state rate, cost per task.
	Runs           int     `json:"runs"`
	TasksCompleted int     `json:"tasks_completed"`
	RunsFailed     int     `json:"runs_failed"`
	Seconds        float64 `json:"seconds"`
	TasksPerSec    float64 `json:"tasks_per_sec"`
	CommitsPer     float64 `json:"commits_per_task"`
	WALBytesPer    float64 `json:"wal_bytes_per_task"`
	RowsWrittenPer float64 `json:"rows_written_per_task"`
	Ratios         Ratios  `json:"ratios"` // TasksPerSec, Commits, WALBytes, RowsWritten
	// Database connections per process (pg_stat_activity by application_name): the mean over the processes of
	// the most each had open while working, the most any had, and the mean while idle.
	ConnectionsBusy float64 `json:"connections_per_process_busy"`
	ConnectionsMax  int     `json:"connections_max"`
	ConnectionsIdle float64 `json:"connections_per_process_idle"`
	// Statements each idle process sent per second (mean over the processes).
	IdleStatementsPerSec float64 `json:"idle_statements_per_sec_per_process"`
	// The notification check: TrickleRuns runs started one at a time (each start notifies the queue once);
	// ReadsPerRun is how many queue reads (queueReads) all processes together made per started run beyond their idle rate
	// (1 means one process woke per notification, Processes means every process did), StatementsPerRun the same
	// for all statements.
	TrickleRuns      int     `json:"trickle_runs"`
	ReadsPerRun      float64 `json:"reads_per_run"`
	StatementsPerRun float64 `json:"statements_per_run"`
}

// Scale is the outcome of the scale-out mode.
type Scale struct {
	Points []ScalePoint `json:"points"`
}

// workerProcessSettings is what a worker process is told (EnvWorkerProcess).
type workerProcessSettings struct {
	URL           string `json:"url"`
	App           string `json:"application_name"`
	MaxConcurrent int    `json:"max_concurrent"`
	BatchSize     int    `json:"batch_size"`
	PoolSize      int    `json:"pool_size"`
	// Idle runs the worker with the default WorkerConfig (what an idle production worker does) instead of the
	// benchmark's throughput settings.
	Idle bool `json:"idle,omitempty"`
	// DeleteMessages is Config.DeleteMessages.
	DeleteMessages bool `json:"delete_messages,omitempty"`
}

// processStats is a worker process's answer to "stats".
type processStats struct {
	Ready      bool             `json:"ready,omitempty"`
	Statements int64            `json:"statements"`
	Calls      map[string]int64 `json:"calls"`
}

// WorkerProcessMain is the body of a scale-out worker process: it reads its settings from EnvWorkerProcess,
// runs one pgflow.Worker for the scale-out flow, writes a JSON line {"ready":true} once the worker runs, answers
// every "stats" line on in with a JSON line of the statements it sent so far, and stops gracefully when in ends.
func WorkerProcessMain(ctx context.Context, in io.Reader, out io.Writer) error {
	var s workerProcessSettings
	if err := json.Unmarshal([]byte(os.Getenv(EnvWorkerProcess)), &s); err != nil {
		return fmt.Errorf("bench worker: $%s: %w", EnvWorkerProcess, err)
	}
	timer := newStatementTimer()
	pool, err := newTracedPool(ctx, s.URL, s.App, s.PoolSize, timer)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := pgflow.NewClient(pool, nil)
	if err != nil {
		return err
	}
	defer client.Close()
	bf, err := flowFor(scaleScenario, s.DeleteMessages)
	if err != nil {
		return err
	}
	wcfg := workerConfig(Config{MaxConcurrent: s.MaxConcurrent, BatchSize: s.BatchSize})
	if s.Idle {
		wcfg = pgflow.WorkerConfig{}
	}
	wcfg.Flows = []pgflow.WorkerFlow{{Flow: bf.flow}}
	w, err := pgflow.NewWorker(client, &wcfg)
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return fmt.Errorf("bench worker: start: %w", err)
	}
	write := func(st processStats) error {
		st.Statements = timer.statements()
		st.Calls = map[string]int64{}
		for _, c := range timer.times() {
			st.Calls[c.Function] = c.Calls
		}
		b, _ := json.Marshal(st)
		_, err := fmt.Fprintf(out, "%s\n", b)
		return err
	}
	if err := write(processStats{Ready: true}); err != nil {
		return errors.Join(err, w.Stop(context.WithoutCancel(ctx)))
	}
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		if strings.TrimSpace(lines.Text()) == "stats" {
			if err := write(processStats{}); err != nil {
				return errors.Join(err, w.Stop(context.WithoutCancel(ctx)))
			}
		}
	}
	return w.Stop(context.WithoutCancel(ctx))
}

// workerProcess is one started worker process.
type workerProcess struct {
	app    string
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	exited chan struct{}
	err    error // the process's exit error, once exited is closed
	stderr *bytes.Buffer
}

// startProcesses starts n worker processes and waits until each runs its worker.
func (e *env) startProcesses(ctx context.Context, cfg Config, n int, idle bool) ([]*workerProcess, error) {
	var ps []*workerProcess
	for i := range n {
		p, err := e.startProcess(ctx, cfg, fmt.Sprintf("%s-p%d", workerApp, i+1), idle)
		if err != nil {
			return nil, errors.Join(err, stopProcesses(ps))
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		if _, err := p.read(60 * time.Second); err != nil {
			return nil, errors.Join(err, stopProcesses(ps))
		}
	}
	return ps, nil
}

func (e *env) startProcess(ctx context.Context, cfg Config, app string, idle bool) (*workerProcess, error) {
	settings, _ := json.Marshal(workerProcessSettings{URL: e.url, App: app, MaxConcurrent: cfg.MaxConcurrent,
		BatchSize: cfg.BatchSize, PoolSize: cfg.PoolSize, Idle: idle, DeleteMessages: cfg.DeleteMessages})
	cmd := exec.CommandContext(ctx, cfg.WorkerCommand[0], cfg.WorkerCommand[1:]...)
	cmd.Env = append(os.Environ(), EnvWorkerProcess+"="+string(settings))
	p := &workerProcess{app: app, cmd: cmd, lines: make(chan string, 16), exited: make(chan struct{}), stderr: &bytes.Buffer{}}
	cmd.Stderr = p.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: worker process %s: %w", app, err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: worker process %s: %w", app, err)
	}
	p.in = in
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start worker process %s (%s): %w", app, strings.Join(cfg.WorkerCommand, " "), err)
	}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.lines <- s.Text()
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// read waits for the process's next JSON line.
func (p *workerProcess) read(limit time.Duration) (processStats, error) {
	var st processStats
	select {
	case line := <-p.lines:
		if err := json.Unmarshal([]byte(line), &st); err != nil {
			return st, fmt.Errorf("bench: worker process %s wrote %q: %w", p.app, line, err)
		}
		return st, nil
	case <-p.exited:
		return st, fmt.Errorf("bench: worker process %s exited (%v): %s", p.app, p.err, strings.TrimSpace(p.stderr.String()))
	case <-time.After(limit):
		return st, fmt.Errorf("bench: worker process %s did not answer within %s", p.app, limit)
	}
}

// stats asks every process for its statement counts.
func statsOf(ps []*workerProcess) ([]processStats, error) {
	out := make([]processStats, len(ps))
	for i, p := range ps {
		if _, err := io.WriteString(p.in, "stats\n"); err != nil {
			return nil, fmt.Errorf("bench: worker process %s: %w", p.app, err)
		}
		st, err := p.read(30 * time.Second)
		if err != nil {
			return nil, err
		}
		out[i] = st
	}
	return out, nil
}

// anyExited returns an error when a process has exited.
func anyExited(ps []*workerProcess) error {
	for _, p := range ps {
		select {
		case <-p.exited:
			return fmt.Errorf("bench: worker process %s exited (%v): %s", p.app, p.err, strings.TrimSpace(p.stderr.String()))
		default:
		}
	}
	return nil
}

// stopProcesses closes every process's input (its signal to stop gracefully) and waits until they have exited.
func stopProcesses(ps []*workerProcess) error {
	for _, p := range ps {
		_ = p.in.Close()
	}
	var errs []error
	for _, p := range ps {
		select {
		case <-p.exited:
		case <-time.After(60 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if p.err != nil {
			errs = append(errs, fmt.Errorf("bench: worker process %s: %w: %s", p.app, p.err, strings.TrimSpace(p.stderr.String())))
		}
	}
	return errors.Join(errs...)
}

// connections counts the open connections of every worker process by application_name.
func (e *env) connections(ctx context.Context) (map[string]int, error) {
	rows, err := e.mon.Query(ctx, `select a.application_name, count(*)::int from pg_stat_activity as a
		where a.datname = current_database() and a.application_name like $1 group by a.application_name`, workerApp+"-p%")
	e.monQueries.Add(1)
	if err != nil {
		return nil, fmt.Errorf("bench: count connections: %w", err)
	}
	out := map[string]int{}
	var app string
	var n int
	for rows.Next() {
		if err := rows.Scan(&app, &n); err != nil {
			return nil, fmt.Errorf("bench: count connections: %w", err)
		}
		out[app] = n
	}
	return out, rows.Err()
}

// runScaleOut measures each number of worker processes of cfg.ScaleWorkers: a burn-down of cfg.Runs one-step
// runs (throughput, cost per task, connections), then, with fresh processes and nothing to do, their idle
// statements and how many of them read the queue per started run.
func (e *env) runScaleOut(ctx context.Context, cfg Config, progress func(Progress)) (*Scale, error) {
	s := &Scale{}
	for _, n := range cfg.ScaleWorkers {
		pt, err := e.scalePoint(ctx, cfg, n, progress)
		if err != nil {
			return nil, fmt.Errorf("bench: %d worker processes: %w", n, err)
		}
		s.Points = append(s.Points, *pt)
	}
	return s, nil
}

func (e *env) scalePoint(ctx context.Context, cfg Config, n int, progress func(Progress)) (*ScalePoint, error) {
	bf, err := flowFor(scaleScenario, cfg.DeleteMessages)
	if err != nil {
		return nil, err
	}
	if err := e.prepareFlow(ctx, bf); err != nil {
		return nil, err
	}
	phase := fmt.Sprintf("%d processes", n)
	if err := startRuns(ctx, e.mon, bf, cfg.Runs, cfg.StartBatch, 2, func(done int) {
		progress(Progress{Phase: phase + ": starting runs", Done: int64(done), Total: int64(cfg.Runs), Unit: "runs"})
	}); err != nil {
		return nil, err
	}
	if err := e.vacuum(ctx); err != nil {
		return nil, err
	}
	pt := &ScalePoint{Processes: n, Runs: cfg.Runs}
	if pt.Baseline, err = e.runBaseline(ctx, cfg.BaselineDuration, nil); err != nil {
		return nil, err
	}
	busy := map[string]int{}
	cost, err := e.measureCost(ctx, func() error {
		ps, err := e.startProcesses(ctx, cfg, n, false)
		if err != nil {
			return err
		}
		start := time.Now()
		var loopErr error
		for loopErr == nil {
			var c, f int64
			if c, f, loopErr = e.runCounts(ctx, bf.slug); loopErr != nil {
				break
			}
			progress(Progress{Phase: phase + ": working", Done: c + f, Total: int64(cfg.Runs), Unit: "runs"})
			conns, err := e.connections(ctx)
			if err != nil {
				loopErr = err
				break
			}
			for app, k := range conns {
				busy[app] = max(busy[app], k)
			}
			if c+f >= int64(cfg.Runs) {
				break
			}
			if loopErr = anyExited(ps); loopErr == nil {
				loopErr = backoff.Sleep(ctx, 100*time.Millisecond)
			}
		}
		pt.Seconds = time.Since(start).Seconds()
		return errors.Join(loopErr, stopProcesses(ps))
	})
	if err != nil {
		return nil, err
	}
	var res Result
	if err := e.collect(ctx, bf, &res, time.Time{}, time.Time{}); err != nil {
		return nil, err
	}
	pt.TasksCompleted, pt.RunsFailed, pt.TasksPerSec = res.TasksCompleted, res.RunsFailed, res.TasksPerSec
	if pt.TasksCompleted > 0 {
		pt.CommitsPer = float64(cost.commits) / float64(pt.TasksCompleted)
		pt.WALBytesPer = float64(cost.walBytes) / float64(pt.TasksCompleted)
		pt.RowsWrittenPer = float64(cost.rows) / float64(pt.TasksCompleted)
	}
	total := 0
	for _, k := range busy {
		total += k
		pt.ConnectionsMax = max(pt.ConnectionsMax, k)
	}
	pt.ConnectionsBusy = float64(total) / float64(n)
	return pt, e.scaleIdle(ctx, cfg, bf, pt, progress)
}

// scaleIdle starts the processes afresh, with the default WorkerConfig, and nothing to do: their idle statements
// per second, their connections, and then the reads per started run while single runs arrive one at a time.
func (e *env) scaleIdle(ctx context.Context, cfg Config, bf *benchFlow, pt *ScalePoint, progress func(Progress)) (err error) {
	n := pt.Processes
	ps, err := e.startProcesses(ctx, cfg, n, true)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopProcesses(ps)) }()
	phase := fmt.Sprintf("%d processes: idle", n)
	if err := backoff.Sleep(ctx, time.Second); err != nil { // startup reads and registrations settle
		return err
	}
	s0, err := statsOf(ps)
	if err != nil {
		return err
	}
	t0 := time.Now()
	for end := t0.Add(cfg.IdleDuration); time.Now().Before(end); {
		progress(Progress{Phase: phase, Done: int64(time.Since(t0) / time.Second), Total: int64(cfg.IdleDuration / time.Second), Unit: "s"})
		if err := backoff.Sleep(ctx, min(time.Second, time.Until(end))); err != nil {
			return err
		}
	}
	s1, err := statsOf(ps)
	if err != nil {
		return err
	}
	idleSecs := time.Since(t0).Seconds()
	conns, err := e.connections(ctx)
	if err != nil {
		return err
	}
	sent, reads := sumStats(s0, s1)
	pt.IdleStatementsPerSec = float64(sent) / idleSecs / float64(n)
	idleReads := float64(reads) / idleSecs // all processes
	total := 0
	for _, k := range conns {
		total += k
	}
	pt.ConnectionsIdle = float64(total) / float64(n)

	// One run at a time: each start notifies the queue once, in its own transaction.
	pt.TrickleRuns = max(3, int(cfg.IdleDuration/trickleInterval))
	before, _, err := e.runCounts(ctx, bf.slug)
	if err != nil {
		return err
	}
	t1 := time.Now()
	for i := range pt.TrickleRuns {
		progress(Progress{Phase: fmt.Sprintf("%d processes: single runs", n), Done: int64(i), Total: int64(pt.TrickleRuns), Unit: "runs"})
		if _, err := sqlapi.StartFlows(ctx, e.mon, bf.slug, []json.RawMessage{bf.input}, nil); err != nil {
			return fmt.Errorf("start a run: %w", err)
		}
		if err := backoff.Sleep(ctx, trickleInterval); err != nil {
			return err
		}
	}
	for {
		c, f, err := e.runCounts(ctx, bf.slug)
		if err != nil {
			return err
		}
		if c+f >= before+int64(pt.TrickleRuns) {
			break
		}
		if err := anyExited(ps); err != nil {
			return err
		}
		if err := backoff.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	s2, err := statsOf(ps)
	if err != nil {
		return err
	}
	secs := time.Since(t1).Seconds()
	sent, reads = sumStats(s1, s2)
	k := float64(pt.TrickleRuns)
	pt.ReadsPerRun = max(0, float64(reads)-idleReads*secs) / k
	pt.StatementsPerRun = max(0, float64(sent)-pt.IdleStatementsPerSec*float64(n)*secs) / k
	return nil
}

// sumStats adds up, over the processes, the statements and the queue reads between two readings. A listening
// worker reads (and claims) with pgflow.read_and_start_tasks, a polling one with pgmq.read_with_poll; pgmq.read is
// counted too.
func sumStats(a, b []processStats) (statements, reads int64) {
	for i := range a {
		statements += b[i].Statements - a[i].Statements
		for _, f := range queueReads {
			reads += b[i].Calls[f] - a[i].Calls[f]
		}
	}
	return statements, reads
}

func (s *Scale) ratios(b Baseline) {
	if s == nil {
		return
	}
	for i := range s.Points {
		p := &s.Points[i]
		p.Ratios = Ratios{TasksPerSec: ratio(p.TasksPerSec, p.Baseline.CommitsPerSec), Commits: ratio(p.CommitsPer, b.CommitsPerTx),
			WALBytes: ratio(p.WALBytesPer, b.WALBytesPerTx), RowsWritten: ratio(p.RowsWrittenPer, b.RowsPerTx),
			IdleRequests: ratio(p.IdleStatementsPerSec, p.Baseline.CommitsPerSec)}
	}
}

// queueReads are the calls that read a queue.
var queueReads = []string{"pgflow.read_and_start_tasks", "pgmq.read", "pgmq.read_with_poll"}
