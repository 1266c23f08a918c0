package completer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestCleanErrorMessage(t *testing.T) {
	t.Parallel()
	require.Equal(t, `a\x00b`, cleanErrorMessage("a\x00b"))
	require.Equal(t, "bad \uFFFD byte", cleanErrorMessage("bad \xff byte"))
	require.Equal(t, "handler failed without an error message", cleanErrorMessage(""))
	long := strings.Repeat("é", maxErrorMessageLen)
	got := cleanErrorMessage(long)
	require.True(t, strings.HasSuffix(got, " … (truncated)"))
	require.LessOrEqual(t, len(got), maxErrorMessageLen+len(" … (truncated)"))
	require.True(t, utf8.ValidString(got))
}
