#!/usr/bin/env bash
# Runs dlock's whole test suite on this machine: installs the servers the tests
# start (redis-server, etcd, ZooKeeper and java, with apt-get, when run as root and
# they are missing), then checks formatting, go vet and staticcheck, and runs
# go test -race on every package and module.
set -euo pipefail
cd "$(dirname "$0")"

STATICCHECK_VERSION=v0.8.2 # release 2026.2.2

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
[ -x /usr/share/zookeeper/bin/zkServer.sh ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v tmux >/dev/null 2>&1 || need+=(tmux) # dlock top's tests
command -v chromium >/dev/null 2>&1 || need+=(chromium fonts-dejavu-core) # the web view's tests
command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
if ((${#need[@]})); then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "test.sh: installing ${need[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
	else
		echo "test.sh: missing ${need[*]}: install with: sudo apt-get install -y ${need[*]}" >&2
		exit 1
	fi
fi

# say prints a progress line with the time since the start.
say() { printf 'test.sh [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

say "gofmt, go vet, staticcheck (the first run downloads and builds staticcheck ${STATICCHECK_VERSION})"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt needed on: $unformatted" >&2
	exit 1
fi
go vet ./...
go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./...

# The root module must not build etcd's or ZooKeeper's client: they live in the
# etcdlock and zklock modules (and the CLI's).
if go list -deps -test ./... | grep -qE 'etcd\.io|go-zookeeper'; then
	echo "test.sh: the root module depends on etcd or ZooKeeper packages:" >&2
	go list -deps -test ./... | grep -E 'etcd\.io|go-zookeeper' >&2
	exit 1
fi

# go test prints each package's result as it finishes (several run at once).
say "go test -race ./... ($(go list ./... | wc -l) packages)"
go test -race -count=1 -timeout 15m "$@" ./...

say "cmd/dlock (the CLI, its own module so that library users never build the etcd and ZooKeeper clients)"
(cd cmd/dlock && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -race -count=1 ./...)

say "examples/sqlfence (its own module)"
(cd examples/sqlfence && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -count=1 ./...)

say "etcdlock (its own module): vet, staticcheck and tests against a real etcd"
(cd etcdlock && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -race -count=1 ./...)

say "bench (its own module): vet and a quick run against a real redis-server"
(cd bench && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -race -count=1 ./...)

say "zklock (its own module): vet, staticcheck, test against a real ZooKeeper"
(cd zklock && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -race -count=1 ./...)

say "pglock (its own module): vet, staticcheck, tests against a real PostgreSQL"
(cd pglock && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -race -count=1 ./...)

say "examples/pgfence (its own module): a fenced order processor against a real PostgreSQL"
(cd examples/pgfence && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -race -count=1 ./...)

say "all green"
