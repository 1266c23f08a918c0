// Command diamond runs a flow whose steps form a diamond: one root step, two steps that run in parallel on its
// output, and a last step that joins them.
//
//	        ┌──▶ summary ──┐
//	fetch ──┤              ├──▶ publish
//	        └──▶ keywords ─┘
//
// It starts a worker for the flow and one run, waits for the run and prints its output. The database needs the
// pgflow schema:
//
//	export DATABASE_URL=postgres://postgres@localhost:5432/app
//	go run ./cmd/pgflow migrate up
//	go run ./examples/diamond "https://example.com/posts/postgres-queues"
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	URL string `json:"url"`
}

// Page is what "fetch" returns.
type Page struct {
	Title string `json:"title"`
	Body  string `json:"body"`
}

// Summary is what "summary" returns.
type Summary struct {
	FirstSentence string `json:"first_sentence"`
	Words         int    `json:"words"`
}

// Post is what "publish" returns, and so the output of every run (publish is the only leaf step).
type Post struct {
	URL      string   `json:"url"`
	Title    string   `json:"title"`
	Summary  string   `json:"summary"`
	Words    int      `json:"words"`
	Keywords []string `json:"keywords"`
}

// Output is the run output: one field per leaf step.
type Output struct {
	Publish Post `json:"publish"`
}

// ArticleFlow defines the diamond. Steps declare their dependencies with DependsOn and read their outputs with
// the dependency's handle, so the types line up at compile time.
func ArticleFlow() *pgflow.Flow[Input] {
	f := pgflow.NewFlow[Input]("article_diamond",
		pgflow.MaxAttempts(3), pgflow.BaseDelay(time.Second), pgflow.Timeout(30*time.Second))

	fetch := pgflow.Step(f, "fetch", func(ctx context.Context, t *pgflow.Task[Input]) (Page, error) {
		in, err := t.FlowInput(ctx)
		if err != nil {
			return Page{}, err
		}
		if in.URL == "" {
			return Page{}, errors.New("input has no url")
		}
		return fakeFetch(in.URL), nil
	})

	// summary and keywords both depend on fetch only, so workers run them at the same time.
	summary := pgflow.Step(f, "summary", func(ctx context.Context, t *pgflow.Task[Input]) (Summary, error) {
		page, err := fetch.Output(t)
		if err != nil {
			return Summary{}, err
		}
		first, _, _ := strings.Cut(page.Body, ". ")
		return Summary{FirstSentence: strings.TrimSuffix(first, ".") + ".", Words: len(strings.Fields(page.Body))}, nil
	}, pgflow.DependsOn(fetch))

	keywords := pgflow.Step(f, "keywords", func(ctx context.Context, t *pgflow.Task[Input]) ([]string, error) {
		page, err := fetch.Output(t)
		if err != nil {
			return nil, err
		}
		return topWords(page.Body, 3), nil
	}, pgflow.DependsOn(fetch))

	// publish runs once both branches have completed.
	pgflow.Step(f, "publish", func(ctx context.Context, t *pgflow.Task[Input]) (Post, error) {
		in, err := t.FlowInput(ctx)
		if err != nil {
			return Post{}, err
		}
		page, err := fetch.Output(t)
		if err != nil {
			return Post{}, err
		}
		sum, err := summary.Output(t)
		if err != nil {
			return Post{}, err
		}
		kw, err := keywords.Output(t)
		if err != nil {
			return Post{}, err
		}
		return Post{URL: in.URL, Title: page.Title, Summary: sum.FirstSentence, Words: sum.Words, Keywords: kw}, nil
	}, pgflow.DependsOn(fetch, summary, keywords))

	return f
}

// fakeFetch stands in for an HTTP request: it makes up a page from the URL.
func fakeFetch(url string) Page {
	slug := url[strings.LastIndex(url, "/")+1:]
	title := strings.ReplaceAll(slug, "-", " ")
	body := fmt.Sprintf("This post is about %s. Queues in postgres keep work safe. "+
		"Workers read the queues and postgres keeps the state of every run.", title)
	return Page{Title: title, Body: body}
}

// topWords returns the n most frequent words of at least 5 letters (ties in alphabetical order).
func topWords(text string, n int) []string {
	counts := map[string]int{}
	for _, w := range strings.Fields(strings.ToLower(text)) {
		w = strings.Trim(w, ".,;:!?")
		if len(w) >= 5 {
			counts[w]++
		}
	}
	words := make([]string, 0, len(counts))
	for w := range counts {
		words = append(words, w)
	}
	sort.Slice(words, func(i, j int) bool {
		if counts[words[i]] != counts[words[j]] {
			return counts[words[i]] > counts[words[j]]
		}
		return words[i] < words[j]
	})
	return words[:min(n, len(words))]
}

func main() {
	ctx, stopNow := signalContexts()
	url := "https://example.com/posts/postgres-queues"
	if len(os.Args) > 1 {
		url = os.Args[1]
	}
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	out, err := Run(ctx, stopNow, pool, Input{URL: url})
	if err != nil {
		log.Fatal(err)
	}
	printJSON(os.Stdout, out)
}

// Run starts a worker for ArticleFlow, starts one run with input, waits for it, stops the worker and returns
// the run's output.
func Run(ctx, stopNow context.Context, pool *pgxpool.Pool, input Input) (Output, error) {
	flow := ArticleFlow()
	client, err := pgflow.NewClient(pool, nil)
	if err != nil {
		return Output{}, err
	}
	defer client.Close()
	worker, err := pgflow.NewWorker(client, &pgflow.WorkerConfig{Flows: []pgflow.WorkerFlow{{Flow: flow}}})
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
	return pgflow.RunOutput[Output](run) // an error naming the failed steps if the run failed
}

func printJSON(w io.Writer, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Fprintln(w, string(b))
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
