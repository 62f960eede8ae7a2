package targets

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

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
	return fmt.Sprintf("effect store %s (of target %s): %v", redact.Clip(Redact(e.URL)), e.Target, e.Err)
}

func (e *StoreError) Unwrap() error { return e.Err }

// Limits on a target URL: a host name has at most 253 bytes (DNS), and no
// broker URL with its knobs comes near maxURL.
const (
	maxURL  = 4096
	maxHost = 253
)

// checkRaw refuses what no broker URL is, before it is parsed or echoed.
func checkRaw(raw string) error {
	if strings.TrimSpace(raw) == "" {
		return fmt.Errorf("%w: empty target: want mem or a broker URL", ErrBadTarget)
	}
	if len(raw) > maxURL {
		return fmt.Errorf("%w: %s: the URL is %d bytes long; durachk takes at most %d", ErrBadTarget, redact.Clip(Redact(raw)), len(raw), maxURL)
	}
	if strings.IndexFunc(raw, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return fmt.Errorf("%w: %s: the URL holds a control character", ErrBadTarget, redact.Clip(Redact(raw)))
	}
	return nil
}

// checkURL refuses a host longer than DNS allows and a knob given twice (the
// URL's query would keep the first silently).
func checkURL(raw string, u *url.URL) error {
	if h := u.Hostname(); len(h) > maxHost {
		return fmt.Errorf("%w: %s: the host name is %d bytes long; a host name has at most %d", ErrBadTarget, redact.Clip(Redact(raw)), len(h), maxHost)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return fmt.Errorf("%w: %s: query: %v", ErrBadTarget, redact.Clip(Redact(u.Redacted())), err)
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k == "" {
			return fmt.Errorf("%w: %s: a query parameter without a name", ErrBadTarget, redact.Clip(Redact(u.Redacted())))
		}
		if len(q[k]) > 1 {
			return fmt.Errorf("%w: %s: setting %q given %d times", ErrBadTarget, redact.Clip(Redact(u.Redacted())), redact.Clip(k), len(q[k]))
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
