package sqlapi

import "github.com/jackc/pgx/v5/pgtype"

// pgx has no binary encoding of a Go string as a uuid: a uuid or uuid[] parameter given as strings is first tried
// in binary, fails with an error that formats the whole value, and is then sent as text. On the task path (run ids
// of a batch of completions) that failed attempt cost more than the rest of the encoding. uuidArg and uuidsArg
// hand pgx the ids as pgtype.UUID instead, which it encodes in binary at once; a value that is not a canonical
// UUID is passed on as the string it was, for the database to report.

// uuidArg is id as a uuid parameter.
func uuidArg(id string) any {
	if u, ok := parseCanonicalUUID(id); ok {
		return u
	}
	return id
}

// uuidsArg is ids as a uuid[] parameter.
func uuidsArg(ids []string) any {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		u, ok := parseCanonicalUUID(id)
		if !ok {
			return ids
		}
		out[i] = u
	}
	return out
}

// parseCanonicalUUID parses the 36-character form xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (either case).
func parseCanonicalUUID(s string) (pgtype.UUID, bool) {
	var u pgtype.UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	i := 0
	for j := range u.Bytes {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++ // a hyphen, checked above
		}
		hi, ok1 := hexVal(s[i])
		lo, ok2 := hexVal(s[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u.Bytes[j] = hi<<4 | lo
		i += 2
	}
	u.Valid = true
	return u, true
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
