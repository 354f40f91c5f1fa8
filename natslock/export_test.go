package natslock

// ServerURL is the URL of the server the tests run against, for examples.
func ServerURL() string { return srv.URL }
