package lazyfs

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tfile is an open file in a test: through the mount (an *os.File) or straight
// through the Disk.
type tfile interface {
	Write(p []byte) (int, error) // at the end (the file was opened to append) or at the offset
	WriteAt(p []byte, off int64) (int, error)
	Truncate(size int64) error
	Sync() error
	Close() error
}

// tfs is one way to drive the file system: system calls on the mount, or the
// Disk's methods on the view (the same model without FUSE).
type tfs interface {
	path(name string) string
	open(name string, flag int) (tfile, error)
	mkdir(name string) error
	rename(from, to string) error
	remove(name string) error
	rmdir(name string) error
	link(from, to string) error
	symlink(target, name string) error
	truncate(name string, size int64) error
	syncDir(name string) error
	datasync(f tfile) error
	powerLoss() error
	checkpoint() error
}

type mountFS struct{ f *FS }

func (m mountFS) path(name string) string { return filepath.Join(m.f.Mountpoint(), name) }
func (m mountFS) open(name string, flag int) (tfile, error) {
	return os.OpenFile(m.path(name), flag, 0o644)
}
func (m mountFS) mkdir(name string) error        { return os.Mkdir(m.path(name), 0o755) }
func (m mountFS) rename(from, to string) error   { return os.Rename(m.path(from), m.path(to)) }
func (m mountFS) remove(name string) error       { return syscall.Unlink(m.path(name)) }
func (m mountFS) rmdir(name string) error        { return syscall.Rmdir(m.path(name)) }
func (m mountFS) link(from, to string) error     { return os.Link(m.path(from), m.path(to)) }
func (m mountFS) symlink(target, n string) error { return os.Symlink(target, m.path(n)) }
func (m mountFS) truncate(n string, s int64) error {
	return os.Truncate(m.path(n), s)
}
func (m mountFS) syncDir(name string) error {
	d, err := os.Open(m.path(name))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
func (m mountFS) datasync(f tfile) error { return unix.Fdatasync(int(f.(*os.File).Fd())) }
func (m mountFS) powerLoss() error       { _, err := m.f.PowerLoss(); return err }
func (m mountFS) checkpoint() error      { return m.f.Sync() }

type diskFS struct{ d *Disk }

type dfile struct {
	d      *Disk
	f      *os.File
	n      *node
	append bool
}

func (f *dfile) fd() int { return int(f.f.Fd()) }
func (f *dfile) Write(p []byte) (int, error) {
	off, err := f.f.Seek(0, 1)
	if f.append {
		var st syscall.Stat_t
		if err := syscall.Fstat(f.fd(), &st); err != nil {
			return 0, err
		}
		off = st.Size
	}
	if err != nil {
		return 0, err
	}
	k, err := f.d.write(f.n, f.fd(), p, off)
	if err == nil {
		_, err = f.f.Seek(off+int64(k), 0)
	}
	return k, err
}
func (f *dfile) WriteAt(p []byte, off int64) (int, error) { return f.d.write(f.n, f.fd(), p, off) }
func (f *dfile) Truncate(size int64) error {
	return f.d.change(f.n, f.fd(), size, 1<<62, func() error { return syscall.Ftruncate(f.fd(), size) })
}
func (f *dfile) Sync() error  { return f.d.fsync(f.n, f.fd()) }
func (f *dfile) Close() error { return f.f.Close() }

func (m diskFS) path(name string) string { return filepath.Join(m.d.View(), name) }
func (m diskFS) open(name string, flag int) (tfile, error) {
	p := m.path(name)
	rw := flag&^(os.O_WRONLY|os.O_APPEND|os.O_TRUNC) | os.O_RDWR
	var f *os.File
	err := m.d.Create(p, func() (err error) { f, err = os.OpenFile(p, rw, 0o644); return err })
	if err != nil {
		return nil, err
	}
	n, err := m.d.nodeOfFd(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	df := &dfile{d: m.d, f: f, n: n, append: flag&os.O_APPEND != 0}
	if flag&os.O_TRUNC != 0 {
		if err := df.Truncate(0); err != nil {
			return nil, err
		}
	}
	return df, nil
}
func (m diskFS) mkdir(name string) error {
	return m.d.Create(m.path(name), func() error { return os.Mkdir(m.path(name), 0o755) })
}
func (m diskFS) rename(from, to string) error { return m.d.Rename(m.path(from), m.path(to), 0) }
func (m diskFS) remove(name string) error     { return m.d.Unlink(m.path(name)) }
func (m diskFS) rmdir(name string) error      { return m.d.Rmdir(m.path(name)) }
func (m diskFS) link(from, to string) error {
	return m.d.Create(m.path(to), func() error { return os.Link(m.path(from), m.path(to)) })
}
func (m diskFS) symlink(target, n string) error {
	return m.d.Create(m.path(n), func() error { return os.Symlink(target, m.path(n)) })
}
func (m diskFS) truncate(n string, s int64) error {
	f, err := m.open(n, os.O_RDWR)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Truncate(s)
}
func (m diskFS) syncDir(name string) error { return m.d.FsyncDir(m.path(name)) }
func (m diskFS) datasync(f tfile) error    { return f.Sync() }
func (m diskFS) powerLoss() error          { _, err := m.d.PowerLoss(); return err }
func (m diskFS) checkpoint() error         { return m.d.Sync() }

// layers returns the ways to drive the file system: the Disk always, the
// mount where FUSE is available.
func layers(opts Options) map[string]func(t *testing.T) tfs {
	return map[string]func(t *testing.T) tfs{
		"disk": func(t *testing.T) tfs {
			d, err := OpenDisk(t.TempDir(), opts)
			if err != nil {
				t.Fatal(err)
			}
			return diskFS{d}
		},
		"fuse": func(t *testing.T) tfs { return mountFS{mountForTest(t, opts)} },
	}
}

func mountForTest(t *testing.T, opts Options) *FS {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := Mount(mnt, filepath.Join(dir, "back"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return f
}

// tree lists everything under root: "f" → "file:content", "d/" → "dir",
// "l" → "link:target".
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case rel == ".":
		case info.IsDir():
			out[rel+"/"] = "dir"
		case info.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link:" + target
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = "file:" + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type step func(fs tfs) error

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// writeFile creates (or opens) name, writes data at the end and closes it,
// fsyncing first if sync.
func writeFile(fs tfs, name, data string, sync bool) error {
	f, err := fs.open(name, os.O_RDWR|os.O_CREATE|os.O_APPEND)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(data)); err != nil {
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	return f.Close()
}

func overwrite(fs tfs, name, data string, off int64, sync bool) error {
	f, err := fs.open(name, os.O_RDWR)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(data), off); err != nil {
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	return f.Close()
}

var pattern = strings.Repeat("0123456789abcdef", 1000) // 16000 bytes: four pages and a bit

func TestPowerLoss(t *testing.T) {
	cases := []struct {
		name string
		// before runs and is made durable (a checkpoint); then run; then the power fails.
		before, run []step
		want        map[string]string
		journal     map[string]string // with Options.Journal, where it differs
		mountOnly   bool              // needs the kernel (open flags)
	}{
		{name: "a write never fsynced is gone",
			before: []step{func(fs tfs) error { return writeFile(fs, "f", "old", false) }},
			run:    []step{func(fs tfs) error { return overwrite(fs, "f", "new", 0, false) }},
			want:   map[string]string{"f": "file:old"}},
		{name: "a write fsynced survives",
			before: []step{func(fs tfs) error { return writeFile(fs, "f", "old", false) }},
			run:    []step{func(fs tfs) error { return overwrite(fs, "f", "new", 0, true) }},
			want:   map[string]string{"f": "file:new"}},
		{name: "fdatasync makes data and size durable",
			before: []step{func(fs tfs) error { return writeFile(fs, "f", "abc", false) }},
			run: []step{func(fs tfs) error {
				f, err := fs.open("f", os.O_WRONLY|os.O_APPEND)
				if err != nil {
					return err
				}
				if _, err := f.Write([]byte("def")); err != nil {
					return err
				}
				if err := fs.datasync(f); err != nil {
					return err
				}
				if _, err := f.Write([]byte("ghi")); err != nil {
					return err
				}
				return f.Close()
			}},
			want: map[string]string{"f": "file:abcdef"}},
		{name: "a write crossing pages of a large file is undone page by page",
			before: []step{func(fs tfs) error { return writeFile(fs, "f", pattern, false) }},
			run: []step{
				func(fs tfs) error { return overwrite(fs, "f", strings.Repeat("X", 9000), 3000, false) },
				func(fs tfs) error { return overwrite(fs, "f", "YY", 4095, false) },
				func(fs tfs) error { return overwrite(fs, "f", "tail past the end", 15990, false) },
			},
			want: map[string]string{"f": "file:" + pattern}},
		{name: "a file created and never synced is gone",
			run:  []step{func(fs tfs) error { return writeFile(fs, "g", "data", false) }},
			want: map[string]string{}},
		{name: "a file fsynced whose directory was not is gone",
			run:     []step{func(fs tfs) error { return writeFile(fs, "g", "data", true) }},
			want:    map[string]string{},
			journal: map[string]string{"g": "file:data"}},
		{name: "a file whose directory was fsynced but not its data is empty",
			run: []step{func(fs tfs) error { return writeFile(fs, "g", "data", false) },
				func(fs tfs) error { return fs.syncDir("") }},
			want: map[string]string{"g": "file:"}},
		{name: "a file fsynced in a fsynced directory survives",
			run: []step{func(fs tfs) error { return writeFile(fs, "g", "data", true) },
				func(fs tfs) error { return fs.syncDir("") }},
			want: map[string]string{"g": "file:data"}},
		{name: "a rename before the directory fsync is undone",
			before: []step{func(fs tfs) error { return writeFile(fs, "a", "1", false) }},
			run: []step{func(fs tfs) error { return writeFile(fs, "tmp", "2", true) },
				func(fs tfs) error { return fs.rename("tmp", "a") }},
			want:    map[string]string{"a": "file:1"},
			journal: map[string]string{"a": "file:1", "tmp": "file:2"}}, // the fsync of tmp committed its creation
		{name: "a rename followed by an fsync of another file",
			before: []step{func(fs tfs) error { return writeFile(fs, "a", "1", false) }, func(fs tfs) error { return writeFile(fs, "other", "", false) }},
			run: []step{func(fs tfs) error { return writeFile(fs, "tmp", "2", true) },
				func(fs tfs) error { return fs.rename("tmp", "a") },
				func(fs tfs) error { return writeFile(fs, "other", "o", true) }},
			want:    map[string]string{"a": "file:1", "other": "file:o"},
			journal: map[string]string{"a": "file:2", "other": "file:o"}},
		{name: "a rename after the directory fsync survives",
			before: []step{func(fs tfs) error { return writeFile(fs, "a", "1", false) }},
			run: []step{func(fs tfs) error { return writeFile(fs, "tmp", "2", true) },
				func(fs tfs) error { return fs.rename("tmp", "a") },
				func(fs tfs) error { return fs.syncDir("") }},
			want: map[string]string{"a": "file:2"}},
		{name: "a rename over a durable file brings both back",
			before: []step{func(fs tfs) error { return writeFile(fs, "a", "1", false) },
				func(fs tfs) error { return writeFile(fs, "b", "2", false) }},
			run:  []step{func(fs tfs) error { return fs.rename("b", "a") }},
			want: map[string]string{"a": "file:1", "b": "file:2"}},
		{name: "a rename across directories is durable per directory",
			before: []step{func(fs tfs) error { return fs.mkdir("d1") }, func(fs tfs) error { return fs.mkdir("d2") },
				func(fs tfs) error { return writeFile(fs, "d1/x", "x", false) }},
			run: []step{func(fs tfs) error { return fs.rename("d1/x", "d2/x") },
				func(fs tfs) error { return fs.syncDir("d2") }},
			want:    map[string]string{"d1/": "dir", "d2/": "dir", "d1/x": "file:x", "d2/x": "file:x"},
			journal: map[string]string{"d1/": "dir", "d2/": "dir", "d2/x": "file:x"}},
		{name: "a truncation never fsynced is undone",
			before: []step{func(fs tfs) error { return writeFile(fs, "f", pattern, false) }},
			run:    []step{func(fs tfs) error { return fs.truncate("f", 100) }},
			want:   map[string]string{"f": "file:" + pattern}},
		{name: "a truncation fsynced survives",
			before: []step{func(fs tfs) error { return writeFile(fs, "f", pattern, false) }},
			run: []step{func(fs tfs) error {
				f, err := fs.open("f", os.O_RDWR)
				if err != nil {
					return err
				}
				if err := f.Truncate(100); err != nil {
					return err
				}
				if err := f.Sync(); err != nil {
					return err
				}
				return f.Close()
			}},
			want: map[string]string{"f": "file:" + pattern[:100]}},
		{name: "a truncation, then writes past it, are undone together",
			before: []step{func(fs tfs) error { return writeFile(fs, "f", pattern, false) }},
			run: []step{func(fs tfs) error { return fs.truncate("f", 5000) },
				func(fs tfs) error { return overwrite(fs, "f", "zz", 12000, false) },
				func(fs tfs) error { return overwrite(fs, "f", "yy", 4999, false) }},
			want: map[string]string{"f": "file:" + pattern}},
		{name: "an O_TRUNC open never fsynced is undone",
			before: []step{func(fs tfs) error { return writeFile(fs, "f", "hello", false) }},
			run: []step{func(fs tfs) error {
				f, err := fs.open("f", os.O_WRONLY|os.O_TRUNC)
				if err != nil {
					return err
				}
				if _, err := f.Write([]byte("x")); err != nil {
					return err
				}
				return f.Close()
			}},
			want: map[string]string{"f": "file:hello"}},
		{name: "an unlink before the directory fsync is undone, with the file's durable content",
			before: []step{func(fs tfs) error { return writeFile(fs, "f", "old", false) }},
			run: []step{func(fs tfs) error { return overwrite(fs, "f", "new", 0, false) },
				func(fs tfs) error { return fs.remove("f") }},
			want: map[string]string{"f": "file:old"}},
		{name: "an unlink after the directory fsync survives",
			before: []step{func(fs tfs) error { return writeFile(fs, "f", "old", false) }},
			run:    []step{func(fs tfs) error { return fs.remove("f") }, func(fs tfs) error { return fs.syncDir("") }},
			want:   map[string]string{}},
		{name: "a tree removed without fsync comes back",
			before: []step{func(fs tfs) error { return fs.mkdir("d") }, func(fs tfs) error { return fs.mkdir("d/e") },
				func(fs tfs) error { return writeFile(fs, "d/e/f", "deep", false) }},
			run: []step{func(fs tfs) error { return fs.remove("d/e/f") }, func(fs tfs) error { return fs.rmdir("d/e") },
				func(fs tfs) error { return fs.rmdir("d") }},
			want: map[string]string{"d/": "dir", "d/e/": "dir", "d/e/f": "file:deep"}},
		{name: "a tree removed, only the top directory fsynced, is gone",
			before: []step{func(fs tfs) error { return fs.mkdir("d") }, func(fs tfs) error { return fs.mkdir("d/e") },
				func(fs tfs) error { return writeFile(fs, "d/e/f", "deep", false) }},
			run: []step{func(fs tfs) error { return fs.remove("d/e/f") }, func(fs tfs) error { return fs.rmdir("d/e") },
				func(fs tfs) error { return fs.rmdir("d") }, func(fs tfs) error { return fs.syncDir("") }},
			want: map[string]string{}},
		{name: "a new directory fsynced in its parent but not itself is empty",
			run: []step{func(fs tfs) error { return fs.mkdir("d") },
				func(fs tfs) error { return writeFile(fs, "d/f", "x", true) },
				func(fs tfs) error { return fs.syncDir("") }},
			want:    map[string]string{"d/": "dir"},
			journal: map[string]string{"d/": "dir", "d/f": "file:x"}},
		{name: "a file fsynced in a new directory, nothing else",
			run:     []step{func(fs tfs) error { return fs.mkdir("d") }, func(fs tfs) error { return writeFile(fs, "d/f", "x", true) }},
			want:    map[string]string{},
			journal: map[string]string{"d/": "dir", "d/f": "file:x"}},
		{name: "an unlink followed by an fsync of another file",
			before:  []step{func(fs tfs) error { return writeFile(fs, "f", "old", false) }, func(fs tfs) error { return writeFile(fs, "other", "", false) }},
			run:     []step{func(fs tfs) error { return fs.remove("f") }, func(fs tfs) error { return writeFile(fs, "other", "o", true) }},
			want:    map[string]string{"f": "file:old", "other": "file:o"},
			journal: map[string]string{"other": "file:o"}},
		{name: "a hard link survives the removal of the first name once both are durable",
			before: []step{func(fs tfs) error { return writeFile(fs, "a", "1", false) }},
			run: []step{func(fs tfs) error { return fs.link("a", "b") }, func(fs tfs) error { return fs.syncDir("") },
				func(fs tfs) error { return fs.remove("a") }},
			want: map[string]string{"a": "file:1", "b": "file:1"}},
		{name: "symlinks are entries like any other",
			run: []step{func(fs tfs) error { return fs.symlink("target-a", "la") }, func(fs tfs) error { return fs.syncDir("") },
				func(fs tfs) error { return fs.symlink("target-b", "lb") }},
			want: map[string]string{"la": "link:target-a"}},
		{name: "a write through O_DSYNC is durable at once",
			mountOnly: true,
			before:    []step{func(fs tfs) error { return writeFile(fs, "f", "old", false) }},
			run: []step{func(fs tfs) error {
				f, err := fs.open("f", os.O_WRONLY|os.O_APPEND|syscall.O_DSYNC)
				if err != nil {
					return err
				}
				if _, err := f.Write([]byte("+sync")); err != nil {
					return err
				}
				return f.Close()
			}},
			want: map[string]string{"f": "file:old+sync"}},
	}
	for _, model := range []string{"posix", "journal"} {
		for lname, layer := range layers(Options{Journal: model == "journal"}) {
			t.Run(model+"/"+lname, func(t *testing.T) {
				for _, c := range cases {
					t.Run(c.name, func(t *testing.T) {
						if c.mountOnly && lname != "fuse" {
							t.Skip("skipped: open flags reach only the mount")
						}
						want := c.want
						if model == "journal" && c.journal != nil {
							want = c.journal
						}
						fs := layer(t)
						for _, s := range c.before {
							must(t, s(fs))
						}
						must(t, fs.checkpoint())
						for _, s := range c.run {
							must(t, s(fs))
						}
						must(t, fs.powerLoss())
						if got := tree(t, fs.path("")); !maps.Equal(got, want) {
							t.Errorf("after the power loss:\n got %v\nwant %v", brief(got), brief(want))
						}
					})
				}
			})
		}
	}
}

func brief(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		if len(v) > 40 {
			v = fmt.Sprintf("%s…(%d bytes)", v[:30], len(v))
		}
		parts = append(parts, k+"="+v)
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// TestReadsSeeUnsyncedWrites: until the power fails, the file system is an
// ordinary one.
func TestReadsSeeUnsyncedWrites(t *testing.T) {
	for lname, layer := range layers(Options{}) {
		t.Run(lname, func(t *testing.T) {
			fs := layer(t)
			must(t, writeFile(fs, "f", pattern, false))
			must(t, overwrite(fs, "f", "XYZ", 4000, false))
			must(t, fs.mkdir("d"))
			must(t, fs.rename("f", "d/g"))
			want := pattern[:4000] + "XYZ" + pattern[4003:]
			if got := tree(t, fs.path("")); !maps.Equal(got, map[string]string{"d/": "dir", "d/g": "file:" + want}) {
				t.Errorf("before the power loss: %v", brief(got))
			}
		})
	}
}

// TestAppendOnlyLogs replays what Redis's AOF (write, then fdatasync per
// command, per second or never) and Postgres's WAL (a pre-allocated segment
// made durable by a durable rename, records written over it, fdatasync at
// commit) do, and checks that exactly the synced records survive, over two
// power losses.
func TestAppendOnlyLogs(t *testing.T) {
	record := func(i int) string { return fmt.Sprintf("*3\r\n$4\r\nXADD\r\n$5\r\nq-%03d\r\n", i) }
	aof := func(fs tfs, from, to, every int) (string, error) {
		f, err := fs.open("appendonly.aof", os.O_WRONLY|os.O_APPEND|os.O_CREATE)
		if err != nil {
			return "", err
		}
		var synced strings.Builder
		var pending string
		for i := from; i < to; i++ {
			r := record(i)
			if _, err := f.Write([]byte(r)); err != nil {
				return "", err
			}
			pending += r
			if every > 0 && (i+1)%every == 0 {
				if err := fs.datasync(f); err != nil {
					return "", err
				}
				synced.WriteString(pending)
				pending = ""
			}
		}
		return synced.String(), f.Close()
	}
	for lname, layer := range layers(Options{}) {
		t.Run(lname, func(t *testing.T) {
			for _, c := range []struct {
				name  string
				every int
			}{{"appendfsync always", 1}, {"appendfsync everysec (a batch)", 7}, {"appendfsync no", 0}} {
				t.Run("aof "+c.name, func(t *testing.T) {
					fs := layer(t)
					must(t, writeFile(fs, "appendonly.aof", "", false))
					must(t, fs.checkpoint())
					want := ""
					for round := 0; round < 2; round++ {
						synced, err := aof(fs, round*50, round*50+50, c.every)
						must(t, err)
						want += synced
						must(t, fs.powerLoss())
						if got := tree(t, fs.path(""))["appendonly.aof"]; got != "file:"+want {
							t.Fatalf("round %d: the log holds %d bytes, want the %d synced", round, len(got)-5, len(want))
						}
					}
				})
			}
			t.Run("wal", func(t *testing.T) {
				fs := layer(t)
				must(t, fs.mkdir("pg_wal"))
				must(t, fs.checkpoint())
				const seg = 8 * pageSize
				// XLogFileInit: a zero-filled temporary file, fsynced, renamed, directory fsynced.
				must(t, writeFile(fs, "pg_wal/xlogtemp", strings.Repeat("\x00", seg), true))
				must(t, fs.rename("pg_wal/xlogtemp", "pg_wal/000000010000000000000001"))
				must(t, fs.syncDir("pg_wal"))
				f, err := fs.open("pg_wal/000000010000000000000001", os.O_RDWR)
				must(t, err)
				want := []byte(strings.Repeat("\x00", seg))
				off := int64(0)
				for i := 0; i < 40; i++ {
					r := []byte(fmt.Sprintf("commit %03d|", i))
					_, err := f.WriteAt(r, off)
					must(t, err)
					if i < 30 { // the last ten are written and never flushed
						copy(want[off:], r)
						must(t, fs.datasync(f))
					}
					off += int64(len(r))
				}
				must(t, f.Close())
				must(t, fs.powerLoss())
				if got := tree(t, fs.path(""))["pg_wal/000000010000000000000001"]; got != "file:"+string(want) {
					t.Errorf("the WAL segment after the power loss: %q…", strings.TrimRight(got, "\x00"))
				}
			})
		})
	}
}

// TestConcurrentWriters: several writers append and fsync in parallel; after
// a power loss each file holds exactly what it had synced.
func TestConcurrentWriters(t *testing.T) {
	for lname, layer := range layers(Options{}) {
		t.Run(lname, func(t *testing.T) {
			fs := layer(t)
			const writers = 4
			for w := 0; w < writers; w++ {
				must(t, writeFile(fs, fmt.Sprintf("w%d", w), "", false))
			}
			must(t, fs.checkpoint())
			synced := make([]string, writers)
			errs := make(chan error, writers)
			for w := 0; w < writers; w++ {
				go func() {
					f, err := fs.open(fmt.Sprintf("w%d", w), os.O_WRONLY|os.O_APPEND)
					if err != nil {
						errs <- err
						return
					}
					var all bytes.Buffer
					for i := 0; i < 200; i++ {
						r := fmt.Sprintf("%d:%d;", w, i)
						if _, err := f.Write([]byte(r)); err != nil {
							errs <- err
							return
						}
						all.WriteString(r)
						if i%3 == 0 {
							if err := f.Sync(); err != nil {
								errs <- err
								return
							}
							synced[w] = all.String()
						}
					}
					errs <- f.Close()
				}()
			}
			for w := 0; w < writers; w++ {
				must(t, <-errs)
			}
			must(t, fs.powerLoss())
			got := tree(t, fs.path(""))
			for w := 0; w < writers; w++ {
				if g := got[fmt.Sprintf("w%d", w)]; g != "file:"+synced[w] {
					t.Errorf("writer %d: %d bytes after the power loss, want the %d synced", w, len(g)-5, len(synced[w]))
				}
			}
		})
	}
}

// TestAttributesAndOwnersSurvive: a directory re-created by a power loss keeps
// its mode and owner (brokers check both on their data directory).
func TestAttributesAndOwnersSurvive(t *testing.T) {
	for lname, layer := range layers(Options{}) {
		t.Run(lname, func(t *testing.T) {
			fs := layer(t)
			must(t, fs.mkdir("data"))
			must(t, os.Chmod(fs.path("data"), 0o700))
			if os.Geteuid() == 0 {
				must(t, os.Chown(fs.path("data"), 123, 456))
			}
			must(t, fs.checkpoint())
			must(t, writeFile(fs, "data/lost", "x", true))
			must(t, fs.powerLoss())
			st, err := lstat(fs.path("data"))
			must(t, err)
			if st.Mode&0o7777 != 0o700 {
				t.Errorf("mode %o after the power loss, want 700", st.Mode&0o7777)
			}
			if os.Geteuid() == 0 && (st.Uid != 123 || st.Gid != 456) {
				t.Errorf("owner %d:%d after the power loss, want 123:456", st.Uid, st.Gid)
			}
		})
	}
}

// TestIgnoreFsync: the negative control's disk keeps nothing that was only
// fsynced, and everything a checkpoint (writeback) wrote.
func TestIgnoreFsync(t *testing.T) {
	for lname, layer := range layers(Options{IgnoreFsync: true}) {
		t.Run(lname, func(t *testing.T) {
			fs := layer(t)
			must(t, writeFile(fs, "kept", "before", false))
			must(t, fs.checkpoint())
			must(t, overwrite(fs, "kept", "AFTER!", 0, true))
			must(t, writeFile(fs, "new", "x", true))
			must(t, fs.syncDir(""))
			must(t, fs.powerLoss())
			if got, want := tree(t, fs.path("")), map[string]string{"kept": "file:before"}; !maps.Equal(got, want) {
				t.Errorf("after the power loss: %v, want %v", brief(got), brief(want))
			}
		})
	}
}

// TestLossReport: a power loss says what it dropped.
func TestLossReport(t *testing.T) {
	d, err := OpenDisk(t.TempDir(), Options{})
	must(t, err)
	fs := diskFS{d}
	must(t, writeFile(fs, "kept", "abc", false))
	must(t, writeFile(fs, "gone", "x", false))
	must(t, fs.checkpoint())
	must(t, overwrite(fs, "kept", "ABCD", 0, false))
	must(t, writeFile(fs, "new", "y", true))
	must(t, fs.remove("gone"))
	loss, err := d.PowerLoss()
	must(t, err)
	want := Loss{Data: []string{"kept +1 bytes, 1 pages rewritten"}, Created: []string{"new"}, Removed: []string{"gone"}}
	if !slices.Equal(loss.Data, want.Data) || !slices.Equal(loss.Created, want.Created) || !slices.Equal(loss.Removed, want.Removed) {
		t.Errorf("loss %+v, want %+v", loss, want)
	}
	if s := loss.String(); !strings.Contains(s, "1 entries never made durable (new)") {
		t.Errorf("loss.String() = %q", s)
	}
}

// TestQuiesce: it waits for the disk to go quiet, and no longer than its limit.
func TestQuiesce(t *testing.T) {
	d, err := OpenDisk(t.TempDir(), Options{})
	must(t, err)
	d.touch()
	began := time.Now()
	if !d.Quiesce(50*time.Millisecond, time.Second) || time.Since(began) < 50*time.Millisecond {
		t.Errorf("a quiet disk: Quiesce returned after %s", time.Since(began))
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				d.touch()
			}
		}
	}()
	began = time.Now()
	if d.Quiesce(100*time.Millisecond, 200*time.Millisecond) {
		t.Error("a busy disk went quiet")
	}
	if el := time.Since(began); el < 200*time.Millisecond || el > time.Second {
		t.Errorf("a busy disk: Quiesce returned after %s, want its 200ms limit", el)
	}
}
