// Package pgerr is the one classification of database errors in pgflow-go: whether an error is worth retrying
// (Transient), is the database's final answer to the request (Permanent), or only says that the caller gave up
// (Canceled). The worker, the client, the CLI and the dashboard all decide with it, so one SQLSTATE never means
// "retry" in one place and "give up" in another.
//
// The rules, in order:
//
//  1. nil is not an error (KindNone).
//  2. An error that wraps context.Canceled or context.DeadlineExceeded is KindCanceled: the caller's context
//     ended, neither retrying nor reporting the database's verdict makes sense.
//  3. A *pgconn.PgError is classified by its SQLSTATE: a few specific codes first, then the class (the first two
//     characters). A code of a class not listed is permanent: the server answered the request.
//  4. Errors of the connection itself (a lost or refused connection, a network timeout, an unexpected EOF, a
//     connection closed under the statement) are transient.
//  5. A closed pool is permanent: nothing will reopen it.
//  6. Anything else is transient: an error that is not the server's answer most likely comes from the way to it,
//     and giving up would lose a result that a retry can still record.
package pgerr

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgflow-go/pgflow/internal/backoff"
)

// Kind is what a caller should do about an error.
type Kind int

const (
	// KindNone: no error.
	KindNone Kind = iota
	// KindTransient: the same request may succeed later (a lost connection, a deadlock, the server restarting,
	// a statement or lock timeout, too many connections); retry it with backoff.
	KindTransient
	// KindPermanent: the database refused the request itself (bad input, a missing object, a constraint, a
	// program limit such as a jsonb value that is too large); the same request fails again, do not retry it.
	KindPermanent
	// KindCanceled: the caller's context was cancelled or its deadline passed; stop.
	KindCanceled
)

func (k Kind) String() string {
	switch k {
	case KindNone:
		return "none"
	case KindTransient:
		return "transient"
	case KindPermanent:
		return "permanent"
	case KindCanceled:
		return "canceled"
	}
	return "unknown"
}

// classes maps SQLSTATE classes (the first two characters of a code) to a kind. Classes not listed are
// permanent. The specific codes of codes take precedence.
var classes = map[string]Kind{
	"08": KindTransient, // connection exception
	"25": KindPermanent, // invalid transaction state (except 25006, see codes)
	"40": KindTransient, // transaction rollback: serialization failure, deadlock
	"53": KindTransient, // insufficient resources: disk full, out of memory, too many connections
	"54": KindPermanent, // program limit exceeded: e.g. a jsonb value over 255 MB, stack depth
	"55": KindPermanent, // object not in prerequisite state (except lock and in-use, see codes)
	"57": KindTransient, // operator intervention: server shutdown, query cancelled, statement timeout
	"58": KindTransient, // system error: I/O errors (except missing or duplicate files, see codes)
	"72": KindTransient, // snapshot too old
	"XX": KindPermanent, // internal error, data or index corrupted
}

// codes maps specific SQLSTATE codes to a kind, overriding their class.
var codes = map[string]Kind{
	"25006": KindTransient, // read_only_sql_transaction: a standby or a database being failed over
	"40002": KindPermanent, // transaction_integrity_constraint_violation
	"55006": KindTransient, // object_in_use
	"55P03": KindTransient, // lock_not_available (lock_timeout, NOWAIT)
	"57P04": KindPermanent, // database_dropped
	"58P01": KindPermanent, // undefined_file
	"58P02": KindPermanent, // duplicate_file
}

// Classify returns the kind of err; see the package documentation for the rules.
func Classify(err error) Kind {
	if err == nil {
		return KindNone
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return KindCanceled
	}
	if code := Code(err); code != "" {
		return ClassifyCode(code)
	}
	if errors.Is(err, ErrFinal) {
		return KindPermanent
	}
	if connectionError(err) {
		return KindTransient
	}
	if strings.Contains(err.Error(), "closed pool") {
		return KindPermanent
	}
	return KindTransient
}

// ClassifyCode returns the kind of a SQLSTATE code (five characters; anything else is permanent).
func ClassifyCode(code string) Kind {
	if k, ok := codes[code]; ok {
		return k
	}
	if len(code) == 5 {
		if k, ok := classes[code[:2]]; ok {
			return k
		}
	}
	return KindPermanent
}

// ErrFinal marks an error that retrying cannot fix although it carries no SQLSTATE (for example a schema that
// is too old, found by reading its version): wrap it (fmt.Errorf("...: %w", ..., pgerr.ErrFinal)) and the error
// is KindPermanent.
var ErrFinal = errors.New("final")

// Transient reports whether retrying the request that failed with err may succeed.
func Transient(err error) bool { return Classify(err) == KindTransient }

// Permanent reports whether err is the database's final answer: retrying the same request fails again.
func Permanent(err error) bool { return Classify(err) == KindPermanent }

// Code returns the SQLSTATE of the *pgconn.PgError err wraps, or "".
func Code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// MissingSchema reports whether err says that a pgflow or pgmq object is missing (an undefined function or
// table, an unknown schema), i.e. the schema is not installed or older than the caller.
func MissingSchema(err error) bool {
	switch Code(err) {
	case "42883", "42P01", "3F000":
		return true
	}
	return false
}

// SchemaHint returns a suggestion to install the schema when MissingSchema(err), else "".
func SchemaHint(err error) string {
	if MissingSchema(err) {
		return " (is the pgflow schema installed? run `pgflow migrate up`)"
	}
	return ""
}

// connectionError reports whether err comes from the connection rather than from the server's answer.
func connectionError(err error) bool {
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "conn busy") ||
		strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe")
}

// Misconfigured reports whether err says that the database cannot serve this kind of request at all, whatever
// its arguments: the schema is missing or older than the caller (class 42 syntax/undefined objects, 3F), the role
// lacks a privilege or cannot log in (28, 0L, 0P), the database is unknown or gone (3D, 57P04), or a prepared
// statement went missing or exists twice (26000, and 42P05 in class 42) — what pgx's default query mode meets behind
// a transaction-mode pooler (docs/deploy.md). Such an error is no verdict on the data a request carried.
func Misconfigured(err error) bool {
	code := Code(err)
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "42", "3F", "28", "0L", "0P", "3D", "26":
		return true
	}
	return code == "57P04"
}

// Reason renders err for a stored error message: the server's message and SQLSTATE for a database error (no
// statement text or call wrapping), err.Error() otherwise.
func Reason(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if pgErr.Detail != "" {
			return pgErr.Message + " (" + pgErr.Detail + "; SQLSTATE " + pgErr.Code + ")"
		}
		return pgErr.Message + " (SQLSTATE " + pgErr.Code + ")"
	}
	return err.Error()
}

// Retry calls fn until it returns nil or an error that is not Transient, waiting between calls per policy. When
// ctx ends during a wait, fn is called once more (a last chance for a result that may still be recorded) and its
// error, if any, is returned. onRetry, when not nil, is told about each transient failure before the wait.
func Retry(ctx context.Context, policy backoff.Policy, onRetry func(n int, delay time.Duration, err error),
	fn func(ctx context.Context) error) error {
	for n := 1; ; n++ {
		err := fn(ctx)
		if err == nil || !Transient(err) || ctx.Err() != nil {
			return err
		}
		delay := policy.Delay(n)
		if onRetry != nil {
			onRetry(n, delay, err)
		}
		_ = backoff.Sleep(ctx, delay)
	}
}

// Raised returns the message of an exception a pgflow function raised on purpose (RAISE EXCEPTION without an
// error code, SQLSTATE P0001): one of the SQL API's own checks, such as a root map step given a non-array input.
func Raised(err error) (message string, ok bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "P0001" {
		return pgErr.Message, true
	}
	return "", false
}
