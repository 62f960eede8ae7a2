package targets

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/durachk/durachk/internal/redact"
)

// StoreError is an effect store that failed while a target was being set up:
// the store is named, with its URL redacted, so that the target is not
// blamed for it.
type StoreError struct {
	URL    string // may hold credentials: never printed as is
	Target string
	Err    error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("effect store %s (of target %s): %v", Echo(e.URL), e.Target, e.Err)
}

func (e *StoreError) Unwrap() error { return e.Err }

// Limits on a target URL: a host name has at most 253 bytes (DNS), and no
// broker URL with its knobs comes near maxURL.
const (
	maxURL  = 4096
	maxHost = 253
)

// Echo is raw as an error message may repeat it: credentials masked (also in
// a URL without a scheme, which Redact leaves alone), clipped to one short
// line.
func Echo(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return redact.Clip(Redact(u.Redacted()))
	}
	r := Redact(raw)
	if r == raw {
		if i := strings.LastIndex(r, "@"); i >= 0 {
			r = redact.Mask + r[i:]
		}
	}
	return redact.Clip(r)
}

// checkRaw refuses what no broker URL is, before it is parsed or echoed.
func checkRaw(raw string) error {
	if strings.TrimSpace(raw) == "" {
		return fmt.Errorf("%w: empty target: want mem or a broker URL", ErrBadTarget)
	}
	if len(raw) > maxURL {
		return fmt.Errorf("%w: %s: the URL is %d bytes long; durachk takes at most %d", ErrBadTarget, Echo(raw), len(raw), maxURL)
	}
	if !utf8.ValidString(raw) {
		return fmt.Errorf("%w: %s: the URL is not valid UTF-8", ErrBadTarget, Echo(raw))
	}
	if strings.IndexFunc(raw, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return fmt.Errorf("%w: %s: the URL holds a control character", ErrBadTarget, Echo(raw))
	}
	// A space may stand in a knob's value (control.kill=docker kill -s KILL c),
	// never in the scheme, host or path.
	if base, _, _ := strings.Cut(raw, "?"); strings.ContainsAny(base, " \u00a0") {
		return fmt.Errorf("%w: %s: a space before the query (host, port or path)", ErrBadTarget, Echo(raw))
	}
	return nil
}

// validHost accepts a DNS name (letters, digits, '-', '_', '.'), an IPv4
// address or a bracketed IPv6 address (url.URL.Hostname strips the brackets).
func validHost(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// checkURL refuses a host longer than DNS allows and a knob given twice (the
// URL's query would keep the first silently).
func checkURL(raw string, u *url.URL) error {
	if h := u.Hostname(); len(h) > maxHost {
		return fmt.Errorf("%w: %s: the host name is %d bytes long; a host name has at most %d", ErrBadTarget, Echo(raw), len(h), maxHost)
	}
	if strings.Contains(raw, "#") {
		return fmt.Errorf("%w: %s: a fragment (#...) is not part of a broker URL", ErrBadTarget, Echo(raw))
	}
	// A multi-host URL (postgres://u@h1:5432,h2:5432/db, pgx's form for a
	// primary and its standbys) names each host with its port.
	for _, hp := range strings.Split(u.Host, ",") {
		h, p := hp, ""
		if hh, pp, err := net.SplitHostPort(hp); err == nil {
			h, p = hh, pp
		} else if strings.HasPrefix(hp, "[") {
			h = strings.Trim(hp, "[]")
		}
		if !validHost(h) {
			return fmt.Errorf("%w: %s: host %q: want a host name or an IP address", ErrBadTarget, Echo(raw), redact.Clip(h))
		}
		if p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return fmt.Errorf("%w: %s: port %q: want 1 to 65535", ErrBadTarget, Echo(raw), redact.Clip(p))
			}
		}
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return fmt.Errorf("%w: %s: query: %v", ErrBadTarget, Echo(u.String()), err)
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k == "" {
			return fmt.Errorf("%w: %s: a query parameter without a name", ErrBadTarget, Echo(u.String()))
		}
		// addr names the further nodes of a cluster (a Sentinel URL, an AMQP
		// node list): it repeats by design.
		if len(q[k]) > 1 && k != "addr" {
			return fmt.Errorf("%w: %s: setting %q given %d times", ErrBadTarget, Echo(u.String()), redact.Clip(k), len(q[k]))
		}
	}
	return nil
}

// rabbitArgKinds types RabbitMQ's documented queue arguments so that a typo
// (`x-delivery-limit=abc`) is a configuration error here rather than a
// PRECONDITION_FAILED, or a string the broker ignores, at declare time.
// Arguments not listed pass through as written.
var rabbitArgKinds = map[string]struct {
	min, max int64
	values   []string
}{
	"x-delivery-limit":            {min: 0, max: 1<<31 - 1},
	"x-message-ttl":               {min: 0, max: 1<<32 - 1},
	"x-expires":                   {min: 1, max: 1<<32 - 1},
	"x-max-length":                {min: 0, max: 1<<63 - 1},
	"x-max-length-bytes":          {min: 0, max: 1<<63 - 1},
	"x-max-priority":              {min: 0, max: 255},
	"x-quorum-initial-group-size": {min: 1, max: 1<<31 - 1},
	"x-quorum-target-group-size":  {min: 1, max: 1<<31 - 1},
	"x-overflow":                  {values: []string{"drop-head", "reject-publish", "reject-publish-dlx"}},
	"x-dead-letter-strategy":      {values: []string{"at-most-once", "at-least-once"}},
	"x-queue-mode":                {values: []string{"default", "lazy"}},
	"x-queue-leader-locator":      {values: []string{"client-local", "balanced", "random", "least-leaders"}},
	"x-queue-master-locator":      {values: []string{"client-local", "balanced", "random", "min-masters"}},
	"x-single-active-consumer":    {values: []string{"true", "false"}},
}

// checkRabbitKnobs checks the typed queue arguments and the AMQP fields that
// are 16-bit on the wire (prefetch count, heartbeat seconds).
func checkRabbitKnobs(opts map[string]string) error {
	for _, k := range []string{"prefetch", "heartbeat"} {
		if v, ok := opts[k]; ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 65535 {
				return fmt.Errorf("%w: %s=%q: at most 65535 (a 16-bit field in AMQP)", ErrBadTarget, k, v)
			}
		}
	}
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		arg, ok := strings.CutPrefix(k, rabbitArgPrefix)
		if !ok {
			continue
		}
		kind, known := rabbitArgKinds[arg]
		v := opts[k]
		switch {
		case !known:
		case kind.values != nil:
			if !slices.Contains(kind.values, v) {
				return fmt.Errorf("%w: %s=%q: want %s", ErrBadTarget, k, redact.Clip(v), strings.Join(kind.values, ", "))
			}
		default:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < kind.min || n > kind.max {
				return fmt.Errorf("%w: %s=%q: want a whole number from %d to %d", ErrBadTarget, k, redact.Clip(v), kind.min, kind.max)
			}
		}
	}
	return nil
}
