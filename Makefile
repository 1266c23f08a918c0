# Developer shortcuts. CI runs .ci/run, which runs `make test`.
GO ?= go

.PHONY: test lint demo

## test: the project's test command (the README's): formatting, vet, and every test with the race detector.
test: lint
	$(GO) test -race -count=1 -timeout 30m ./...

## lint: gofmt must print nothing; go vet must pass.
lint:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needs to run on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## demo: run the demo flow on a throwaway database.
demo:
	$(GO) run ./cmd/pgflow demo
