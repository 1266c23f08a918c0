// Package upgrade holds the upgrade tests of the pgflow schema: a database migrated to an older release only, filled
// through that release's SQL API, then upgraded with the migrator and checked row by row.
package upgrade
