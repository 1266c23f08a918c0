package dashboard

// Query and path parameters: page sizes and their limits, run statuses, run ids, numeric parameters.

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Page sizes and limits.
const (
	defaultPageSize = 50
	maxPageSize     = 500
	recentRuns      = 20
	tasksPerStep    = 200
)

var runStatuses = []string{"started", "completed", "failed", "cancelled"}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// canonicalUUID returns id in PostgreSQL's lower-case text form, or false when it is not a UUID.
func canonicalUUID(id string) (string, bool) {
	if !uuidRE.MatchString(id) {
		return "", false
	}
	return strings.ToLower(id), true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// maxPage is the highest page number the run list accepts.
const maxPage = math.MaxInt32

// intParam reads the numeric query parameter name: def when it is absent, an error naming the parameter and
// the bad value when it is not a whole number from lo to hi (also when it repeats with different values, or
// does not fit an int).
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	vals := q[name]
	if len(vals) == 0 {
		return def, nil
	}
	raw := vals[0]
	for _, v := range vals[1:] {
		if v != raw {
			return 0, fmt.Errorf("%s is given more than once with different values (%q and %q)", name, raw, v)
		}
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < int64(lo) || n > int64(hi) {
		return 0, fmt.Errorf("%s must be a whole number from %d to %d (got %s=%q)", name, lo, hi, name, raw)
	}
	return int(n), nil
}
