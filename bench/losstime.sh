#!/bin/sh
# losstime.sh measures how soon a "dlock run" learns that its lock was taken
# from it: the time from the start of "dlock unlock --force" to the exit of the
# run that held the lock (76), N times, with a lease of TTL (renewed every
# third of it).
#
#   bench/losstime.sh DLOCK N TTL SERVER-FLAGS...
#   bench/losstime.sh ./dlock 5 15s --redis redis://127.0.0.1:6379/0
#
# DLOCK is the dlock binary (go build ./cmd/dlock). Each line printed is one
# run: its exit status and the milliseconds from the force-unlock to its exit.
set -eu
bin=$1 n=$2 ttl=$3
shift 3
key="losstime-$$"
ms() { date +%s%3N; }
i=0
while [ "$i" -lt "$n" ]; do
	i=$((i + 1))
	"$bin" run --ttl "$ttl" --grace 1s "$@" "$key" -- sleep 600 &
	pid=$!
	tries=0
	until "$bin" status "$@" "$key" >/dev/null 2>&1; do
		tries=$((tries + 1))
		[ "$tries" -lt 500 ] || { echo "the run did not take the lock" >&2; kill "$pid"; exit 1; }
		sleep 0.01
	done
	sleep 0.2 # held for a moment, as a real holder is, before it is taken
	start=$(ms)
	"$bin" unlock --force "$@" "$key" >/dev/null
	code=0
	wait "$pid" || code=$?
	echo "exit $code after $(($(ms) - start)) ms"
done
