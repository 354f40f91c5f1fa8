#!/usr/bin/env bash
# Runs dlock's whole test suite on this machine: installs the servers the tests
# start (redis-server, etcd, ZooKeeper and java, PostgreSQL, MariaDB, with
# apt-get, when run as root and they are missing), then checks formatting, go vet
# and staticcheck, and runs
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
command -v cc >/dev/null 2>&1 || need+=(gcc) # the clock-shift library of the server clock tests
command -v chromium >/dev/null 2>&1 || need+=(chromium fonts-dejavu-core) # the web view's tests
command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
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

# Valkey 8.0, on which the Redis backends' suites run too, comes from Debian's
# bookworm-backports: the source is added when it is missing.
if ! command -v valkey-server >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && grep -qs 'VERSION_CODENAME=bookworm' /etc/os-release; then
		echo "test.sh: installing valkey-server from bookworm-backports"
		grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/ ||
			echo 'deb http://deb.debian.org/debian bookworm-backports main' >/etc/apt/sources.list.d/bookworm-backports.list
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm-backports valkey-server >/dev/null
	else
		echo "test.sh: missing valkey-server (Valkey 8.0): on Debian bookworm, add bookworm-backports and: sudo apt-get install -y -t bookworm-backports valkey-server" >&2
		exit 1
	fi
fi

# say prints a progress line with the time since the start.
say() { printf 'test.sh [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

# From here on a failing check or test does not stop the run: step records it
# and the next step runs; the summary at the end lists every failure, and the
# exit status is 1 if there was one. (Setup above still stops at its first
# error.)

# failures lists the failed steps, one a line: the lanes below run in
# subshells, which record their failures there too.
failures=$(mktemp)
trap 'rm -f "$failures"' EXIT

# step NAME CMD...: runs CMD, recording NAME as failed if it fails.
step() {
	local name=$1
	shift
	if ! "$@"; then
		echo "$name" >>"$failures"
		say "FAILED: $name"
	fi
}

# indir DIR CMD...: runs CMD in DIR.
indir() {
	local dir=$1
	shift
	(cd "$dir" && "$@")
}

runStaticcheck() { go run "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}" "$@"; }

formatted() {
	local unformatted
	unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
	if [ -n "$unformatted" ]; then
		echo "gofmt needed on: $unformatted" >&2
		return 1
	fi
}

# The root module must not build the clients of the optional backends and
# integrations: they live in modules of their own (and the CLI's).
noOptionalDeps() {
	local optional='etcd\.io|go-zookeeper|jackc/pgx|go-sql-driver/mysql|nats-io|redis/rueidis|valkey-io|go-co-op/gocron|robfig/cron|k8s\.io|opentelemetry|prometheus'
	local deps
	deps=$(go list -deps -test ./...) || return 1
	if grep -qE "$optional" <<<"$deps"; then
		echo "test.sh: the root module depends on packages of an optional module:" >&2
		grep -E "$optional" <<<"$deps" >&2
		return 1
	fi
}

say "gofmt, go vet, staticcheck (the first run downloads and builds staticcheck ${STATICCHECK_VERSION})"
step "gofmt" formatted
step "go vet" go vet ./...
step "staticcheck" runStaticcheck ./...
step "no optional module in the root's dependencies" noOptionalDeps

# go test prints each package's result as it finishes (several run at once).
# redislock, whose tests take minutes, runs on its own after the others with a
# line for each top-level test as it ends; its whole output is shown when it fails.
say "go test -race ./... ($(go list ./... | wc -l) packages; redislock last, test by test)"
step "go test -race (root module but redislock)" go test -race -count=1 -timeout 15m "$@" $(go list ./... | grep -v '/redislock$')

redislock_log=$(mktemp)
trap 'rm -f "$failures" "$redislock_log"' EXIT
redislockTests() {
	if ! go test -race -count=1 -timeout 15m -v "$@" ./redislock/ 2>&1 | tee "$redislock_log" |
		grep --line-buffered -E '^(--- (PASS|FAIL|SKIP)|ok |FAIL|panic:)'; then
		echo "test.sh: redislock failed; its whole output:" >&2
		cat "$redislock_log" >&2
		return 1
	fi
}
say "redislock: each test's result as it ends"
step "go test -race ./redislock/" redislockTests "$@"

say "the Redis backends on Valkey $(valkey-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p') (redislock, redlock, legacy)"
# The Cluster and Sentinel topologies, whose tests take a minute and a half
# more, run on redis-server only: on Valkey the same scripts run on one server.
step "Valkey: redislock, redlock, legacy" env DLOCK_REDIS_SERVER="$(command -v valkey-server)" go test -count=1 -timeout 15m -skip 'Cluster|Sentinel' ./redislock/ ./redlock/ ./legacy/

# module DIR WHAT [TESTFLAGS]: vet, staticcheck and the tests of a module of
# its own (one whose dependencies never reach the root module's users); each
# runs whether or not the one before failed.
module() {
	say "$1 (its own module): $2"
	step "$1: go vet" indir "$1" go vet ./...
	step "$1: staticcheck" indir "$1" runStaticcheck ./...
	step "$1: go test" indir "$1" go test -count=1 ${3--race} ./...
}

# The modules of their own run in two lanes at once: their tests spend most
# of their time waiting on servers and TTLs (the verification suite keeps
# less than one core busy), so the two lanes share the machine's cores. Each
# line is prefixed with its lane.
storesLane() {
	module cmd/dlock "the CLI, against real servers of every backend"
	module examples/sqlfence "fencing in SQL (SQLite, no race detector: it is slow under it)" ""
	module etcdlock "tests against a real etcd"
	module zklock "tests against a real ZooKeeper"
	module pglock "tests against a real PostgreSQL"
	module examples/pgfence "a fenced order processor against a real PostgreSQL"
	module mysqllock "tests against a real MariaDB"
	module natslock "tests against NATS servers embedded in the test process (one, and a cluster of three)"
	module dlockrueidis "the Redis locks over rueidis and valkey-go: the conformance suite on redis-server and valkey-server, a Cluster"
}
# verifySuite: the verification suite's vet and staticcheck, its quick run
# (TestScenarios: one seed of every scenario) alone, so that its time shows,
# and then its other tests (the broken variants, the checkers' own tests). No
# race detector: it slows the workers past their TTLs.
verifySuite() {
	say "verify (its own module): the verification suite: worker processes under seeded faults, their histories checked"
	step "verify: go vet" indir verify go vet ./...
	step "verify: staticcheck" indir verify runStaticcheck ./...
	step "verify: the quick run" indir verify go test -count=1 -timeout 15m -run '^TestScenarios$' ./...
	say "verify: the broken variants and the checkers' own tests"
	step "verify: go test" indir verify go test -count=1 -timeout 25m -skip '^TestScenarios$' ./...
}
suiteLane() {
	verifySuite
	module dlockgocron "gocron Locker and Elector, schedulers in one process and in several"
	module dlockcron "robfig/cron SkipIfLocked, two cron instances on a real redis-server"
	module dlockk8s "client-go's leader election with the record in redis-server"
	module dlockotel "OpenTelemetry metrics and traces of the locks, on a real redis-server"
}
say "the modules of their own, in two lanes at once: [stores] the CLI and the backends, [suite] verify and the integrations"
storesLane 2>&1 | sed -u 's/^/[stores] /' &
stores=$!
suiteLane 2>&1 | sed -u 's/^/[suite] /' &
suite=$!
wait "$stores" "$suite" || true

# The benchmarks' quick run counts statements per cycle: it runs alone, on an
# otherwise quiet machine.
module bench "vet and a quick run against real servers"

mapfile -t failed <"$failures"
if ((${#failed[@]})); then
	say "${#failed[@]} failed:"
	printf '  %s\n' "${failed[@]}"
	exit 1
fi
say "all green"
