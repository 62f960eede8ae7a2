package checker

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/durachk/durachk/pipeline"
)

// jobMeta is pipeline.JobMeta, compact: tenant and group interned, the
// payload hash as bytes when it is 64 hex digits, the document id left in the
// key. A field pipeline.JobMeta gains that jobMeta lacks only costs memory:
// the metadata is then kept as recorded (setMeta checks the regeneration).
type jobMeta struct {
	Deadline, AgeBudget, Created        int64
	Version, MaxAttempts, FailTransient int32
	tenant, group                       uint16
	hash                                [32]byte
	Poison, Stubborn, Permanent, Quick  bool
	hashHex                             bool // hash holds the payload hash
}

// metaRegen is the value id of an enqueue record whose metadata the checker
// regenerates from the job's jobMeta (and its key) instead of keeping it: the
// regenerated text was checked to be the record's, byte for byte.
const metaRegen = ^uint32(0)

// setMeta stores the metadata of j's first enqueue (raw, parsed as m, under
// key), and reports whether raw can be regenerated from what it stored.
func (c *Checker) setMeta(j *job, m pipeline.JobMeta, raw, key string) bool {
	jm := jobMeta{Deadline: m.Deadline, AgeBudget: m.AgeBudget, Created: m.Created, Version: int32(m.Version), MaxAttempts: int32(m.MaxAttempts),
		FailTransient: int32(m.FailTransient), Poison: m.Poison, Stubborn: m.Stubborn, Permanent: m.Permanent, Quick: m.Quick}
	exact := int(jm.Version) == m.Version && int(jm.MaxAttempts) == m.MaxAttempts && int(jm.FailTransient) == m.FailTransient
	jm.tenant = uint16(c.strs.id(m.Tenant))
	if m.Tenant != "" && jm.tenant == 0 {
		j.rareW().tenant = strings.Clone(m.Tenant)
	}
	jm.group = uint16(c.strs.id(m.Group))
	if m.Group != "" && jm.group == 0 {
		j.rareW().group = strings.Clone(m.Group)
	}
	if len(m.Hash) == 64 && strings.ToLower(m.Hash) == m.Hash {
		if _, err := hex.Decode(jm.hash[:], []byte(m.Hash)); err == nil {
			jm.hashHex = true
		}
	}
	if !jm.hashHex && m.Hash != "" {
		j.rareW().hash = strings.Clone(m.Hash)
	}
	j.meta = jm
	if !exact {
		return false
	}
	doc, ok := docFromKey(key, m.Tenant, m.Version)
	return ok && doc == m.Doc && c.regenMeta(j, key) == raw
}

// docFromKey is the document id of a key tenant:doc:vN.
func docFromKey(key, tenant string, version int) (string, bool) {
	rest, ok := strings.CutPrefix(key, tenant+":")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, ":v"+strconv.Itoa(version))
}

// regenMeta writes j's metadata as the pipeline does.
func (c *Checker) regenMeta(j *job, key string) string {
	m := pipeline.JobMeta{Tenant: c.tenant(j), Version: int(j.meta.Version), MaxAttempts: int(j.meta.MaxAttempts),
		Deadline: j.meta.Deadline, Group: c.group(j), Hash: c.hash(j), Permanent: j.meta.Permanent, Poison: j.meta.Poison,
		Stubborn: j.meta.Stubborn, FailTransient: int(j.meta.FailTransient), AgeBudget: j.meta.AgeBudget, Created: j.meta.Created, Quick: j.meta.Quick}
	m.Doc, _ = docFromKey(key, m.Tenant, m.Version)
	b, _ := json.Marshal(m)
	return string(b)
}

func (c *Checker) tenant(j *job) string {
	if j.meta.tenant != 0 {
		return c.strs.str(int(j.meta.tenant))
	}
	return j.rare().tenant
}

func (c *Checker) group(j *job) string {
	if j.meta.group != 0 {
		return c.strs.str(int(j.meta.group))
	}
	return j.rare().group
}

func (c *Checker) hash(j *job) string {
	if j.meta.hashHex {
		return hex.EncodeToString(j.meta.hash[:])
	}
	return j.rare().hash
}

// sameHash reports whether two jobs carry one payload hash; an unknown hash
// is never the same.
func (c *Checker) sameHash(a, b *job) bool {
	if a.meta.hashHex && b.meta.hashHex {
		return a.meta.hash == b.meta.hash
	}
	return c.hash(a) == c.hash(b)
}

func (c *Checker) hasHash(j *job) bool { return j.meta.hashHex || j.rare().hash != "" }
