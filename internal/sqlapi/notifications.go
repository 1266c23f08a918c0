package sqlapi

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Notifications are what a committed call deferred (schema v0.20.0): the JSON array of [channel, payload] pairs
// pgflow._notify collected instead of notifying, in the order the call made them. "" means none.
//
// PostgreSQL serialises the commits of notifying transactions with one cluster-wide lock that each holds through
// its commit's WAL flush, so concurrent starts and completions that notify cannot share a flush: on a disk whose
// flush takes a millisecond, a few hundred of them per second is the ceiling, however many cores there are. A call
// that defers its notifications commits like any other write, and Send then delivers them in a transaction that
// writes nothing but its commit record and does not wait for the flush (synchronous_commit off for it alone:
// losing that commit in a crash loses only notifications, which a crash loses anyway).
type Notifications string

// DeferNotificationsBelow is the number of runs or results from which a call keeps its notifications inside its
// transaction. Deferring lets small, frequent commits share WAL flushes; a large batch commits rarely, and sending
// its notifications in a second transaction costs more than it saves (measured on two cores, batches of 200
// one-step results: about 15 % more server CPU per task deferred).
const DeferNotificationsBelow = 16

// deferNotifications runs the statements queue adds in one batch (one implicit transaction: all or nothing). For a
// call of fewer than DeferNotificationsBelow runs or results (n) it turns pgflow.defer_notifications on for that
// transaction and reads what it deferred; a larger call notifies inside its transaction and returns none.
func deferNotifications(ctx context.Context, db Batcher, n int, queue func(b *pgx.Batch)) (Notifications, error) {
	var b pgx.Batch
	d := queueDeferNotifications(&b, n, queue)
	if err := db.SendBatch(ctx, &b).Close(); err != nil {
		return "", err
	}
	return d.notifications(), nil
}

// deferred is what queueDeferNotifications reads back, once the batch has run.
type deferred struct{ pending *string }

func (d *deferred) notifications() Notifications {
	if d.pending == nil || *d.pending == "[]" {
		return ""
	}
	return Notifications(*d.pending)
}

// queueDeferNotifications adds to b, inside one transaction, the statements queue adds, preceded and followed
// by those that defer the notifications of a call of n runs or results (see deferNotifications).
func queueDeferNotifications(b *pgx.Batch, n int, queue func(b *pgx.Batch)) *deferred {
	d := new(deferred)
	deferring := n < DeferNotificationsBelow
	if deferring {
		// Start from an empty list: a session-level value someone set on this pooled connection is not ours to send.
		b.Queue(`select pg_catalog.set_config('pgflow.defer_notifications', 'on', true),
		                pg_catalog.set_config('pgflow.deferred_notifications', '', true)`)
	}
	queue(b)
	if deferring {
		b.Queue(`select pg_catalog.current_setting('pgflow.deferred_notifications', true)`).QueryRow(func(row pgx.Row) error {
			return row.Scan(&d.pending)
		})
	}
	return d
}

// Send delivers the notifications, in order, in one transaction that does not wait for its commit's WAL flush.
// Nothing to send costs nothing. An error means none was delivered (listeners then miss these events, and workers
// find the tasks at their next periodic read).
func (n Notifications) Send(ctx context.Context, db Batcher) error {
	if n == "" {
		return nil
	}
	var b pgx.Batch
	b.Queue(`select pg_catalog.set_config('synchronous_commit', 'off', true)`)
	// pg_notify is volatile, so it runs after the sort: in the order of the array.
	b.Queue(`select pg_catalog.pg_notify(e.v ->> 0, e.v ->> 1)
	           from pg_catalog.jsonb_array_elements($1::jsonb) with ordinality as e (v, i)
	          order by e.i`, string(n))
	if err := db.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("send deferred notifications: %w", err)
	}
	return nil
}
