// Command mapreduce counts words across documents with a map step: "split" returns the documents, "count" runs
// one task per document (fan-out, in parallel, on as many workers as there are), and "merge" adds the per-document
// counts up (fan-in).
//
//	split ──▶ count[0], count[1], … count[n-1] ──▶ merge
//
// The map step's output is the array of its task outputs, in document order, whatever order the tasks finished
// in. An empty array of documents completes the map step at once with [], without tasks.
//
//	export DATABASE_URL=postgres://postgres@localhost:5432/app
//	go run ./cmd/pgflow migrate up
//	go run ./examples/mapreduce "the quick brown fox" "the lazy dog" "the end"
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow"
)

// Input is the run input of the flow.
type Input struct {
	Documents []string `json:"documents"`
}

// WordCount is one word and how often it occurs.
type WordCount struct {
	Word  string `json:"word"`
	Count int    `json:"count"`
}

// Totals is what "merge" returns.
type Totals struct {
	Documents int         `json:"documents"`
	Words     int         `json:"words"`
	Unique    int         `json:"unique"`
	Top       []WordCount `json:"top"`
}

// Output is the run output: one field per leaf step.
type Output struct {
	Merge Totals `json:"merge"`
}

// WordCountFlow defines split → count (map) → merge.
func WordCountFlow() *pgflow.Flow[Input] {
	f := pgflow.NewFlow[Input]("word_count", pgflow.MaxAttempts(3), pgflow.BaseDelay(time.Second))

	docs := pgflow.Step(f, "split", func(ctx context.Context, t *pgflow.Task[Input]) ([]string, error) {
		in, err := t.FlowInput(ctx)
		if err != nil {
			return nil, err
		}
		out := []string{} // never null: a map step needs an array
		for _, d := range in.Documents {
			if strings.TrimSpace(d) != "" {
				out = append(out, d)
			}
		}
		return out, nil
	})

	// One task per element of split's output; each handler gets its element, typed.
	counts := pgflow.Map(f, "count", docs, func(ctx context.Context, t *pgflow.Task[Input], doc string) (map[string]int, error) {
		m := map[string]int{}
		for _, w := range strings.Fields(strings.ToLower(doc)) {
			if w = strings.Trim(w, ".,;:!?\"'()"); w != "" {
				m[w]++
			}
		}
		t.Logger.Debug("counted a document", "task_index", t.TaskIndex, "words", len(m))
		return m, nil
	}, pgflow.Timeout(10*time.Second)) // step options override the flow's

	pgflow.Step(f, "merge", func(ctx context.Context, t *pgflow.Task[Input]) (Totals, error) {
		perDoc, err := counts.Output(t) // []map[string]int, one per document, in order
		if err != nil {
			return Totals{}, err
		}
		all := map[string]int{}
		tot := Totals{Documents: len(perDoc), Top: []WordCount{}}
		for _, m := range perDoc {
			for w, n := range m {
				all[w] += n
				tot.Words += n
			}
		}
		tot.Unique = len(all)
		for w, n := range all {
			tot.Top = append(tot.Top, WordCount{w, n})
		}
		sort.Slice(tot.Top, func(i, j int) bool {
			if tot.Top[i].Count != tot.Top[j].Count {
				return tot.Top[i].Count > tot.Top[j].Count
			}
			return tot.Top[i].Word < tot.Top[j].Word
		})
		tot.Top = tot.Top[:min(3, len(tot.Top))]
		return tot, nil
	}, pgflow.DependsOn(counts))

	return f
}

func main() {
	ctx, stopNow := signalContexts()
	docs := os.Args[1:]
	if len(docs) == 0 {
		docs = []string{"The quick brown fox.", "The lazy dog sleeps.", "The fox jumps over the dog."}
	}
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	out, err := Run(ctx, stopNow, pool, Input{Documents: docs})
	if err != nil {
		log.Fatal(err)
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Println(string(b))
}

// Run starts a worker for WordCountFlow, starts one run with input, waits for it, stops the worker and returns
// the run's output.
func Run(ctx, stopNow context.Context, pool *pgxpool.Pool, input Input) (Output, error) {
	flow := WordCountFlow()
	client, err := pgflow.NewClient(pool, nil)
	if err != nil {
		return Output{}, err
	}
	defer client.Close()
	worker, err := pgflow.NewWorker(client, &pgflow.WorkerConfig{Flows: []pgflow.WorkerFlow{{Flow: flow}}, MaxConcurrent: 8})
	if err != nil {
		return Output{}, err
	}
	if err := worker.Start(ctx); err != nil { // returns once the worker runs; it has compiled the flow
		return Output{}, err
	}
	defer func() {
		// Graceful: in-flight handlers finish and report first. stopNow ending (a second signal) stops at once:
		// handlers are cancelled and their tasks go back to the queue without spending an attempt.
		if err := worker.Stop(stopNow); err != nil {
			log.Printf("worker: %v", err)
		}
	}()

	run, err := pgflow.StartRun(ctx, client, flow, input, nil)
	if err != nil {
		return Output{}, err
	}
	run, err = client.WaitRun(ctx, run.ID)
	if err != nil {
		return Output{}, err
	}
	return pgflow.RunOutput[Output](run)
}

// signalContexts returns ctx, which the first SIGINT or SIGTERM ends, and stopNow, which the second one ends.
// The first signal begins a graceful shutdown: Run stops waiting and stops the worker, whose running handlers
// finish and report first. The second cuts it short: handlers are cancelled and their tasks go back to the queue.
func signalContexts() (ctx, stopNow context.Context) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	stopNow, cancelStopNow := context.WithCancel(context.Background())
	go func() {
		<-sigs
		log.Print("graceful shutdown began (running handlers finish first); interrupt again to stop at once")
		cancel()
		<-sigs
		log.Print("stopping at once: interrupted tasks go back to their queue")
		cancelStopNow()
	}()
	return ctx, stopNow
}
