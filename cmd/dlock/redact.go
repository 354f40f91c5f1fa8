package main

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
	"unicode"
)

// Passwords are hidden here, and nowhere else: the CLI is the one part of
// dlock that is given connection strings (the backends take the clients and
// pools their callers built and never see a password), so no other module
// needs this, and it is no exported API of the root module.
//
// Only a password is hidden, where a message shows it as one: in a URL's
// user information (the part after the user name's ":"), and as the value of
// a password field (a key=value connection string's, a URL query's). The
// same text elsewhere in the message stays: a user name equal to the
// password, a word the password is a piece of. Replacing it there would blank
// out what the reader needs and, around a short password, spell the password
// out (a password "e" turning "connect" into "connxxxxxct").

// hidden stands for a password in what dlock prints.
const hidden = "xxxxx"

// redact returns msg with its passwords hidden: the one of raw's user
// information wherever msg shows that user information (as raw spells it, or
// percent-decoded), that of any other URL msg shows, and the value of every
// password field. raw is a server URL or a key=value connection string,
// however malformed.
func redact(msg, raw string) string {
	msg = maskFields(msg)
	if start, end, ok := userinfo(raw); ok {
		prefix := raw[max(start-3, 0):start] // "://", or "" without a scheme
		info := raw[start:end]
		forms := []string{info}
		if dec, err := url.PathUnescape(info); err == nil && dec != info {
			forms = append(forms, dec)
		}
		for _, f := range forms {
			if user, _, ok := strings.Cut(f, ":"); ok {
				msg = strings.ReplaceAll(msg, prefix+f+"@", prefix+user+":"+hidden+"@")
			}
		}
	}
	return urlPassword.ReplaceAllString(msg, "${1}:"+hidden+"@")
}

// maskURL returns raw, a server URL or a connection string however
// malformed, with its password hidden: the form of it that messages may show.
func maskURL(raw string) string { return redact(raw, raw) }

// userinfo returns where the user information of raw, a server URL however
// malformed, starts and ends: from after "://" (from the start when there is
// no scheme) to the last "@". ok is false when raw has none.
func userinfo(raw string) (start, end int, ok bool) {
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + 3
	}
	j := strings.LastIndex(raw[start:], "@")
	if j < 0 {
		return 0, 0, false
	}
	return start, start + j, true
}

// urlPassword matches the user information of a well-formed URL that has a
// password: the scheme, "://" and the user name are $1.
var urlPassword = regexp.MustCompile("([A-Za-z][A-Za-z0-9+.-]*://[^\\s/?#@:\"'`]*):[^\\s/?#@\"'`]*@")

// passwordKey matches the key of a password field and its "=".
var passwordKey = regexp.MustCompile(`(?i)password\s*=\s*`)

// maskFields returns s with the value of each password field hidden: in a
// URL's query (after "?" or "&") up to the next "&", "#" or space; in a
// key=value connection string a quoted value ('...', with \ escapes) or up
// to the next space.
func maskFields(s string) string {
	var b strings.Builder
	last := 0
	for _, m := range passwordKey.FindAllStringIndex(s, -1) {
		k, v := m[0], m[1]
		if k < last || k > 0 && isWordByte(s[k-1]) {
			continue // inside a value hidden already, or a longer key
		}
		end := len(s)
		switch {
		case k > 0 && (s[k-1] == '?' || s[k-1] == '&'):
			if i := strings.IndexAny(s[v:], "&# \t\n"); i >= 0 {
				end = v + i
			}
		case v < len(s) && s[v] == '\'':
			for i := v + 1; i < len(s); i++ {
				if s[i] == '\\' {
					i++
				} else if s[i] == '\'' {
					end = i + 1
					break
				}
			}
		default:
			if i := strings.IndexFunc(s[v:], unicode.IsSpace); i >= 0 {
				end = v + i
			}
		}
		b.WriteString(s[last:v])
		b.WriteString(hidden)
		last = end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// isWordByte reports whether c is a letter, a digit or "_".
func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// urlProblem says why raw, a server URL, does not parse, as err says, without
// any piece of raw's password: the parser's quotations of the input are
// dropped, and a message that still shows a piece of the password is replaced
// by a hint.
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
	if _, _, ok := userinfo(raw); isURL && ok {
		msg += " (percent-encode / ? # % @ and spaces in the user name and password)"
	}
	return msg
}

var quoted = regexp.MustCompile(`\s*"[^"]*"`)

// showsSecret reports whether msg, a parser's complaint about the URL raw,
// shows four characters in a row of raw's password (all of it when shorter).
func showsSecret(msg, raw string) bool {
	start, end, ok := userinfo(raw)
	if !ok {
		return false
	}
	_, pass, ok := strings.Cut(raw[start:end], ":")
	if !ok || pass == "" {
		return false
	}
	const window = 4
	if len(pass) <= window {
		return strings.Contains(msg, pass)
	}
	for k := 0; k+window <= len(pass); k++ {
		if strings.Contains(msg, pass[k:k+window]) {
			return true
		}
	}
	return false
}
