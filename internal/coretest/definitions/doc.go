// Package definitions holds the tests of pgflow's SQL definition functions (flows, steps, shapes, compilation,
// deletion, worker bookkeeping) and of the tables' constraints. The tests live in package definitions_test; each
// one runs against its own real PostgreSQL database from internal/pgtest.
package definitions
