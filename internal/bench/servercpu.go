package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on every Linux ABI).
const clockTick = 10 * time.Millisecond

// findPostmaster returns the process id of the server's postmaster when the server runs on this machine and
// /proc shows it (the parent of the monitoring connection's backend, named postgres), else 0: the server's
// CPU time is then not reported.
func (e *env) findPostmaster(ctx context.Context) int {
	var backend int
	if err := e.mon.QueryRow(ctx, `select pg_backend_pid()`).Scan(&backend); err != nil {
		return 0
	}
	f, ok := procStat(backend)
	if !ok || f.comm != "postgres" {
		return 0
	}
	if pm, ok := procStat(f.ppid); !ok || pm.comm != "postgres" {
		return 0
	}
	return f.ppid
}

// serverCPU is the CPU time the server has used so far: its postmaster's, its live children's (backends and
// background processes) and that of the children it has reaped (a backend that exits moves from the second
// part to the third, so the sum only grows).
func serverCPU(postmaster int) (time.Duration, error) {
	pm, ok := procStat(postmaster)
	if !ok {
		return 0, fmt.Errorf("bench: the server's postmaster (pid %d) is gone", postmaster)
	}
	ticks := pm.utime + pm.stime + pm.cutime + pm.cstime
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if f, ok := procStat(pid); ok && f.ppid == postmaster {
			ticks += f.utime + f.stime
		}
	}
	return time.Duration(ticks) * clockTick, nil
}

type procFields struct {
	comm                         string
	ppid                         int
	utime, stime, cutime, cstime int64
}

// procStat reads /proc/<pid>/stat; ok is false when the process is gone or the line is unreadable.
func procStat(pid int) (procFields, bool) {
	var f procFields
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return f, false
	}
	line := string(b)
	open, closing := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || closing < open {
		return f, false
	}
	f.comm = line[open+1 : closing]
	// After the command: state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
	// cutime cstime ... (proc(5): fields 3 onwards).
	rest := strings.Fields(line[closing+1:])
	if len(rest) < 15 {
		return f, false
	}
	num := func(i int) int64 { v, _ := strconv.ParseInt(rest[i], 10, 64); return v }
	f.ppid = int(num(1))
	f.utime, f.stime, f.cutime, f.cstime = num(11), num(12), num(13), num(14)
	return f, true
}

// backendsCPU sums, per role, the CPU time (procRuntime) the server's backends of this database have used since
// they began, for the backends whose application_name roles maps to a role. Read it before those connections
// close: an ended backend's time is only in its postmaster's total (serverCPU), no longer attributable to it. With
// connections opened inside a measured window it is their whole share of that window's server CPU.
func (e *env) backendsCPU(ctx context.Context, roles map[string]string) (map[string]time.Duration, error) {
	e.monQueries.Add(1)
	rows, err := e.mon.Query(ctx, `select a.pid, a.application_name from pg_stat_activity as a
		where a.datname = current_database() and a.application_name = any ($1::text[])`,
		slices.Collect(maps.Keys(roles)))
	if err != nil {
		return nil, fmt.Errorf("bench: read the server's backends: %w", err)
	}
	out := make(map[string]time.Duration, len(roles))
	var (
		pid int
		app string
	)
	if _, err := pgx.ForEachRow(rows, []any{&pid, &app}, func() error {
		if f, ok := procStat(pid); ok && f.ppid == e.postmaster {
			out[roles[app]] += procRuntime(pid, f)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("bench: read the server's backends: %w", err)
	}
	return out, nil
}

// procRuntime is the CPU time a process has used, to the nanosecond from /proc/<pid>/schedstat (its first field)
// where the kernel provides it, else from its clock ticks in /proc/<pid>/stat (f). A connection that did a little
// work in a short window can have used less than one tick.
func procRuntime(pid int, f procFields) time.Duration {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat"); err == nil {
		if first, _, ok := strings.Cut(string(b), " "); ok {
			if ns, err := strconv.ParseInt(first, 10, 64); err == nil {
				return time.Duration(ns)
			}
		}
	}
	return time.Duration(f.utime+f.stime) * clockTick
}
