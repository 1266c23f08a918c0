package sqlapi

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// A run's document (pgflow.get_run_with_states, and every start that returns the run) is decoded on each start
// and each read of a run. With encoding/json that was most of what a coalesced start cost the client: 5.8 µs and
// 22 allocations for a one-step run (docs/performance-rounds.md, twenty-fourth round). The documents are jsonb's
// output, so their keys are the known column names and their text is canonical; readRunDoc reads that shape
// directly and reports false on anything else, which decodeRunWithStates then hands to encoding/json. The two
// give the same value for every document (TestRunDocMatchesEncodingJSON, FuzzRunDoc).

// docReader walks one document; ok turns false at the first byte it does not expect, and stays false.
type docReader struct {
	b  []byte
	i  int
	ok bool
}

func readRunDoc(raw []byte) (*RunWithStates, bool) {
	d := docReader{b: raw, ok: true}
	out := new(RunWithStates)
	for more := d.open('{'); more; more = d.more('}') {
		switch string(d.key()) {
		case "run":
			for more := d.open('{'); more; more = d.more('}') {
				d.runField(&out.Run, d.key())
			}
		case "steps":
			if d.null() {
				continue
			}
			out.Steps = make([]StepStateRow, 0, 1)
			for more := d.open('['); more; more = d.more(']') {
				out.Steps = append(out.Steps, StepStateRow{})
				s := &out.Steps[len(out.Steps)-1]
				for more := d.open('{'); more; more = d.more('}') {
					d.stepField(s, d.key())
				}
			}
		default:
			d.ok = false
		}
	}
	d.ws()
	if !d.ok || d.i != len(d.b) {
		return nil, false
	}
	return out, true
}

func (d *docReader) runField(r *RunRow, key []byte) {
	switch string(key) {
	case "run_id":
		d.str(&r.RunID)
	case "flow_slug":
		d.str(&r.FlowSlug)
	case "status":
		d.str(&r.Status)
	case "input":
		r.Input = d.raw()
	case "output":
		r.Output = d.raw()
	case "remaining_steps":
		d.int(&r.RemainingSteps)
	case "started_at":
		d.time(&r.StartedAt)
	case "completed_at":
		r.CompletedAt = d.timePtr()
	case "failed_at":
		r.FailedAt = d.timePtr()
	case "cancelled_at":
		r.CancelledAt = d.timePtr()
	case "cancel_reason":
		r.CancelReason = d.strPtr()
	case "retry_of":
		r.RetryOf = d.strPtr()
	default:
		d.ok = false
	}
}

func (d *docReader) stepField(s *StepStateRow, key []byte) {
	switch string(key) {
	case "flow_slug":
		d.str(&s.FlowSlug)
	case "run_id":
		d.str(&s.RunID)
	case "step_slug":
		d.str(&s.StepSlug)
	case "status":
		d.str(&s.Status)
	case "remaining_tasks":
		s.RemainingTasks = d.intPtr()
	case "remaining_deps":
		d.int(&s.RemainingDeps)
	case "initial_tasks":
		s.InitialTasks = d.intPtr()
	case "output":
		s.Output = d.raw()
	case "error_message":
		s.ErrorMessage = d.strPtr()
	case "skip_reason":
		s.SkipReason = d.strPtr()
	case "created_at":
		d.time(&s.CreatedAt)
	case "started_at":
		s.StartedAt = d.timePtr()
	case "completed_at":
		s.CompletedAt = d.timePtr()
	case "failed_at":
		s.FailedAt = d.timePtr()
	case "skipped_at":
		s.SkippedAt = d.timePtr()
	default:
		d.ok = false
	}
}

func (d *docReader) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips white space and consumes c if it comes next.
func (d *docReader) next(c byte) bool {
	d.ws()
	if d.ok && d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *docReader) expect(c byte) {
	if !d.next(c) {
		d.ok = false
	}
}

// null consumes a null if one comes next.
func (d *docReader) null() bool {
	d.ws()
	if d.ok && len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

// open consumes the opening bracket of an object ('{') or array ('[') and reports whether a member follows; more
// consumes what follows a member (a comma, or the closing bracket) and reports whether another one follows. Read
// an object as: for more := d.open('{'); more; more = d.more('}') { key := d.key(); read the value }.
func (d *docReader) open(bracket byte) bool {
	d.expect(bracket)
	closing := byte('}')
	if bracket == '[' {
		closing = ']'
	}
	return d.ok && !d.next(closing)
}

func (d *docReader) more(closing byte) bool {
	if d.next(',') {
		return true
	}
	d.expect(closing)
	return false
}

// key reads a member's key and its colon. Keys with escapes are not column names: they fail the document.
func (d *docReader) key() []byte {
	text, escaped := d.quoted()
	d.expect(':')
	if !d.ok || escaped {
		d.ok = false
		return nil
	}
	return text[1 : len(text)-1]
}

// quoted consumes the string that comes next and returns its text with the quotes, and whether it has escapes;
// ok turns false if no string comes next or it does not end.
func (d *docReader) quoted() (text []byte, escaped bool) {
	d.ws()
	if !d.ok || d.i >= len(d.b) || d.b[d.i] != '"' {
		d.ok = false
		return nil, false
	}
	for j := d.i + 1; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			text, d.i = d.b[d.i:j+1], j+1
			return text, escaped
		case c == '\\':
			escaped = true
			j++
		case c < 0x20:
			d.ok = false
			return nil, false
		}
	}
	d.ok = false
	return nil, false
}

// str reads a string into dst; null leaves dst as it is (as encoding/json does).
func (d *docReader) str(dst *string) {
	if d.null() {
		return
	}
	text, escaped := d.quoted()
	if !d.ok {
		return
	}
	switch body := text[1 : len(text)-1]; {
	case escaped:
		if json.Unmarshal(text, dst) != nil {
			d.ok = false
		}
	case utf8.Valid(body):
		*dst = string(body)
	default: // encoding/json replaces invalid bytes with U+FFFD: leave that to it
		d.ok = false
	}
}

func (d *docReader) strPtr() *string {
	if d.null() {
		return nil
	}
	s := new(string)
	d.str(s)
	return s
}

func (d *docReader) number() []byte {
	d.ws()
	start := d.i
	for d.i < len(d.b) && (d.b[d.i] == '-' || d.b[d.i] >= '0' && d.b[d.i] <= '9') {
		d.i++
	}
	n := d.b[start:d.i]
	digits := n
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || digits[0] == '-' || len(digits) > 1 && digits[0] == '0' {
		d.ok = false // not a JSON number
	}
	return n
}

// int reads an integer into dst; null leaves dst as it is. Fractions and exponents fail the document (the
// columns are integers, and encoding/json would refuse them too).
func (d *docReader) int(dst *int) {
	if d.null() || !d.ok {
		return
	}
	n, err := strconv.Atoi(string(d.number()))
	if err != nil {
		d.ok = false
		return
	}
	*dst = n
}

func (d *docReader) intPtr() *int {
	if d.null() {
		return nil
	}
	n := new(int)
	d.int(n)
	return n
}

// time reads an RFC 3339 timestamp into dst, as time.Time's UnmarshalJSON does; null leaves dst as it is.
func (d *docReader) time(dst *time.Time) {
	if d.null() {
		return
	}
	if text, _ := d.quoted(); d.ok && dst.UnmarshalJSON(text) != nil {
		d.ok = false
	}
}

func (d *docReader) timePtr() *time.Time {
	if d.null() {
		return nil
	}
	t := new(time.Time)
	d.time(t)
	return t
}

// raw returns the next value's text (a copy, as json.RawMessage keeps one); null is "null", as encoding/json
// gives a json.RawMessage field. skip only finds where the value ends; json.Valid then checks it, as encoding/json
// checks the whole document.
func (d *docReader) raw() json.RawMessage {
	d.ws()
	start := d.i
	d.skip(0)
	if !d.ok || !json.Valid(d.b[start:d.i]) {
		d.ok = false
		return nil
	}
	return append(json.RawMessage(nil), d.b[start:d.i]...)
}

// skip passes over one value: strings with their escapes, nested objects and arrays, literals and numbers.
func (d *docReader) skip(depth int) {
	d.ws()
	if !d.ok || d.i >= len(d.b) || depth > 10000 {
		d.ok = false
		return
	}
	switch c := d.b[d.i]; {
	case c == '"':
		d.quoted()
	case c == '{':
		for more := d.open('{'); more; more = d.more('}') {
			d.quoted() // any key, escaped or not
			d.expect(':')
			d.skip(depth + 1)
		}
	case c == '[':
		for more := d.open('['); more; more = d.more(']') {
			d.skip(depth + 1)
		}
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
				d.i += len(lit)
				return
			}
		}
		d.ok = false
	case c == '-' || c >= '0' && c <= '9':
		for d.i < len(d.b) && (d.b[d.i] == '-' || d.b[d.i] == '+' || d.b[d.i] == '.' || d.b[d.i] == 'e' ||
			d.b[d.i] == 'E' || d.b[d.i] >= '0' && d.b[d.i] <= '9') {
			d.i++
		}
	default:
		d.ok = false
	}
}
