# Developer shortcuts. CI runs .ci/run, which runs `make test`.
GO ?= go

.PHONY: test setup lint demo

## test: the project's test command (the README's): set-up, formatting, vet, and every test with the race detector.
## The set-up (.ci/setup) installs PostgreSQL and Chromium with apt-get when they are missing and it runs as root;
## otherwise it stops at once, naming what to install.
test: setup
	@$(MAKE) --no-print-directory lint
	$(GO) test -race -count=1 -timeout 30m ./...

## setup: check (and, as root with apt-get, install) what the tests need: PostgreSQL server binaries, Chromium.
setup:
	@bash .ci/setup

## lint: gofmt must print nothing; go vet must pass.
lint:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needs to run on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## demo: run the demo flow on a throwaway database.
demo:
	$(GO) run ./cmd/pgflow demo
