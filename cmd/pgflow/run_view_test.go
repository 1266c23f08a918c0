package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInputPreview(t *testing.T) {
	t.Parallel()
	const id = "0f8fad5b-d9cb-469f-a165-70867728950e"
	require.Equal(t, `{"a":[1,2],"b":"x  y"}`, inputPreview(id, json.RawMessage("{\"a\": [1,\n 2], \"b\": \"x  y\"}")))
	require.Equal(t, "null", inputPreview(id, nil))
	long := json.RawMessage(`["` + strings.Repeat("ä", 300) + `"]`)
	got := inputPreview(id, long)
	require.True(t, strings.HasPrefix(got, `["`+strings.Repeat("ä", inputPreviewChars-2)+"… (truncated: the input has 604 bytes; "), got)
	require.True(t, strings.HasSuffix(got, "'pgflow runs show "+id+" --json' prints it whole)"), got)
	// Exactly the limit is not cut.
	exact := json.RawMessage(`"` + strings.Repeat("x", inputPreviewChars-2) + `"`)
	require.Equal(t, string(exact), inputPreview(id, exact))
}
