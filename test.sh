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

echo "test.sh: gofmt, go vet, staticcheck"
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

echo "test.sh: go test -race ./..."
go test -race -count=1 -timeout 15m "$@" ./...

echo "test.sh: cmd/dlock (the CLI, its own module so that library users never build the etcd and ZooKeeper clients)"
(cd cmd/dlock && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -race -count=1 ./...)

echo "test.sh: examples/sqlfence (its own module)"
(cd examples/sqlfence && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -count=1 ./...)

echo "test.sh: etcdlock (its own module): vet, staticcheck and tests against a real etcd"
(cd etcdlock && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -race -count=1 ./...)

echo "test.sh: bench (its own module): vet and a quick run against a real redis-server"
(cd bench && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -race -count=1 ./...)

echo "test.sh: zklock (its own module): vet, staticcheck, test against a real ZooKeeper"
(cd zklock && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -race -count=1 ./...)

echo "test.sh: dlockgocron (its own module): gocron Locker and Elector, schedulers in one process and in several, on memlock and a real redis-server"
(cd dlockgocron && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -race -count=1 ./...)

echo "test.sh: dlockcron (its own module): robfig/cron SkipIfLocked, two cron instances on a real redis-server"
(cd dlockcron && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -race -count=1 ./...)

echo "test.sh: dlockk8s (its own module): client-go's leader election with the record in redis-server, three LeaderElectors"
(cd dlockk8s && go vet ./... && go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" ./... && go test -race -count=1 ./...)
