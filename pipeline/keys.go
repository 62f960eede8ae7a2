package pipeline

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ErrInvalidKey is returned (wrapped) for any key part that does not validate.
var ErrInvalidKey = errors.New("invalid idempotency key")

var tenantRE = regexp.MustCompile(`^[a-z][a-z0-9-]{1,32}$`)

// BuildKey returns tenant:doc:vN. It is the only way the pipeline builds a key, so
// a key without a valid tenant cannot exist.
func BuildKey(tenant, documentID string, version int) (string, error) {
	switch {
	case !tenantRE.MatchString(tenant):
		return "", fmt.Errorf("%w: tenant %q must match %s", ErrInvalidKey, tenant, tenantRE)
	case documentID == "":
		return "", fmt.Errorf("%w: empty document id", ErrInvalidKey)
	case version < 1:
		return "", fmt.Errorf("%w: version %d < 1", ErrInvalidKey, version)
	}
	return tenant + ":" + documentID + ":v" + strconv.Itoa(version), nil
}

// KeyTenant returns the tenant a key was built for, and false for a key that
// BuildKey could not have produced.
func KeyTenant(key string) (string, bool) {
	tenant, rest, ok := strings.Cut(key, ":")
	if !ok || !validTenant(tenant) {
		return "", false
	}
	i := strings.LastIndex(rest, ":v")
	if i <= 0 {
		return "", false
	}
	if v, err := strconv.Atoi(rest[i+2:]); err != nil || v < 1 {
		return "", false
	}
	return tenant, true
}

// validTenant is tenantRE without the regexp engine: the checker calls it for
// every lease.
func validTenant(t string) bool {
	if len(t) < 2 || len(t) > 33 || t[0] < 'a' || t[0] > 'z' {
		return false
	}
	for i := 1; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
