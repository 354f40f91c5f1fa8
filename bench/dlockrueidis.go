package main

import (
	"github.com/dlock-go/dlock/dlockrueidis"
	"github.com/redis/rueidis"
)

// dlockRueidisVariant is dlock's plain Redis lock over a rueidis client
// (dlockrueidis.New): one rueidis client shared by the contenders, as a
// program that uses rueidis has one, which pipelines their commands on one
// connection.
var dlockRueidisVariant = variant{name: "dlock/rueidis", lib: "dlock", in: inA | inB,
	desc: "dlockrueidis.New(rc), all defaults (15s TTL renewed by the watchdog), over one rueidis v1.0.79 client shared by the contenders (auto-pipelining; client-side caching off)",
	open: func(o opening) (locker, error) {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{o.rdb.Options().Addr}, DisableCache: true})
		if err != nil {
			return nil, err
		}
		c, err := dlockrueidis.New(rc)
		if err != nil {
			rc.Close()
			return nil, err
		}
		return dlockLocker{c: c, close: func() error { rc.Close(); return nil }}, nil
	}}
