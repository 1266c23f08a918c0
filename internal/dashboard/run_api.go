package dashboard

// The JSON of one run (/api/runs/{id}).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// apiRun is the JSON the dashboard serves for a run. Every identifier is a string.
type apiRun struct {
	Run   sqlapi.RunRow         `json:"run"`
	Steps []sqlapi.StepStateRow `json:"steps"`
	Tasks []apiTask             `json:"tasks"`
}

type apiTask struct {
	StepSlug      string     `json:"step_slug"`
	TaskIndex     int        `json:"task_index"`
	Status        string     `json:"status"`
	AttemptsCount int        `json:"attempts_count"`
	RequeuedCount int        `json:"requeued_count"`
	QueueName     *string    `json:"queue_name"`
	MessageID     *string    `json:"message_id"`
	LastWorkerID  *string    `json:"last_worker_id"`
	ErrorMessage  *string    `json:"error_message"`
	QueuedAt      time.Time  `json:"queued_at"`
	StartedAt     *time.Time `json:"started_at"`
	CompletedAt   *time.Time `json:"completed_at"`
	FailedAt      *time.Time `json:"failed_at"`
	OutputURL     *string    `json:"output_url"`
}

func (s *Server) handleRunAPI(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, ok := canonicalUUID(r.PathValue("id"))
	if !ok {
		writeJSONError(w, http.StatusNotFound, fmt.Sprintf("%q is not a run id (a UUID)", r.PathValue("id")))
		return
	}
	d, err := sqlapi.GetRunDetail(ctx, s.cfg.Pool, sqlapi.GetRunDetailParams{RunID: id, TasksPerStep: -1})
	if err != nil {
		status, msg := readFailure("run "+id, err)
		s.logReadError(r, "run "+id, err)
		writeJSONError(w, status, msg)
		return
	}
	if d == nil {
		writeJSONError(w, http.StatusNotFound, "there is no run "+id)
		return
	}
	out := apiRun{Run: d.Run, Steps: make([]sqlapi.StepStateRow, 0, len(d.Steps)), Tasks: []apiTask{}}
	var tasks []sqlapi.Task
	for _, st := range d.Steps {
		out.Steps = append(out.Steps, st.StepStateRow)
		tasks = append(tasks, st.TaskList...)
	}
	for _, t := range tasks {
		at := apiTask{
			StepSlug: t.StepSlug, TaskIndex: t.TaskIndex, Status: t.Status, AttemptsCount: t.AttemptsCount,
			RequeuedCount: t.RequeuedCount, QueueName: t.QueueName, LastWorkerID: t.LastWorkerID, ErrorMessage: t.ErrorMessage,
			QueuedAt: t.QueuedAt, StartedAt: t.StartedAt, CompletedAt: t.CompletedAt, FailedAt: t.FailedAt,
		}
		if t.MessageID != nil {
			m := strconv.FormatInt(*t.MessageID, 10)
			at.MessageID = &m
		}
		if t.OutputChars > 0 {
			u := jsonLink(id, sqlapi.JSONPart{Kind: "task", StepSlug: t.StepSlug, TaskIndex: t.TaskIndex})
			at.OutputURL = &u
		}
		out.Tasks = append(out.Tasks, at)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(out)
}
