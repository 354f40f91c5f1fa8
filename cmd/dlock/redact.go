package main

import (
	"net/url"
	"strings"
)

// secrets returns the pieces of a server URL that must never be printed: the
// user information (raw and decoded) and the password within it.
func secrets(raw string) []string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return nil
	}
	rest := raw[i+3:]
	j := strings.LastIndex(rest, "@")
	if j <= 0 {
		return nil
	}
	info := rest[:j]
	out := []string{info}
	if _, pass, ok := strings.Cut(info, ":"); ok && pass != "" {
		out = append(out, pass)
		if dec, err := url.PathUnescape(pass); err == nil && dec != pass {
			out = append(out, dec)
		}
	}
	if dec, err := url.PathUnescape(info); err == nil && dec != info {
		out = append(out, dec)
	}
	return out
}

// redact replaces every secret of the server URL raw in msg.
func redact(msg, raw string) string {
	for _, s := range secrets(raw) {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return msg
}

// redactURLError keeps a password in a URL out of error messages.
func redactURLError(err error, raw string) string {
	return redact(err.Error(), raw)
}
