module github.com/dlock-go/dlock/verify

go 1.26.0

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/dlock-go/dlock v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
	golang.org/x/sys v0.48.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
)

replace github.com/dlock-go/dlock => ../
