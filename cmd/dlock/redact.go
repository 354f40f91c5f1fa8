package main

import (
	"net/url"
	"strings"
)

// parseUserinfo returns the password of a URL, if it has one.
func parseUserinfo(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// Fall back to the text between "://" and "@".
		if i := strings.Index(raw, "://"); i >= 0 {
			rest := raw[i+3:]
			if j := strings.LastIndex(rest, "@"); j >= 0 {
				if k := strings.Index(rest[:j], ":"); k >= 0 {
					return rest[k+1 : j], nil
				}
			}
		}
		return "", err
	}
	if u.User == nil {
		return "", nil
	}
	p, _ := u.User.Password()
	return p, nil
}

func replaceAll(s, old, repl string) string {
	if old == "" {
		return s
	}
	return strings.ReplaceAll(s, old, repl)
}
