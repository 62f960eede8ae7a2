package reports

import (
	"regexp"
	"slices"
	"strings"

	"github.com/durachk/durachk/internal/redact"
)

// A command a report shows must run when pasted into a shell, and must not
// hold a credential. So every credential of a URL in it (a password in the
// user info, a secret-looking query parameter) is written as a reference to
// an environment variable, ${VAR}, in a double-quoted word the shell expands;
// the report names the variables to set (EnvNote). VAR is the variable the
// user's durachk.yaml took the credential from where it is known, else
// DURACHK_<SCHEME>_<PLACE>: DURACHK_AMQP_PASSWORD, DURACHK_SQS_SECRET_KEY.

// EnvRef is the variable a credential at place ("password", or a query
// parameter's name) of a URL with scheme is written as when no better name
// is known.
func EnvRef(scheme, place string) string {
	return "DURACHK_" + envWord(scheme) + "_" + envWord(place)
}

func envWord(s string) string {
	b := []byte(strings.ToUpper(s))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// refRE matches a reference to an environment variable.
var refRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// refMark brackets a reference while a word is quoted (it cannot occur in a
// command line).
const refMark = "\x00"

// pasteURL is the URL u with each credential replaced by refMark NAME
// refMark (a credential already written ${NAME} keeps its name), and whether
// it holds any.
func pasteURL(u string, known map[string]string) (string, bool) {
	scheme, _, _ := strings.Cut(u, "://")
	// A reference already there (a word a shell would expand) stays one.
	refs := refRE.MatchString(u)
	u = refRE.ReplaceAllString(u, refMark+"$1"+refMark)
	out := redact.URLFunc(u, func(place, value string) string {
		if value == "" {
			return ""
		}
		refs = true
		if strings.HasPrefix(value, refMark) && strings.HasSuffix(value, refMark) && strings.Count(value, refMark) == 2 {
			return value
		}
		if name, ok := known[value]; ok {
			return refMark + name + refMark
		}
		return refMark + EnvRef(scheme, place) + refMark
	})
	// A user name scrubbed because it equals the password (guest:guest) is
	// a reference too.
	if rest, ok := strings.CutPrefix(out, scheme+"://"+Redacted+":"+refMark); ok {
		out, refs = scheme+"://"+refMark+EnvRef(scheme, "user")+refMark+":"+refMark+rest, true
	}
	return out, refs
}

// PasteURL is the URL raw as one shell word with its credentials written as
// references (known maps a credential to the variable it came from).
func PasteURL(raw string, known map[string]string) string {
	u, _ := pasteURL(raw, known)
	return quoteWord(u)
}

// PasteCommand is cmd with every credential of its URL words (also
// --flag=URL) written as a reference to an environment variable, those words
// double-quoted so that a shell expands them; every other word is left as it
// is. A command that holds the redaction mask (xxxxx) where a credential was
// becomes one that runs once the variables are set.
func PasteCommand(cmd string, known map[string]string) string {
	var b strings.Builder
	for _, w := range shellWords(cmd) {
		if w.sep {
			b.WriteString(w.raw)
			continue
		}
		v, prefix := w.value, ""
		if strings.HasPrefix(v, "-") {
			if k, rest, ok := strings.Cut(v, "="); ok && strings.Contains(rest, "://") {
				prefix, v = k+"=", rest
			}
		}
		if !strings.Contains(v, "://") {
			b.WriteString(w.raw)
			continue
		}
		u, refs := pasteURL(v, known)
		if !refs {
			b.WriteString(w.raw)
			continue
		}
		b.WriteString(quoteWord(prefix + u))
	}
	return b.String()
}

// EnvVars are the variables cmd refers to, in order, each once.
func EnvVars(cmd string) []string {
	var out []string
	for _, m := range refRE.FindAllStringSubmatch(cmd, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// EnvNote says which variables to set before pasting cmd ("" when it needs
// none).
func EnvNote(cmd string) string {
	vs := EnvVars(cmd)
	if len(vs) == 0 {
		return ""
	}
	word := "variable"
	if len(vs) > 1 {
		word = "variables"
	}
	return "set the environment " + word + " " + strings.Join(vs, ", ") +
		" to the target's credentials (percent-encoded as in a URL) before running it: no report holds them"
}

// quoteWord quotes s as one shell word: as it is when it needs no quotes,
// double-quoted when it holds references (refMark NAME refMark, written
// ${NAME}), else single-quoted.
func quoteWord(s string) string {
	if !strings.Contains(s, refMark) {
		if s != "" && strings.IndexFunc(s, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@=,", r))
		}) < 0 {
			return s
		}
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteByte('"')
	for i, part := range strings.Split(s, refMark) {
		if i%2 == 1 {
			b.WriteString("${" + part + "}")
			continue
		}
		for _, r := range part {
			if strings.ContainsRune("\\\"$`", r) {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// word is a shell word of a command line (raw as written, value unquoted;
// references are not expanded), or the blanks between two (sep).
type word struct {
	raw, value string
	sep        bool
}

// shellWords splits a command line as a POSIX shell would (single quotes,
// double quotes with their backslash escapes, backslashes), keeping each
// word's raw text so that a command rebuilt from them is the same.
func shellWords(cmd string) []word {
	var out []word
	i := 0
	for i < len(cmd) {
		start := i
		if cmd[i] == ' ' || cmd[i] == '\t' || cmd[i] == '\n' {
			for i < len(cmd) && (cmd[i] == ' ' || cmd[i] == '\t' || cmd[i] == '\n') {
				i++
			}
			out = append(out, word{raw: cmd[start:i], sep: true})
			continue
		}
		var v strings.Builder
		for i < len(cmd) && cmd[i] != ' ' && cmd[i] != '\t' && cmd[i] != '\n' {
			switch c := cmd[i]; c {
			case '\'':
				end := strings.IndexByte(cmd[i+1:], '\'')
				if end < 0 {
					end = len(cmd) - i - 1
				}
				v.WriteString(cmd[i+1 : i+1+end])
				i += end + 2
			case '"':
				i++
				for i < len(cmd) && cmd[i] != '"' {
					if cmd[i] == '\\' && i+1 < len(cmd) && strings.IndexByte("\\\"$`", cmd[i+1]) >= 0 {
						i++
					}
					v.WriteByte(cmd[i])
					i++
				}
				i++
			case '\\':
				if i+1 < len(cmd) {
					i++
				}
				v.WriteByte(cmd[i])
				i++
			default:
				v.WriteByte(c)
				i++
			}
		}
		i = min(i, len(cmd))
		out = append(out, word{raw: cmd[start:i], value: v.String()})
	}
	return out
}
