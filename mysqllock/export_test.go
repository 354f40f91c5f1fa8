package mysqllock

// ServerDSN is the DSN of the server the tests run against, for examples.
func ServerDSN() string { return srv.DSN }
