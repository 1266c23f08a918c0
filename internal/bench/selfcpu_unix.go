//go:build unix

package bench

import (
	"fmt"
	"syscall"
	"time"
)

// selfCPU is the CPU time this process has used so far, user and system, every thread counted: the benchmark's
// workers run inside it, so the difference over a measured window is what the Go side spent on that window.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("bench: read this process's CPU time (getrusage): %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
