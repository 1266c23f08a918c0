#!/usr/bin/env bash
# The light-module check (issue 13), run by `make test`: a library user's module graph holds pgx and what pgx
# (and testify, which pgx requires too) brings along, plus robfig/cron (the schedules' cron-expression parser: one
# module with no dependencies of its own, so it adds exactly one line), and nothing else: no CLI, adapter or browser-test
# dependency (cobra, Prometheus, OpenTelemetry, chromedp) leaks into github.com/pgflow-go/pgflow's go.mod.
#
# It builds two throwaway modules outside the repository, with the go directive of the root module:
#   consumer   imports the library (the root package and schema), with a replace to this working tree;
#   reference  requires only pgx, testify and robfig/cron at the versions the root go.mod names;
# and requires every module of the consumer's `go list -m all` to be in the reference's (besides the two
# modules themselves), and the consumer's go directive to stay at the root's (no dependency needs a newer Go).
#
# Offline-friendly: GOFLAGS=-mod=mod, GOWORK=off, GOPROXY as the environment has it, GOTOOLCHAIN=local; both
# modules start from the root go.sum, so nothing needs the checksum database, and with a warm module cache
# nothing needs the network.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
GO="${GO:-go}"
export GOWORK=off GOFLAGS=-mod=mod GOTOOLCHAIN=local

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The root module's own go directive and versions, read without touching its go.mod.
rootq() { (cd "$root" && GOFLAGS=-mod=readonly "$GO" list -m -f "$1" "${@:2}"); }
go_version="$(rootq '{{.GoVersion}}')"
pgx="$(rootq '{{.Version}}' github.com/jackc/pgx/v5)"
testify="$(rootq '{{.Version}}' github.com/stretchr/testify)"
cron="$(rootq '{{.Version}}' github.com/robfig/cron/v3)"
[ -n "$go_version" ] && [ -n "$pgx" ] && [ -n "$testify" ] && [ -n "$cron" ] || {
  echo "check-light-module: cannot read the go directive, pgx, testify or robfig/cron from $root/go.mod" >&2
  exit 1
}

mkdir -p "$tmp/consumer" "$tmp/reference"
cat >"$tmp/consumer/go.mod" <<MOD
module example.com/lightcheck/consumer

go $go_version

require github.com/pgflow-go/pgflow v0.0.0-00010101000000-000000000000

replace github.com/pgflow-go/pgflow => $root
MOD
cat >"$tmp/consumer/main.go" <<'SRC'
// A library user: the public API and the migrator.
package main

import (
	_ "github.com/pgflow-go/pgflow"
	_ "github.com/pgflow-go/pgflow/schema"
)

func main() {}
SRC
cat >"$tmp/reference/go.mod" <<MOD
module example.com/lightcheck/reference

go $go_version

require (
	github.com/jackc/pgx/v5 $pgx
	github.com/stretchr/testify $testify
	github.com/robfig/cron/v3 $cron
)
MOD
cat >"$tmp/reference/main.go" <<'SRC'
package main

import (
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/robfig/cron/v3"
	_ "github.com/stretchr/testify/require"
)

func main() {}
SRC
cp "$root/go.sum" "$tmp/consumer/go.sum"
cp "$root/go.sum" "$tmp/reference/go.sum"

for m in consumer reference; do
  if ! (cd "$tmp/$m" && "$GO" mod tidy >"$tmp/$m.log" 2>&1 && "$GO" build -o /dev/null . >>"$tmp/$m.log" 2>&1); then
    echo "check-light-module: the throwaway $m module does not build:" >&2
    cat "$tmp/$m.log" >&2
    exit 1
  fi
  (cd "$tmp/$m" && "$GO" list -m -f '{{.Path}}' all) | sort >"$tmp/$m.list"
done

fail=0
extra="$(comm -23 "$tmp/consumer.list" "$tmp/reference.list" |
  grep -vx 'example.com/lightcheck/consumer\|github.com/pgflow-go/pgflow' || true)"
if [ -n "$extra" ]; then
  echo "check-light-module: a library user's go list -m all holds modules that pgx, testify and robfig/cron do not bring:" >&2
  sed 's/^/  /' <<<"$extra" >&2
  echo "(the CLI, the adapters and the browser tests have their own go.mod; keep their dependencies there)" >&2
  fail=1
fi
consumer_go="$(cd "$tmp/consumer" && "$GO" list -m -f '{{.GoVersion}}')"
if [ "$consumer_go" != "$go_version" ]; then
  echo "check-light-module: a library user on go $go_version had to move to go $consumer_go (a dependency needs it)" >&2
  fail=1
fi
if [ "$fail" -ne 0 ]; then
  exit 1
fi
echo "light module: a library user's go list -m all has $(wc -l <"$tmp/consumer.list") modules (go $go_version):" \
  "$(grep -vx 'example.com/lightcheck/consumer' "$tmp/consumer.list" | tr '\n' ' ')"
