//go:build !unix

package bench

import "time"

// selfCPU is not measured where getrusage does not exist: the worker CPU figure is then 0 (not reported).
func selfCPU() (time.Duration, error) { return 0, nil }
