package dashboard

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// GlobalChannel carries every run and step event of the database; RunChannelPrefix+run_id the events of one run.
const (
	GlobalChannel    = "pgflow"
	RunChannelPrefix = "pgflow:run:"
)

// envelope is the pg_notify payload the engine publishes (docs/events.md). Every field is a string, and the
// dashboard re-encodes it from this type, so the events it serves carry identifiers as strings only.
type envelope struct {
	EventType string `json:"event_type"`
	Event     string `json:"event"`
	RunID     string `json:"run_id"`
	StepSlug  string `json:"step_slug,omitempty"`
	Status    string `json:"status"`
	FlowSlug  string `json:"flow_slug"`
}

// handleEvents streams server-sent events:
//
//	/events?run=<run_id>  the events of one run
//	/events?flow=<slug>   the events of every run of one flow
//	/events               the events of every run
//
// Each engine event becomes "event: change" with the envelope as data. "event: resync" means events may have
// been missed (the stream just started listening, or the database connection was re-established): the page
// re-reads what it shows. A comment line goes out every PingInterval to keep idle connections open.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	channel := GlobalChannel
	flow := q.Get("flow")
	if raw := q.Get("run"); raw != "" {
		id, ok := canonicalUUID(raw)
		if !ok {
			http.Error(w, fmt.Sprintf("run=%q is not a run id (a UUID)", raw), http.StatusBadRequest)
			return
		}
		channel = RunChannelPrefix + id
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, errNotFlusher.Error(), http.StatusInternalServerError)
		return
	}
	sub, err := s.listener.Subscribe(channel)
	if err != nil {
		http.Error(w, "the dashboard is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer sub.Close()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// The browser reconnects by itself after a broken stream; ask it to wait two seconds.
	if _, err := fmt.Fprint(w, "retry: 2000\n: stream open\n\n"); err != nil {
		return
	}
	flusher.Flush()

	ping := time.NewTicker(s.cfg.PingInterval)
	defer ping.Stop()
	ctx := r.Context()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.Done():
			return
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case <-sub.Ready():
			for _, m := range sub.Drain() {
				var err error
				if m.Resync {
					_, err = fmt.Fprint(w, "event: resync\ndata: {}\n\n")
				} else {
					var e envelope
					if json.Unmarshal([]byte(m.Payload), &e) != nil {
						continue // not an engine envelope: somebody else's NOTIFY on our channel
					}
					if flow != "" && e.FlowSlug != flow {
						continue
					}
					data, _ := json.Marshal(e) // a struct of strings always marshals
					_, err = fmt.Fprintf(w, "event: change\ndata: %s\n\n", data)
				}
				if err != nil {
					return
				}
			}
			flusher.Flush()
		}
	}
}

var errNotFlusher = errors.New("dashboard: the response writer cannot flush, so it cannot stream events")
