package reports

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// devVersion names a build that carries no module version (go test, or a
// build without VCS information).
const devVersion = "0.1.0-dev"

// Build is what the binary knows about itself from its build information.
type Build struct {
	// Version is the module version the go command stamped (a tag, or a
	// pseudo-version built from the commit, "+dirty" when the tree had local
	// changes); devVersion when there is none.
	Version   string
	Revision  string // the VCS commit, "" if unknown
	Time      string // the commit time (RFC 3339), "" if unknown
	Modified  bool   // the working tree had uncommitted changes
	GoVersion string
}

// ReadBuild reads the running binary's build information.
func ReadBuild() Build {
	b := Build{Version: devVersion}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GoVersion = bi.GoVersion
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		b.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	// Without a stamped module version the revision still tells builds apart.
	if b.Version == devVersion && b.Revision != "" {
		b.Version += "+" + short(b.Revision)
		if b.Modified {
			b.Version += ".dirty"
		}
	}
	return b
}

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// String is what `durachk --version` prints.
func (b Build) String() string {
	var parts []string
	if b.Revision != "" {
		rev := "revision " + b.Revision
		if b.Time != "" {
			rev += " (" + b.Time + ")"
		}
		parts = append(parts, rev)
	} else {
		parts = append(parts, "revision unknown")
	}
	if b.Modified {
		parts = append(parts, "modified")
	}
	if b.GoVersion != "" {
		parts = append(parts, b.GoVersion)
	}
	return fmt.Sprintf("durachk %s (%s)", b.Version, strings.Join(parts, ", "))
}
