package pgerr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// One row per SQLSTATE class PostgreSQL defines (Appendix A), with a representative code, plus the codes that
// differ from their class.
func TestClassifyEverySQLSTATEClass(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code string
		want Kind
		what string
	}{
		{"00000", KindPermanent, "successful completion (never an error; not retried)"},
		{"01000", KindPermanent, "warning"},
		{"02000", KindPermanent, "no data"},
		{"03000", KindPermanent, "SQL statement not yet complete"},
		{"08000", KindTransient, "connection exception"},
		{"08006", KindTransient, "connection failure"},
		{"08P01", KindTransient, "protocol violation"},
		{"09000", KindPermanent, "triggered action exception"},
		{"0A000", KindPermanent, "feature not supported"},
		{"0B000", KindPermanent, "invalid transaction initiation"},
		{"0F000", KindPermanent, "locator exception"},
		{"0L000", KindPermanent, "invalid grantor"},
		{"0P000", KindPermanent, "invalid role specification"},
		{"0Z000", KindPermanent, "diagnostics exception"},
		{"20000", KindPermanent, "case not found"},
		{"21000", KindPermanent, "cardinality violation"},
		{"22000", KindPermanent, "data exception"},
		{"22P05", KindPermanent, "untranslatable character (\\u0000 in jsonb)"},
		{"22003", KindPermanent, "numeric value out of range"},
		{"22004", KindPermanent, "null value not allowed"},
		{"23505", KindPermanent, "unique violation"},
		{"24000", KindPermanent, "invalid cursor state"},
		{"25000", KindPermanent, "invalid transaction state"},
		{"25P02", KindPermanent, "in failed SQL transaction"},
		{"25006", KindTransient, "read-only SQL transaction (a standby during failover)"},
		{"26000", KindPermanent, "invalid SQL statement name"},
		{"27000", KindPermanent, "triggered data change violation"},
		{"28P01", KindPermanent, "invalid password"},
		{"2B000", KindPermanent, "dependent privilege descriptors still exist"},
		{"2D000", KindPermanent, "invalid transaction termination"},
		{"2F000", KindPermanent, "SQL routine exception"},
		{"34000", KindPermanent, "invalid cursor name"},
		{"38000", KindPermanent, "external routine exception"},
		{"39000", KindPermanent, "external routine invocation exception"},
		{"3B000", KindPermanent, "savepoint exception"},
		{"3D000", KindPermanent, "invalid catalog name (unknown database)"},
		{"3F000", KindPermanent, "invalid schema name"},
		{"40000", KindTransient, "transaction rollback"},
		{"40001", KindTransient, "serialization failure"},
		{"40P01", KindTransient, "deadlock detected"},
		{"40002", KindPermanent, "transaction integrity constraint violation"},
		{"42883", KindPermanent, "undefined function"},
		{"42501", KindPermanent, "insufficient privilege"},
		{"44000", KindPermanent, "with check option violation"},
		{"53000", KindTransient, "insufficient resources"},
		{"53100", KindTransient, "disk full"},
		{"53200", KindTransient, "out of memory"},
		{"53300", KindTransient, "too many connections"},
		{"54000", KindPermanent, "program limit exceeded (jsonb over 255 MB)"},
		{"54001", KindPermanent, "statement too complex (stack depth)"},
		{"55000", KindPermanent, "object not in prerequisite state"},
		{"55006", KindTransient, "object in use"},
		{"55P03", KindTransient, "lock not available (lock_timeout)"},
		{"57000", KindTransient, "operator intervention"},
		{"57014", KindTransient, "query canceled (statement_timeout)"},
		{"57P01", KindTransient, "admin shutdown"},
		{"57P02", KindTransient, "crash shutdown"},
		{"57P03", KindTransient, "cannot connect now"},
		{"57P04", KindPermanent, "database dropped"},
		{"57P05", KindTransient, "idle session timeout"},
		{"58000", KindTransient, "system error"},
		{"58030", KindTransient, "I/O error"},
		{"58P01", KindPermanent, "undefined file"},
		{"58P02", KindPermanent, "duplicate file"},
		{"72000", KindTransient, "snapshot too old"},
		{"F0000", KindPermanent, "configuration file error"},
		{"HV000", KindPermanent, "foreign data wrapper error"},
		{"P0001", KindPermanent, "raise exception"},
		{"P0004", KindPermanent, "assert failure"},
		{"XX000", KindPermanent, "internal error"},
		{"XX001", KindPermanent, "data corrupted"},
		{"ZZ999", KindPermanent, "a class PostgreSQL does not define: the server answered"},
		{"5", KindPermanent, "malformed code"},
	}
	for _, tc := range tests {
		t.Run(tc.code, func(t *testing.T) {
			err := fmt.Errorf("sqlapi: call: %w", &pgconn.PgError{Code: tc.code, Message: tc.what})
			require.Equal(t, tc.want, Classify(err), "%s (%s)", tc.code, tc.what)
			require.Equal(t, tc.want, ClassifyCode(tc.code))
			require.Equal(t, tc.want == KindTransient, Transient(err))
			require.Equal(t, tc.want == KindPermanent, Permanent(err))
			require.Equal(t, tc.code, Code(err))
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassifyErrorsWithoutSQLSTATE(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want Kind
	}{
		{"nil", nil, KindNone},
		{"context canceled", fmt.Errorf("query: %w", context.Canceled), KindCanceled},
		{"deadline exceeded", fmt.Errorf("query: %w", context.DeadlineExceeded), KindCanceled},
		{"canceled wins over a server error", errors.Join(&pgconn.PgError{Code: "57014"}, context.Canceled), KindCanceled},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, KindTransient},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), KindTransient},
		{"network timeout", fmt.Errorf("read: %w", timeoutErr{}), KindTransient},
		{"unexpected EOF", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), KindTransient},
		{"EOF", io.EOF, KindTransient},
		{"conn closed", errors.New("conn closed"), KindTransient},
		{"closed pool", errors.New("closed pool"), KindPermanent},
		{"unknown", errors.New("something odd"), KindTransient},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Classify(tc.err), "%v", tc.err)
		})
	}
}

func TestMissingSchemaHint(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"42883", "42P01", "3F000"} {
		err := fmt.Errorf("x: %w", &pgconn.PgError{Code: code})
		require.True(t, MissingSchema(err), code)
		require.Contains(t, SchemaHint(err), "pgflow migrate up")
	}
	require.False(t, MissingSchema(&pgconn.PgError{Code: "42501"}))
	require.Empty(t, SchemaHint(errors.New("x")))
	require.Equal(t, "transient", KindTransient.String())
}

func TestMisconfiguredAndReason(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		"42883": true, "42501": true, "3F000": true, "28P01": true, "3D000": true, "57P04": true,
		"26000": true, "42P05": true, // a pooler lost or duplicated a prepared statement: the setup, not the output
		"22P05": false, "54000": false, "54001": false, "P0001": false, "XX000": false, "40001": false, "": false,
	} {
		require.Equal(t, want, Misconfigured(fmt.Errorf("x: %w", &pgconn.PgError{Code: code})), code)
	}
	require.Equal(t, "unsupported Unicode escape sequence (\\u0000 cannot be converted to text.; SQLSTATE 22P05)",
		Reason(fmt.Errorf("sqlapi: call: %w", &pgconn.PgError{Code: "22P05", Message: "unsupported Unicode escape sequence", Detail: "\\u0000 cannot be converted to text."})))
	require.Equal(t, "stack depth limit exceeded (SQLSTATE 54001)", Reason(&pgconn.PgError{Code: "54001", Message: "stack depth limit exceeded"}))
	require.Equal(t, "plain", Reason(errors.New("plain")))
}

func TestFinalErrorsArePermanent(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("schema too old: %w", ErrFinal)
	require.Equal(t, KindPermanent, Classify(err))
	require.Equal(t, KindTransient, Classify(errors.New("something on the way")))
}
