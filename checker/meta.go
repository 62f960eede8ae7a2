package checker

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/durachk/durachk/pipeline"
)

// parseMeta reads the flat JSON object of pipeline.JobMeta that every enqueue
// record carries. It is the checker's hottest parse, so it scans the object
// itself and falls back to encoding/json for anything unusual (escapes, nesting).
func parseMeta(s string, m *pipeline.JobMeta) {
	if strings.IndexByte(s, '\\') >= 0 || !scanMeta(s, m) {
		*m = pipeline.JobMeta{}
		_ = json.Unmarshal([]byte(s), m)
	}
}

func scanMeta(s string, m *pipeline.JobMeta) bool {
	s = strings.TrimSpace(s)
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return false
	}
	s = s[1 : len(s)-1]
	for len(s) > 0 {
		if s[0] != '"' {
			return false
		}
		end := strings.IndexByte(s[1:], '"')
		if end < 0 || len(s) < end+3 || s[end+2] != ':' {
			return false
		}
		key := s[1 : end+1]
		s = s[end+3:]
		var val string
		quoted := len(s) > 0 && s[0] == '"'
		if quoted {
			e := strings.IndexByte(s[1:], '"')
			if e < 0 {
				return false
			}
			val, s = s[1:e+1], s[e+2:]
		} else {
			e := strings.IndexByte(s, ',')
			if e < 0 {
				e = len(s)
			}
			val, s = s[:e], s[e:]
			if strings.ContainsAny(val, "{[") {
				return false
			}
		}
		if len(s) > 0 {
			if s[0] != ',' {
				return false
			}
			s = s[1:]
		}
		switch key {
		case "tenant":
			m.Tenant = val
		case "doc":
			m.Doc = val
		case "group":
			m.Group = val
		case "hash":
			m.Hash = val
		case "v", "max", "deadline", "fail_transient", "age_budget", "created":
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return false
			}
			switch key {
			case "v":
				m.Version = int(n)
			case "max":
				m.MaxAttempts = int(n)
			case "fail_transient":
				m.FailTransient = int(n)
			case "age_budget":
				m.AgeBudget = n
			case "created":
				m.Created = n
			default:
				m.Deadline = n
			}
		case "permanent", "poison", "stubborn", "quick":
			b := val == "true"
			switch key {
			case "permanent":
				m.Permanent = b
			case "poison":
				m.Poison = b
			case "quick":
				m.Quick = b
			default:
				m.Stubborn = b
			}
		}
	}
	return true
}
