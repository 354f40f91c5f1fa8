package main

import (
	"errors"
	"net/url"
	"regexp"
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

// maskURL returns raw with everything between "://" and the last "@" (the user
// name and password, however malformed) written as "xxxxx": the form of a
// server URL that errors may show.
func maskURL(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		if j := strings.LastIndex(raw, "@"); j >= 0 {
			return "xxxxx" + raw[j:]
		}
		return raw
	}
	rest := raw[i+3:]
	if j := strings.LastIndex(rest, "@"); j >= 0 {
		return raw[:i+3] + "xxxxx" + rest[j:]
	}
	return raw
}

// urlProblem says why raw, a server URL, does not parse, as err says, without
// any piece of raw's user name or password: the parser's quotations of the
// input are dropped, and a message that still shows a piece of the secret is
// replaced by a hint.
func urlProblem(err error, raw string) string {
	var ue *url.Error
	msg := err.Error()
	isURL := errors.As(err, &ue)
	if isURL {
		msg = ue.Err.Error()
	}
	msg = strings.TrimPrefix(msg, "redis: ")
	msg = strings.TrimRight(strings.TrimSpace(quoted.ReplaceAllString(redact(msg, raw), "")), ":")
	if showsSecret(msg, raw) || msg == "" {
		msg = "it does not parse"
	}
	if isURL && strings.Contains(maskURL(raw), "xxxxx") {
		msg += " (percent-encode / ? # % @ and spaces in the user name and password)"
	}
	return msg
}

var quoted = regexp.MustCompile(`\s*"[^"]*"`)

// showsSecret reports whether msg shows four characters in a row of the
// password of the URL raw (all of it when shorter), or its user information
// when there is no password.
func showsSecret(msg, raw string) bool {
	masked := maskURL(raw)
	if masked == raw {
		return false
	}
	i := strings.Index(raw, "://") + 3
	info := raw[i : i+strings.LastIndex(raw[i:], "@")]
	if _, pass, ok := strings.Cut(info, ":"); ok && pass != "" {
		info = pass
	}
	const window = 4
	if len(info) <= window {
		return strings.Contains(msg, info)
	}
	for k := 0; k+window <= len(info); k++ {
		if strings.Contains(msg, info[k:k+window]) {
			return true
		}
	}
	return false
}
