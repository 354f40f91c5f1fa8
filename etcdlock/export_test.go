package etcdlock

// ServerAddr is the address of the etcd the package's tests and examples run on.
func ServerAddr() string { return srv.Addr }
