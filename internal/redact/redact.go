// Package redact removes credentials from URLs and command lines before they
// reach a log, an error or a report. Every function is pure and safe for
// concurrent use.
package redact

import (
	"net/url"
	"strings"
)

// Mask replaces every credential.
const Mask = "xxxxx"

// Sensitive reports whether a knob or query parameter name looks like it holds
// a credential.
func Sensitive(name string) bool {
	n := strings.ToLower(name)
	if strings.HasPrefix(n, "control.") {
		return true // broker control commands may carry credentials (targets/control.go)
	}
	for _, s := range []string{"password", "passwd", "secret", "token", "credential", "auth", "access_key", "accesskey", "access-key", "session", "private_key", "apikey", "api_key", "api-key"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return n == "pw" || n == "pass" || n == "key_id" || n == "sig" || n == "signature"
}

// URL replaces the password of a URL's user info and the value of every
// secret-looking query parameter with xxxxx. A string that is not a URL comes
// back unchanged.
func URL(s string) string {
	return URLFunc(s, func(string, string) string { return Mask })
}

// URLFunc replaces each credential of a URL with what mask returns for it:
// mask gets the place ("password" for the user info's, else the query
// parameter's name) and the value there, as written in the URL. A string
// that is not a URL comes back unchanged.
func URLFunc(s string, mask func(param, value string) string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || scheme == "" || strings.ContainsAny(scheme, " \t/") {
		return s
	}
	// User info: everything before the last @ of the authority.
	authEnd := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authEnd = i
	}
	if at := strings.LastIndex(rest[:authEnd], "@"); at >= 0 {
		if user, pw, hasPw := strings.Cut(rest[:at], ":"); hasPw {
			rest = user + ":" + mask("password", pw) + rest[at:]
		}
	}
	base, query, hasQ := strings.Cut(rest, "?")
	if !hasQ {
		return scheme + "://" + rest
	}
	frag := ""
	if i := strings.Index(query, "#"); i >= 0 {
		query, frag = query[:i], query[i:]
	}
	parts := strings.Split(query, "&")
	for i, p := range parts {
		k, v, hasV := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if hasV && Sensitive(name) {
			parts[i] = k + "=" + mask(name, v)
		}
	}
	return scheme + "://" + base + "?" + strings.Join(parts, "&") + frag
}

// Command redacts every URL-looking word of a command line (also
// --flag=URL forms).
func Command(cmd string) string {
	words := strings.Split(cmd, " ")
	for i, w := range words {
		if !strings.Contains(w, "://") {
			continue
		}
		if k, v, ok := strings.Cut(w, "="); ok && strings.HasPrefix(k, "-") && strings.Contains(v, "://") {
			words[i] = k + "=" + URL(v)
			continue
		}
		prefix := ""
		for len(w) > 0 && (w[0] == '\'' || w[0] == '"') {
			prefix, w = prefix+w[:1], w[1:]
		}
		words[i] = prefix + URL(w)
	}
	return strings.Join(words, " ")
}

// Secrets returns the credentials a URL carries (its password and the values
// of secret-looking query parameters), for Scrub.
func Secrets(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	var out []string
	if u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			out = append(out, pw)
		}
	}
	for k, vs := range u.Query() {
		if Sensitive(k) {
			for _, v := range vs {
				if v != "" {
					out = append(out, v)
				}
			}
		}
	}
	return out
}
