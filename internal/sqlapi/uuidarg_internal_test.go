package sqlapi

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

func TestParseCanonicalUUID(t *testing.T) {
	t.Parallel()
	u, ok := parseCanonicalUUID("7B0E5e4c-6a3b-4c1e-9a55-1f3e0d6c9c11")
	require.True(t, ok)
	require.Equal(t, [16]byte{0x7b, 0x0e, 0x5e, 0x4c, 0x6a, 0x3b, 0x4c, 0x1e, 0x9a, 0x55, 0x1f, 0x3e, 0x0d, 0x6c, 0x9c, 0x11}, u.Bytes)
	require.True(t, u.Valid)
	// pgx's own parser agrees, and binary encoding works for the parsed value.
	var want pgtype.UUID
	require.NoError(t, want.Scan("7b0e5e4c-6a3b-4c1e-9a55-1f3e0d6c9c11"))
	require.Equal(t, want, u)
	_, err := pgtype.NewMap().Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, uuidsArg([]string{"7b0e5e4c-6a3b-4c1e-9a55-1f3e0d6c9c11"}), nil)
	require.NoError(t, err)

	for _, bad := range []string{"", "not-a-uuid", "7b0e5e4c6a3b4c1e9a551f3e0d6c9c11", "7b0e5e4c-6a3b-4c1e-9a55-1f3e0d6c9c1g",
		"7b0e5e4c+6a3b-4c1e-9a55-1f3e0d6c9c11", "7b0e5e4c-6a3b-4c1e-9a55-1f3e0d6c9c111"} {
		_, ok := parseCanonicalUUID(bad)
		require.False(t, ok, bad)
		require.Equal(t, bad, uuidArg(bad), "passed on as it was")
	}
	ids := []string{"7b0e5e4c-6a3b-4c1e-9a55-1f3e0d6c9c11", "nope"}
	require.Equal(t, ids, uuidsArg(ids), "one bad id: the strings are passed on for the database to report")
}
