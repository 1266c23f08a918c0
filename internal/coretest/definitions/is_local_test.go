package definitions_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

const supabaseLocalJWTSecret = "super-secret-jwt-token-with-at-least-32-characters-long"

func TestIsLocal(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	ctx := context.Background()

	cases := []struct {
		name     string
		settings map[string]string
		want     bool
	}{
		{"nothing set", nil, false},
		{"pgflow.environment local", map[string]string{"pgflow.environment": "local"}, true},
		{"pgflow.environment production", map[string]string{"pgflow.environment": "production"}, false},
		{"pgflow.environment is case-sensitive", map[string]string{"pgflow.environment": "Local"}, false},
		{"pgflow.environment empty", map[string]string{"pgflow.environment": ""}, false},
		{"Supabase local JWT secret", map[string]string{"app.settings.jwt_secret": supabaseLocalJWTSecret}, true},
		{"other JWT secret", map[string]string{"app.settings.jwt_secret": "a-production-secret-of-sufficient-length"}, false},
		{"empty JWT secret", map[string]string{"app.settings.jwt_secret": ""}, false},
		{"either is enough", map[string]string{"pgflow.environment": "production", "app.settings.jwt_secret": supabaseLocalJWTSecret}, true},
	}
	for _, c := range cases {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		for k, v := range c.settings {
			_, err := tx.Exec(ctx, `select set_config($1, $2, true)`, k, v)
			require.NoError(t, err)
		}
		var got bool
		require.NoError(t, tx.QueryRow(ctx, `select pgflow.is_local()`).Scan(&got))
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, c.want, got, c.name)
	}
}

func TestIsLocalFromDatabaseSetting(t *testing.T) {
	t.Parallel()
	db := newDBFull(t)
	ctx := context.Background()
	var stmt string
	require.NoError(t, db.Pool.QueryRow(ctx,
		`select format('alter database %I set pgflow.environment = %L', current_database(), 'local')`).Scan(&stmt))
	_, err := db.Pool.Exec(ctx, stmt)
	require.NoError(t, err)

	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var got bool
	require.NoError(t, conn.QueryRow(ctx, `select pgflow.is_local()`).Scan(&got))
	require.True(t, got, "a new session of a database with pgflow.environment=local is local")
}
