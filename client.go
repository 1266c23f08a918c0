package pgflow

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow/internal/coalesce"
	"github.com/pgflow-go/pgflow/internal/notify"
	"github.com/pgflow-go/pgflow/internal/pgerr"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// Client starts runs, reads them, waits for them to finish and streams their events; a Worker built on it
// shares its LISTEN connection. It is safe for concurrent use. Create it with NewClient and Close it when done.
//
// Reads and starts go through the pool. Waiting, subscribing and the workers' queue wake-ups share one extra
// dedicated connection that LISTENs for the database's notifications; it is opened on first use, re-opened with
// backoff if it breaks, and closed by Close. The first call that reaches the database checks the schema version
// once: a schema older than this code fails with a message saying to run `pgflow migrate up`.
type Client struct {
	pool         *pgxpool.Pool
	log          *slog.Logger
	pollInterval time.Duration
	listenConfig *pgx.ConnConfig

	mu       sync.Mutex
	listener *notify.Listener
	closed   bool

	schemaOK atomic.Bool
	// read reads a run with its step states; WaitRun and Subscribe read through it.
	read func(ctx context.Context, id string) (*Run, error)
	// starts coalesces concurrent StartRun calls of one flow (no transaction, no run id) into
	// start_flows_with_states calls (at most two in flight); startsOff is set once the role turned out not to be
	// allowed to call it.
	starts    *coalesce.Group[json.RawMessage, *sqlapi.RunWithStates]
	startsOff atomic.Bool
}

// ClientConfig configures a Client. The zero value of every field means its documented default.
type ClientConfig struct {
	// Logger receives listener reconnects and transient read errors. Default: slog.Default().
	Logger *slog.Logger
	// PollInterval is how often WaitRun re-reads a run when no event arrives (the fallback for events that cannot
	// arrive, e.g. while the listener reconnects). Default: 1s.
	PollInterval time.Duration
	// ListenConfig sets the connection settings of the dedicated LISTEN connection. Use it when the pool goes
	// through a pooler in transaction mode (PgBouncer), which does not deliver notifications: point this one at
	// the database directly. Default: a copy of the pool's connection config.
	ListenConfig *pgx.ConnConfig
}

// NewClient returns a Client that uses pool; cfg may be nil for the defaults. It does not touch the database.
// The pool is not closed by Client.Close.
func NewClient(pool *pgxpool.Pool, cfg *ClientConfig) (*Client, error) {
	if pool == nil {
		return nil, errors.New("pgflow: NewClient: pool is nil")
	}
	if cfg == nil {
		cfg = &ClientConfig{}
	}
	if cfg.PollInterval < 0 {
		return nil, fmt.Errorf("pgflow: ClientConfig.PollInterval = %s: must be positive (0 means the default, 1s)", cfg.PollInterval)
	}
	c := &Client{pool: pool, log: cfg.Logger, pollInterval: cfg.PollInterval, listenConfig: cfg.ListenConfig}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.pollInterval == 0 {
		c.pollInterval = time.Second
	}
	c.read = c.getRun
	c.starts = coalesce.New(c.startBatch, coalesce.Limits[json.RawMessage]{
		MaxBatch: maxCoalescedStarts, MaxInFlight: maxCoalescedStartsInFlight,
		Weight: func(in json.RawMessage) int { return len(in) }, MaxWeight: maxCoalescedStartBytes,
	})
	return c, nil
}

// Close stops the listener connection, if it was started, and ends every Subscribe channel. WaitRun calls in
// progress return ErrClientClosed; workers built on the client fall back to polling. Close is idempotent.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	l := c.listener
	c.mu.Unlock()
	if l != nil {
		l.Close()
	}
}

// checkSchema verifies, once per client (until it succeeds), that the database has a schema this code can use.
func (c *Client) checkSchema(ctx context.Context, db sqlapi.DBTX) error {
	if c.schemaOK.Load() {
		return nil
	}
	if _, err := sqlapi.SchemaVersion(ctx, db); err != nil {
		return err
	}
	c.schemaOK.Store(true)
	return nil
}

// StartOpts are the options of one start. A nil *StartOpts means the defaults.
type StartOpts struct {
	// RunID starts the run with a caller-chosen id (a UUID), which makes the start idempotent: if a run of the
	// same flow with that id already exists, the start returns it (as it is now) instead of starting another one,
	// also when several callers start it concurrently. The input of the existing run is not compared. An id that
	// belongs to a run of another flow gives ErrRunIDConflict. Empty: the database makes the id, a version 7 UUID
	// ordered by the start's millisecond (docs/sql-api.md, "Run ids"). Any UUID is accepted; time-ordered ones keep
	// starts cheap when the tables hold many runs, because new ids then land on the last pages of the indexes.
	RunID string
}

func (o *StartOpts) runID() string {
	if o == nil {
		return ""
	}
	return o.RunID
}

// StartRun starts a run of flow with input (encoded with encoding/json) and returns the run as it is at the end
// of the start: root steps are started, and a run whose steps are all taskless or skipped is already
// completed. The flow must exist in the database: a worker compiles it at startup, Client.EnsureFlow compiles it
// from the client, and flow.CompileSQL gives the statements for a migration.
func StartRun[I any](ctx context.Context, c *Client, flow *Flow[I], input I, opts *StartOpts) (*Run, error) {
	raw, err := encodeStart(flow, opts.runID(), input)
	if err != nil {
		return nil, err
	}
	return c.StartRunJSON(ctx, flow.Slug(), raw, opts)
}

// StartRunTx is StartRun inside the caller's transaction (see Client.StartRunJSONTx).
func StartRunTx[I any](ctx context.Context, c *Client, tx pgx.Tx, flow *Flow[I], input I, opts *StartOpts) (*Run, error) {
	raw, err := encodeStart(flow, opts.runID(), input)
	if err != nil {
		return nil, err
	}
	return c.StartRunJSONTx(ctx, tx, flow.Slug(), raw, opts)
}

func encodeStart[I any](flow *Flow[I], runID string, input I) (json.RawMessage, error) {
	if flow == nil {
		return nil, errors.New("pgflow: start run: the flow is nil")
	}
	subject := startSubject(runID, flow.Slug())
	if err := flow.Err(); err != nil {
		return nil, fmt.Errorf("%s: invalid definition: %w", subject, err)
	}
	raw, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("%s: encode input %T: %w", subject, input, err)
	}
	return raw, nil
}

// StartRunJSON starts a run of the flow named flowSlug with a JSON input (nil or empty means JSON null). See
// StartRun. A flow with a map step over the run input needs an array input; anything else is rejected with the
// database's message.
//
// Concurrent calls of one flow without a transaction and without StartOpts.RunID share a transaction when they
// meet: calls that arrive while a start of the flow is in flight go together as the next
// pgflow.start_flows_with_states call of up to 200 runs and 4 MiB of inputs, and a second call starts beside the
// first when a full batch waits (group commit; a call that finds none in flight goes at once). Each still gets
// its own run, outcome and error: a batch the database refuses is rolled back and its calls start one by one. See
// docs/client.md.
func (c *Client) StartRunJSON(ctx context.Context, flowSlug string, input json.RawMessage, opts *StartOpts) (*Run, error) {
	return c.start(ctx, c.pool, nil, flowSlug, input, opts.runID())
}

// StartRunJSONTx starts a run inside the caller's transaction, so the run exists (and its first tasks can be
// picked up) only if the transaction commits; its events are delivered at commit as well. Everything else is as
// in StartRunJSON; on a caller-chosen run id that already exists, the failed attempt is rolled back to a
// savepoint, so the transaction stays usable.
func (c *Client) StartRunJSONTx(ctx context.Context, tx pgx.Tx, flowSlug string, input json.RawMessage, opts *StartOpts) (*Run, error) {
	if tx == nil {
		return nil, fmt.Errorf("%s: the transaction is nil", startSubject(opts.runID(), flowSlug))
	}
	return c.start(ctx, tx, tx, flowSlug, input, opts.runID())
}

func (c *Client) start(ctx context.Context, db sqlapi.DBTX, tx pgx.Tx, flowSlug string, input json.RawMessage, wantID string) (*Run, error) {
	if flowSlug == "" {
		return nil, fmt.Errorf("%s: empty flow slug: %w", startSubject(wantID, ""), ErrFlowNotFound)
	}
	runID := ""
	if wantID != "" {
		id, err := canonicalRunID(wantID)
		if err != nil {
			return nil, fmt.Errorf("pgflow: start run of flow %q: %w", flowSlug, err)
		}
		runID = id
	}
	if len(strings.TrimSpace(string(input))) == 0 {
		input = json.RawMessage("null")
	} else if !json.Valid(input) {
		return nil, fmt.Errorf("%s: input is not valid JSON: %.100q", startSubject(runID, flowSlug), input)
	}
	if err := c.checkSchema(ctx, db); err != nil {
		return nil, fmt.Errorf("%s: %w", startSubject(runID, flowSlug), err)
	}
	if runID != "" {
		// Most repeated starts find their run here, without an error in the server log.
		existing, err := sqlapi.GetRunWithStates(ctx, db, runID)
		if err != nil {
			return nil, fmt.Errorf("pgflow: start run %s of flow %q: read existing run: %w", runID, flowSlug, err)
		}
		if existing != nil {
			return existingRun(existing, flowSlug)
		}
	}

	if tx == nil && runID == "" && !c.startsOff.Load() {
		r, err := c.starts.Do(ctx, flowSlug, input)
		if err == nil {
			return EngineRun(r), nil
		}
		if !batchRolledBack(err) {
			return nil, fmt.Errorf("%s: %w", startSubject("", flowSlug), err)
		}
		// The batch was rolled back (an input, the flow or the role was refused): start alone, which gives this
		// call its own outcome and error.
		if pgerr.Code(err) == "42501" && c.startsOff.CompareAndSwap(false, true) {
			c.log.Info("pgflow: this role may not call pgflow.start_flows_with_states; concurrent StartRun calls start one run per transaction",
				"error", err)
		}
	}

	started, err := c.startOnce(ctx, db, tx, flowSlug, input, runID)
	switch {
	case err == nil:
		return EngineRun(started), nil
	case runID != "" && sqlapi.IsDuplicateRun(err):
		// A concurrent start with the same id committed first; it is the run.
		existing, rerr := sqlapi.GetRunWithStates(ctx, db, runID)
		if rerr != nil {
			return nil, fmt.Errorf("pgflow: start run %s of flow %q: read existing run: %w", runID, flowSlug, rerr)
		}
		if existing == nil {
			return nil, fmt.Errorf("pgflow: start run %s of flow %q: the id is taken but the run is not visible (repeatable-read transaction?): %w", runID, flowSlug, err)
		}
		return existingRun(existing, flowSlug)
	case sqlapi.IsUnknownFlow(err):
		return nil, fmt.Errorf("%s: %w (compile it first: start a worker for it or run its CompileSQL statements)", startSubject(runID, flowSlug), ErrFlowNotFound)
	case sqlapi.IsInvalidRunID(err):
		return nil, fmt.Errorf("%s: %w: %w", startSubject(runID, flowSlug), ErrInvalidRunID, err)
	default:
		if msg, ok := pgerr.Raised(err); ok {
			// A check of start_flow, e.g. "Flow x has root map steps but input is not an array (got object)".
			return nil, fmt.Errorf("%s: %s: %w", startSubject(runID, flowSlug), msg, err)
		}
		return nil, fmt.Errorf("%s: %w", startSubject(runID, flowSlug), err)
	}
}

// startSubject names what a start error is about: the run (when its id is known) and the flow.
func startSubject(runID, flowSlug string) string {
	switch {
	case runID == "" && flowSlug == "":
		return "pgflow: start run"
	case runID == "":
		return fmt.Sprintf("pgflow: start run of flow %q", flowSlug)
	case flowSlug == "":
		return fmt.Sprintf("pgflow: start run %s", runID)
	}
	return fmt.Sprintf("pgflow: start run %s of flow %q", runID, flowSlug)
}

// startOnce calls start_flow_with_states; inside a caller's transaction it does so under a savepoint, so a
// failed start does not abort the transaction. Outside one, the start's notifications (run:started, step:started,
// the wake-up of the flow's workers) are sent after its commit (sqlapi.Notifications), so that concurrent starts
// share WAL flushes instead of queueing behind PostgreSQL's notification lock one flush at a time.
func (c *Client) startOnce(ctx context.Context, db sqlapi.DBTX, tx pgx.Tx, flowSlug string, input json.RawMessage, runID string) (r *sqlapi.RunWithStates, err error) {
	if tx == nil {
		var notes sqlapi.Notifications
		r, notes, err = sqlapi.StartFlowWithStatesDeferred(ctx, c.pool, flowSlug, input, runID)
		if err == nil {
			c.sendNotifications(ctx, notes)
		}
		return r, err
	}
	err = inSavepoint(ctx, db, tx, func(db sqlapi.DBTX) (err error) {
		r, err = sqlapi.StartFlowWithStates(ctx, db, flowSlug, input, runID)
		return err
	})
	return r, err
}

// maxCoalescedStarts bounds the runs one coalesced start_flows call starts. 200 rather than 100 since the
// twenty-fourth round: with two calls in flight, larger calls cost less per run (fixed cost about 0.7 ms a call).
const maxCoalescedStarts = 200

// maxCoalescedStartsInFlight bounds the coalesced start calls of one flow at once. The second starts only while a
// full batch of maxCoalescedStarts waits: one call of 100 at a time capped a flow's starts at 7,000-8,800 runs/s on
// two cores, below what the engine works (docs/performance-rounds.md, twenty-fourth round).
const maxCoalescedStartsInFlight = 2

// maxCoalescedStartBytes bounds the inputs of one coalesced start call: large inputs go in smaller calls (an input
// larger than this alone), so that a call, and the run documents it returns with the inputs in them, stays a few
// MiB however large the inputs are.
const maxCoalescedStartBytes = 4 << 20

// startBatch starts the runs of concurrent StartRun calls of one flow in one start_flows_with_states call (one
// transaction):
// under load, runs arriving while a start is in flight share the next one, and with it its commit and its
// round trip, instead of queueing one transaction each.
func (c *Client) startBatch(ctx context.Context, flowSlug string, inputs []json.RawMessage) ([]*sqlapi.RunWithStates, error) {
	runs, notes, err := sqlapi.StartFlowsWithStatesDeferred(ctx, c.pool, flowSlug, inputs)
	c.sendNotifications(ctx, notes) // owed even when reading the started runs failed after the commit
	return runs, err
}

// batchRolledBack reports whether a coalesced start failed in a way that certainly rolled it back: the server
// refused a statement of its transaction (a data, integrity, raised, privilege or schema error, or a
// serialization failure or deadlock). Then starting each run alone cannot start one twice. Any other failure (the
// connection broke, the context ended, an operator ended the session) may have come after the commit, so the
// error is returned as it is.
func batchRolledBack(err error) bool {
	code := pgerr.Code(err)
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "0A", "22", "23", "2B", "3F", "40", "42", "P0":
		return true
	}
	return false
}

// sendNotifications delivers what a committed start deferred. A failure does not undo the start: listeners miss
// its events and workers find its tasks at their next periodic read (ListenPollInterval), so it is logged only.
func (c *Client) sendNotifications(ctx context.Context, notes sqlapi.Notifications) {
	if err := notes.Send(context.WithoutCancel(ctx), c.pool); err != nil {
		c.log.Warn("pgflow: runs started, but their notifications were not sent (listeners miss their events; workers find their tasks at their next periodic read)",
			"error", err)
	}
}

func existingRun(r *sqlapi.RunWithStates, flowSlug string) (*Run, error) {
	if r.Run.FlowSlug != flowSlug {
		return nil, fmt.Errorf("pgflow: start run %s of flow %q: the id belongs to a run of flow %q: %w",
			r.Run.RunID, flowSlug, r.Run.FlowSlug, ErrRunIDConflict)
	}
	return EngineRun(r), nil
}

// GetRun reads a run and all its step states in one consistent statement. An unknown id gives an error
// wrapping ErrRunNotFound; an id that is not a UUID, ErrInvalidRunID.
func (c *Client) GetRun(ctx context.Context, runID string) (*Run, error) {
	id, err := canonicalRunID(runID)
	if err != nil {
		return nil, fmt.Errorf("pgflow: get run: %w", err)
	}
	return c.getRun(ctx, id)
}

func (c *Client) getRun(ctx context.Context, id string) (*Run, error) {
	if err := c.checkSchema(ctx, c.pool); err != nil {
		return nil, fmt.Errorf("pgflow: get run %s: %w", id, err)
	}
	r, err := sqlapi.GetRunWithStates(ctx, c.pool, id)
	if err != nil {
		return nil, fmt.Errorf("pgflow: get run %s: %w", id, err)
	}
	if r == nil {
		return nil, fmt.Errorf("pgflow: get run %s: %w", id, ErrRunNotFound)
	}
	return EngineRun(r), nil
}

// WaitRun waits until the run is completed, failed or cancelled and returns it (a failed or cancelled run is
// returned with a nil error; check Status or Run.Err, which is a *RunCancelledError matching ErrRunCancelled for a
// cancelled run). It listens for the run's events and re-reads the run when one says the run ended,
// and also re-reads it every poll interval, so it finishes even if events cannot be delivered. No transition is
// missed: it subscribes before it reads, and re-reads after the listener (re)connects. It returns ctx's error
// when ctx ends first, ErrRunNotFound for an unknown run and ErrClientClosed if the client is closed.
//
// Nothing waits silently: while it waits, WaitRun checks what the run waits on every few seconds (see
// Client.RunHealth) and logs a warning on the client's Logger when no alive worker serves a queue holding tasks of
// the run, or when a task of it is stalled past its step timeout and waits for stalled-task recovery: once per
// wait, then again only when the situation changes (and an info line when it resolves).
func (c *Client) WaitRun(ctx context.Context, runID string) (*Run, error) {
	id, err := canonicalRunID(runID)
	if err != nil {
		return nil, fmt.Errorf("pgflow: wait run: %w", err)
	}
	sub, err := c.subscribe(id)
	if err != nil {
		return nil, fmt.Errorf("pgflow: wait run %s: %w", id, err)
	}
	defer sub.Close()

	ticker := time.NewTicker(c.pollInterval)
	defer ticker.Stop()
	health := &healthWatch{c: c, id: id}
	for {
		run, err := c.read(ctx, id)
		switch {
		case err == nil:
			if run.Status.Terminal() {
				return run, nil
			}
			health.check(ctx)
		case errors.Is(err, ErrRunNotFound), ctx.Err() != nil, !retryRead(err):
			return nil, fmt.Errorf("pgflow: wait run %s: %w", id, errors.Join(err, ctx.Err()))
		default:
			// A broken pool connection or similar: try again at the next tick.
			c.log.Warn("wait run: read failed; retrying", "run_id", id, "error", err)
		}

	wait:
		for {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("pgflow: wait run %s: %w", id, ctx.Err())
			case <-sub.Done():
				return nil, fmt.Errorf("pgflow: wait run %s: %w", id, ErrClientClosed)
			case <-ticker.C:
				break wait
			case <-sub.Ready():
				if c.worthReading(sub.Drain(), id) {
					break wait
				}
			}
		}
	}
}

// worthReading reports whether a batch of notifications may change WaitRun's answer: a Resync, a run event of
// this run or anything it cannot parse.
func (c *Client) worthReading(msgs []notify.Message, runID string) bool {
	for _, m := range msgs {
		if m.Resync {
			return true
		}
		ev, err := parseEvent(m.Payload)
		if err != nil || (ev.RunID == runID && ev.IsRunEvent()) {
			return true
		}
	}
	return false
}

// retryRead reports whether a failed read of a run is worth repeating: the same classification of database
// errors as the worker's (internal/pgerr). Lost or refused connections, the server shutting down or restarting,
// deadlocks, statement and lock timeouts and resource shortages are transient; the server's answer to the request
// itself (a missing schema, privileges, a program limit, an internal error) is not.
func retryRead(err error) bool { return pgerr.Transient(err) }

// Subscribe streams the events of one run. It returns once the client listens for them: every transition
// committed after Subscribe returns is delivered in commit order, and the channel is closed after the run's
// terminal event (run:completed, run:failed or run:cancelled), when ctx ends or when the client is closed. Events from before
// the call are not replayed; read the run with GetRun after subscribing to see where it stands. A run that is
// already completed, failed or cancelled gives a channel that is closed at once.
//
// If the listener connection breaks, events committed while it reconnects are lost (nothing is synthesized);
// after reconnecting the client re-reads the run and closes the channel if it ended meanwhile. GetRun and
// WaitRun are the authoritative views. Read the channel promptly: up to 10000 undelivered events wait per
// subscription; beyond that the oldest are dropped and the run is re-read as after a reconnect.
func (c *Client) Subscribe(ctx context.Context, runID string) (<-chan Event, error) {
	id, err := canonicalRunID(runID)
	if err != nil {
		return nil, fmt.Errorf("pgflow: subscribe: %w", err)
	}
	sub, err := c.subscribe(id)
	if err != nil {
		return nil, fmt.Errorf("pgflow: subscribe to run %s: %w", id, err)
	}
	select {
	case <-sub.Active():
	case <-sub.Done():
		return nil, fmt.Errorf("pgflow: subscribe to run %s: %w", id, ErrClientClosed)
	case <-ctx.Done():
		sub.Close()
		return nil, fmt.Errorf("pgflow: subscribe to run %s: %w", id, ctx.Err())
	}
	// The read below covers the "re-read now" marker the subscription queued when it became active; drop that
	// marker now, or forward would re-read later and could close the channel before delivering the events of a
	// change made right after this read. Events already queued are kept and delivered first.
	var early []notify.Message
	for _, m := range sub.Drain() {
		if !m.Resync {
			early = append(early, m)
		}
	}
	run, err := c.read(ctx, id)
	if err != nil {
		sub.Close()
		return nil, fmt.Errorf("pgflow: subscribe: %w", err)
	}
	out := make(chan Event, 16)
	if run.Status.Terminal() {
		sub.Close()
		close(out)
		return out, nil
	}
	go c.forward(ctx, sub, id, out, early)
	return out, nil
}

// forward moves one run's events from the subscription to out until the run ends, ctx ends or the client closes.
func (c *Client) forward(ctx context.Context, sub *notify.Subscription, runID string, out chan<- Event, early []notify.Message) {
	defer close(out)
	defer sub.Close()
	send := func(ev Event) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for first := true; ; first = false {
		var msgs []notify.Message
		if first && len(early) > 0 {
			msgs = early
		} else {
			select {
			case <-ctx.Done():
				return
			case <-sub.Done():
				return
			case <-sub.Ready():
			}
			msgs = sub.Drain()
		}
		ended := false
		for _, m := range msgs {
			if m.Resync {
				if ended {
					continue
				}
				run, err := c.read(ctx, runID)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					c.log.Warn("subscribe: re-read after reconnect failed", "run_id", runID, "error", err)
					continue
				}
				// Events queued behind the Resync in this batch are still delivered, then the channel closes.
				ended = run.Status.Terminal()
				continue
			}
			ev, err := parseEvent(m.Payload)
			if err != nil {
				c.log.Warn("subscribe: ignoring malformed event", "run_id", runID, "payload", m.Payload, "error", err)
				continue
			}
			if ev.RunID != runID {
				continue
			}
			if !send(ev) {
				return
			}
			ended = ended || ev.IsTerminal()
		}
		if ended {
			return
		}
	}
}

// subscribe registers for the run's channel, starting the listener on first use.
func (c *Client) subscribe(runID string) (*notify.Subscription, error) {
	l, err := c.getListener()
	if err != nil {
		return nil, err
	}
	sub, err := l.Subscribe(runChannel(runID))
	if errors.Is(err, notify.ErrClosed) {
		return nil, ErrClientClosed
	}
	return sub, err
}

// notifier returns the client's listener for a worker's queue wake-ups, or nil when the client is closed (the
// worker then polls).
func (c *Client) notifier() *notify.Listener {
	l, err := c.getListener()
	if err != nil {
		return nil
	}
	return l
}

func (c *Client) getListener() (*notify.Listener, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClientClosed
	}
	if c.listener == nil {
		cfg := c.listenConfig
		if cfg == nil {
			cfg = c.pool.Config().ConnConfig
		}
		cfg = cfg.Copy()
		if cfg.RuntimeParams == nil {
			cfg.RuntimeParams = map[string]string{}
		}
		if cfg.RuntimeParams["application_name"] == "" {
			cfg.RuntimeParams["application_name"] = ListenerApplicationName
		}
		c.listener = notify.New(notify.Config{
			Connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cfg) },
			Logger:  c.log,
		})
	}
	return c.listener, nil
}

// ListenerApplicationName is the application_name of a Client's LISTEN connection (unless ListenConfig sets
// one): one per process that shares its Client, whatever number of flows its Worker serves.
const ListenerApplicationName = "pgflow-go listener"

// runChannel is the notification channel of one run, as pgflow._emit_event names it.
func runChannel(runID string) string { return "pgflow:run:" + runID }

func parseEvent(payload string) (Event, error) {
	var ev Event
	if err := json.Unmarshal([]byte(payload), &ev); err != nil {
		return ev, err
	}
	if ev.Type == "" || ev.RunID == "" {
		return ev, fmt.Errorf("event without event_type or run_id: %s", payload)
	}
	return ev, nil
}

// canonicalRunID accepts the UUID spellings PostgreSQL accepts (any case, optional braces, optional hyphens
// between groups of four digits) and returns the canonical lower-case 8-4-4-4-12 form, the form in which the
// database names the run's notification channel.
func canonicalRunID(id string) (string, error) {
	s := id
	if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
		s = s[1 : len(s)-1]
	}
	s = strings.ReplaceAll(s, "-", "")
	var b [16]byte
	if len(s) != 32 {
		return "", fmt.Errorf("%w: %q is not a UUID", ErrInvalidRunID, id)
	}
	if _, err := hex.Decode(b[:], []byte(s)); err != nil {
		return "", fmt.Errorf("%w: %q is not a UUID", ErrInvalidRunID, id)
	}
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], nil
}
