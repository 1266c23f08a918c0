package pgcluster

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A run directory belongs to whoever its owner.pid names while that process runs; a directory whose owner file is
// missing or not yet written (another binary is setting it up) is left alone for a minute. Before, an owner file
// read while it was being written (empty) made another binary's sweep delete a live cluster's directory.
func TestOwnerGone(t *testing.T) {
	t.Parallel()
	owned := func(content string, age time.Duration) string {
		dir := t.TempDir()
		if content != "-" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(content), 0o644))
		}
		old := time.Now().Add(-age)
		require.NoError(t, os.Chtimes(dir, old, old))
		return dir
	}
	dead := 1 << 22 // above the kernel's pid_max default: no such process
	require.NoDirExists(t, "/proc/"+strconv.Itoa(dead))

	require.False(t, ownerGone(owned(strconv.Itoa(os.Getpid()), time.Hour)), "a live owner keeps its directory")
	require.True(t, ownerGone(owned(strconv.Itoa(dead), 0)), "a dead owner's directory goes at once")
	require.False(t, ownerGone(owned("", 0)), "an owner file being written: a new directory stays")
	require.False(t, ownerGone(owned("-", 0)), "no owner file yet: a new directory stays")
	require.True(t, ownerGone(owned("", 2*time.Minute)), "an owner that never wrote its pid: gone after a minute")
	require.True(t, ownerGone(owned("-", 2*time.Minute)))

	dir := t.TempDir()
	require.NoError(t, writeOwner(dir))
	raw, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(os.Getpid()), string(raw))
	require.NoFileExists(t, filepath.Join(dir, "owner.pid.tmp"))
}
