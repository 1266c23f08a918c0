package schema

// SetMigrationsForTest replaces the lineage a migrator applies; only tests use it.
func SetMigrationsForTest(m *Migrator, migs []Migration) {
	m.migrations = func() ([]Migration, error) { return migs, nil }
}
