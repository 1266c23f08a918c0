// Package runtime holds the Go tests of the runtime half of pgflow's SQL core (starting runs, claiming,
// completing and failing tasks, cascades, conditions, map steps, maintenance, events). Every test runs against
// its own real PostgreSQL database from internal/pgtest.
package runtime
