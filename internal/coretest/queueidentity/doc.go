// Package queueidentity holds the SQL-level tests of schema v0.17.0's queue identity: tasks remember their physical
// queue, (queue_name, message_id), and every message operation after task creation uses that snapshot. The tests
// run against a real PostgreSQL server (internal/pgtest) and use the internal SQL fixture fixture.RouteSteps to route
// steps to a second queue, which is not a public API.
package queueidentity
