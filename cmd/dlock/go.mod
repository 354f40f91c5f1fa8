module github.com/dlock-go/dlock/cmd/dlock

go 1.26.0

replace (
	github.com/dlock-go/dlock => ../..
	github.com/dlock-go/dlock/dlockrueidis => ../../dlockrueidis
	github.com/dlock-go/dlock/etcdlock => ../../etcdlock
	github.com/dlock-go/dlock/mysqllock => ../../mysqllock
	github.com/dlock-go/dlock/natslock => ../../natslock
	github.com/dlock-go/dlock/pglock => ../../pglock
	github.com/dlock-go/dlock/verify => ../../verify
	github.com/dlock-go/dlock/zklock => ../../zklock
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/creack/pty v1.1.24
	github.com/dlock-go/dlock v0.1.0
	github.com/dlock-go/dlock/etcdlock v0.1.0
	github.com/dlock-go/dlock/mysqllock v0.1.0
	github.com/dlock-go/dlock/natslock v0.1.0
	github.com/dlock-go/dlock/pglock v0.1.0
	github.com/dlock-go/dlock/verify v0.1.0
	github.com/dlock-go/dlock/zklock v0.1.0
	github.com/go-sql-driver/mysql v1.10.1
	github.com/go-zookeeper/zk v1.0.4
	github.com/jackc/pgx/v5 v5.12.0
	github.com/nats-io/nats.go v1.55.0
	github.com/redis/go-redis/v9 v9.23.0
	go.etcd.io/etcd/client/v3 v3.5.35
	go.uber.org/zap v1.17.0
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.47.0
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/antithesishq/antithesis-sdk-go v0.8.0-default-no-op // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/coreos/go-semver v0.3.1 // indirect
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/nats-io/jwt/v2 v2.8.2 // indirect
	github.com/nats-io/nats-server/v2 v2.15.2 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.etcd.io/etcd/api/v3 v3.5.35 // indirect
	go.etcd.io/etcd/client/pkg/v3 v3.5.35 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260803160001-6ac0973c030d // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260803160001-6ac0973c030d // indirect
	google.golang.org/grpc v1.83.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
