package lazyfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pageSize is the unit of the undo log.
const pageSize = 4096

type kind uint8

const (
	kindFile kind = iota
	kindDir
	kindSymlink
	kindOther // socket, fifo, device
)

func kindOf(mode uint32) kind {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return kindFile
	case syscall.S_IFDIR:
		return kindDir
	case syscall.S_IFLNK:
		return kindSymlink
	}
	return kindOther
}

// node is one inode, known by an id that outlives renames and power losses.
type node struct {
	id   uint64
	kind kind

	mu    sync.Mutex
	dsize int64            // file: the durable size
	undo  map[int64][]byte // file: durable bytes of the pages changed since the last sync, by page

	// Guarded by Disk.mu.
	ino      uint64 // inode number in the view or the grave
	dlinks   int    // durable directory entries naming it
	grave    bool   // kept in grave/ (removed from the view, removal not durable)
	target   string // symlink
	mode     uint32 // directory, symlink, special file: re-created with it
	uid, gid uint32
	rdev     uint64
}

// Disk is the model without FUSE: the view directory and what a power cut
// would leave of it. Namespace changes go through its methods, which change the
// view and keep the durable entries; data changes go through Write, Truncate
// and Allocate. Safe for concurrent use.
type Disk struct {
	view, grave, stage string
	opts               Options

	mu      sync.Mutex
	byIno   map[uint64]*node
	byID    map[uint64]*node
	durable map[uint64]map[string]uint64 // directory id → name → node id
	root    *node
	nextID  uint64
	nsDirty bool // a namespace change since the last commit (Options.Journal)

	lastChange atomic.Int64  // unix nanoseconds of the last write, fsync or namespace change
	epoch      atomic.Uint64 // mounts detached by power losses (their nodes are stale)
}

func (d *Disk) touch() { d.lastChange.Store(time.Now().UnixNano()) }

// Quiesce waits until nothing was written, synced or renamed for quiet, or
// for at most limit, and reports whether the disk went quiet.
func (d *Disk) Quiesce(quiet, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		idle := time.Since(time.Unix(0, d.lastChange.Load()))
		if idle >= quiet {
			return true
		}
		if time.Now().Add(quiet - idle).After(deadline) {
			time.Sleep(time.Until(deadline))
			return false
		}
		time.Sleep(quiet - idle)
	}
}

// Options change the model.
type Options struct {
	// IgnoreFsync makes fsync, fdatasync and directory fsyncs persist nothing,
	// as a disk whose write cache acknowledges flushes it never makes does (or
	// fsync turned off, e.g. by libeatmydata): only Sync (writeback) persists.
	// A negative control: a broker on it loses what it acknowledged.
	IgnoreFsync bool
	// Journal: an fsync of any file or directory also makes every namespace
	// change before it durable, as ext4 (data=ordered) and xfs commit their
	// metadata journal. Without it (POSIX): an entry is durable once its
	// directory is fsynced, and not before.
	Journal bool
}

// OpenDisk opens (creating it if needed) the backing directory dir. Whatever
// its view holds already is durable.
func OpenDisk(dir string, opts Options) (*Disk, error) {
	d := &Disk{view: filepath.Join(dir, "view"), grave: filepath.Join(dir, "grave"), stage: filepath.Join(dir, "stage"), opts: opts,
		byIno: map[uint64]*node{}, byID: map[uint64]*node{}, durable: map[uint64]map[string]uint64{}}
	for _, p := range []string{d.grave, d.stage} {
		if err := os.RemoveAll(p); err != nil {
			return nil, err
		}
	}
	for _, p := range []string{d.view, d.grave, d.stage} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
	}
	return d, d.Sync()
}

// View is the directory that holds the live tree.
func (d *Disk) View() string { return d.view }

func (d *Disk) gravePath(n *node) string { return filepath.Join(d.grave, strconv.FormatUint(n.id, 10)) }
func (d *Disk) stagePath(id uint64) string {
	return filepath.Join(d.stage, strconv.FormatUint(id, 10))
}

// newNode registers the inode st (at path) as a node of which nothing is durable.
func (d *Disk) newNode(path string, st *syscall.Stat_t) *node {
	d.nextID++
	n := &node{id: d.nextID, kind: kindOf(st.Mode), ino: st.Ino, mode: st.Mode, uid: st.Uid, gid: st.Gid, rdev: st.Rdev}
	if n.kind == kindSymlink {
		n.target, _ = os.Readlink(path)
	}
	if old := d.byIno[st.Ino]; old != nil {
		old.ino = 0 // that inode was freed behind our back
	}
	d.byIno[st.Ino], d.byID[n.id] = n, n
	return n
}

// nodeFor returns the node of inode st, registering an unknown one.
func (d *Disk) nodeFor(path string, st *syscall.Stat_t) *node {
	if n := d.byIno[st.Ino]; n != nil && n.kind == kindOf(st.Mode) {
		return n
	}
	return d.newNode(path, st)
}

func lstat(path string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

// Sync is a checkpoint: everything written so far is durable, as if the kernel
// had written the whole cache back and committed its journal.
func (d *Disk) Sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.commit(true)
}

// commitNamespace makes every namespace change so far durable, as a journal
// commit does (Options.Journal).
func (d *Disk) commitNamespace() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.nsDirty {
		return nil
	}
	return d.commit(false)
}

// commit makes the whole tree of the view durable as it is, and with data the
// content of every file in it too. d.mu is held.
func (d *Disk) commit(data bool) error {
	st, err := lstat(d.view)
	if err != nil {
		return err
	}
	d.root = d.nodeFor(d.view, st)
	durable := map[uint64]map[string]uint64{}
	inView := map[uint64]*node{}
	var walk func(dn *node, path string) error
	walk = func(dn *node, path string) error {
		names, err := readNames(path)
		if err != nil {
			return err
		}
		ents := make(map[string]uint64, len(names))
		for _, name := range names {
			p := filepath.Join(path, name)
			st, err := lstat(p)
			if err != nil {
				return err
			}
			c := d.nodeFor(p, st)
			ents[name] = c.id
			if inView[c.id] != nil {
				continue
			}
			inView[c.id] = c
			switch c.kind {
			case kindDir:
				if err := walk(c, p); err != nil {
					return err
				}
			case kindFile:
				if !data {
					continue
				}
				c.mu.Lock()
				if st, err = lstat(p); err == nil { // under the lock: no write in between
					c.dsize, c.undo = st.Size, nil
				}
				c.mu.Unlock()
				if err != nil {
					return err
				}
			}
		}
		durable[dn.id] = ents
		return nil
	}
	inView[d.root.id] = d.root
	if err := walk(d.root, d.view); err != nil {
		return fmt.Errorf("lazyfs: sync: %w", err)
	}
	// Nothing outside the view can come back now.
	d.durable = durable
	d.byIno, d.byID = map[uint64]*node{}, map[uint64]*node{}
	for _, n := range inView {
		n.grave, n.dlinks = false, 0
		d.byIno[n.ino], d.byID[n.id] = n, n
	}
	d.recount()
	d.nsDirty = false
	if err := os.RemoveAll(d.grave); err != nil {
		return err
	}
	return os.Mkdir(d.grave, 0o755)
}

func (d *Disk) recount() {
	for _, n := range d.byID {
		n.dlinks = 0
	}
	for _, ents := range d.durable {
		for _, id := range ents {
			if c := d.byID[id]; c != nil {
				c.dlinks++
			}
		}
	}
}

// nodeOfFd returns the node of an open file of the view (registering an
// unknown inode).
func (d *Disk) nodeOfFd(fd int) (*node, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.nodeFor(fmt.Sprintf("/proc/self/fd/%d", fd), &st), nil
}

// Create runs do, which creates path in the view (a file, directory, symlink,
// special file or a new link), and registers what it made: a new inode is a
// node of which nothing is durable yet.
func (d *Disk) Create(path string, do func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := do(); err != nil {
		return err
	}
	d.nsDirty = true
	d.touch()
	st, err := lstat(path)
	if err != nil {
		return err
	}
	d.nodeFor(path, st)
	return nil
}

// forget drops a node that left the view for good and is not kept in the
// grave; a directory's durable entries go with it.
func (d *Disk) forget(n *node) {
	if d.byIno[n.ino] == n {
		delete(d.byIno, n.ino)
	}
	n.ino = 0
	delete(d.byID, n.id)
	if n.kind == kindDir {
		ents := d.durable[n.id]
		delete(d.durable, n.id)
		for _, id := range ents {
			if c := d.byID[id]; c != nil {
				c.dlinks--
				d.release(c)
			}
		}
	}
}

// release lets the grave drop n once no durable entry names it any more.
func (d *Disk) release(n *node) {
	if n.dlinks > 0 || !n.grave {
		return
	}
	p := d.gravePath(n)
	if n.kind == kindDir {
		_ = os.Remove(p)
	} else {
		_ = syscall.Unlink(p)
	}
	n.grave = false
	d.forget(n)
}

// Unlink removes a name of a file. The last name of a file that a durable
// entry still names is moved to the grave, not deleted.
func (d *Disk) Unlink(path string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, err := lstat(path)
	if err != nil {
		return err
	}
	if kindOf(st.Mode) == kindDir {
		return syscall.EISDIR
	}
	n := d.nodeFor(path, st)
	d.nsDirty = true
	d.touch()
	if st.Nlink == 1 && n.dlinks > 0 {
		if err := syscall.Rename(path, d.gravePath(n)); err != nil {
			return err
		}
		n.grave = true
		return nil
	}
	if err := syscall.Unlink(path); err != nil {
		return err
	}
	if st.Nlink == 1 {
		d.forget(n)
	}
	return nil
}

// Rmdir removes an empty directory; one that a durable entry still names is
// moved to the grave, with its durable entries.
func (d *Disk) Rmdir(path string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, err := lstat(path)
	if err != nil {
		return err
	}
	if kindOf(st.Mode) != kindDir {
		return syscall.ENOTDIR
	}
	n := d.nodeFor(path, st)
	d.nsDirty = true
	d.touch()
	if n.dlinks > 0 {
		names, err := readNames(path)
		if err != nil {
			return err
		}
		if len(names) > 0 {
			return syscall.ENOTEMPTY
		}
		if err := syscall.Rename(path, d.gravePath(n)); err != nil {
			return err
		}
		n.grave = true
		return nil
	}
	if err := syscall.Rmdir(path); err != nil {
		return err
	}
	d.forget(n)
	return nil
}

// Rename renames oldpath to newpath (renameat2 flags). A replaced target that a
// durable entry still names is kept in the grave.
func (d *Disk) Rename(oldpath, newpath string, flags uint) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	ost, err := lstat(oldpath)
	if err != nil {
		return err
	}
	on := d.nodeFor(oldpath, ost)
	d.nsDirty = true
	d.touch()
	var target *node
	var tst *syscall.Stat_t
	if flags&(unix.RENAME_EXCHANGE|unix.RENAME_NOREPLACE) == 0 {
		if tst, err = lstat(newpath); err == nil {
			target = d.nodeFor(newpath, tst)
		}
	}
	if target == on {
		target = nil // two names of one inode: rename does nothing
	}
	graved := false
	if target != nil && tst.Nlink == 1 && target.dlinks > 0 {
		gp := d.gravePath(target)
		if target.kind == kindDir {
			if on.kind != kindDir {
				return syscall.EISDIR
			}
			if names, err := readNames(newpath); err != nil || len(names) > 0 {
				return syscall.ENOTEMPTY
			}
			err = syscall.Rename(newpath, gp)
		} else {
			err = syscall.Link(newpath, gp)
		}
		if err != nil {
			return err
		}
		graved = true
	}
	if err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, flags); err != nil {
		if graved {
			if target.kind == kindDir {
				_ = syscall.Rename(d.gravePath(target), newpath)
			} else {
				_ = syscall.Unlink(d.gravePath(target))
			}
		}
		return err
	}
	switch {
	case graved:
		target.grave = true
	case target != nil && (tst.Nlink == 1 || target.kind == kindDir):
		d.forget(target)
	}
	return nil
}

// FsyncDir makes the entries of the directory at path durable as they are now.
func (d *Disk) FsyncDir(path string) error {
	d.touch()
	if d.opts.IgnoreFsync {
		return nil
	}
	if d.opts.Journal {
		return d.commitNamespace()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	st, err := lstat(path)
	if err != nil {
		return err
	}
	dn := d.nodeFor(path, st)
	names, err := readNames(path)
	if err != nil {
		return err
	}
	ents := make(map[string]uint64, len(names))
	for _, name := range names {
		p := filepath.Join(path, name)
		st, err := lstat(p)
		if err != nil {
			return err
		}
		ents[name] = d.nodeFor(p, st).id
	}
	old := d.durable[dn.id]
	for _, id := range ents {
		d.byID[id].dlinks++
	}
	d.durable[dn.id] = ents
	for _, id := range old {
		if c := d.byID[id]; c != nil {
			c.dlinks--
			d.release(c)
		}
	}
	return nil
}

// save keeps the durable bytes of the pages of [from, to) that are about to
// change for the first time since the last sync. n.mu is held; fd is readable.
func (n *node) save(fd int, from, to int64) error {
	end := min(to, n.dsize)
	if n.kind != kindFile || from >= end {
		return nil
	}
	for p := from / pageSize; p*pageSize < end; p++ {
		if _, ok := n.undo[p]; ok {
			continue
		}
		buf := make([]byte, min(pageSize, n.dsize-p*pageSize))
		for got := 0; got < len(buf); {
			k, err := syscall.Pread(fd, buf[got:], p*pageSize+int64(got))
			if err != nil {
				return err
			}
			if k == 0 {
				break // shorter than its durable size: only if changed outside the mount
			}
			got += k
		}
		if n.undo == nil {
			n.undo = map[int64][]byte{}
		}
		n.undo[p] = buf
	}
	return nil
}

// write writes p at off in the file open as fd (readable), saving what it
// overwrites of the durable content first.
func (d *Disk) write(n *node, fd int, p []byte, off int64) (int, error) {
	d.touch()
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.save(fd, off, off+int64(len(p))); err != nil {
		return 0, err
	}
	return syscall.Pwrite(fd, p, off)
}

// change runs do, which changes the bytes of [from, to) of the file open as fd
// (a truncation, a hole punched), after saving their durable content.
func (d *Disk) change(n *node, fd int, from, to int64, do func() error) error {
	d.touch()
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.save(fd, from, to); err != nil {
		return err
	}
	return do()
}

// fsync makes the data and size of the file open as fd durable.
func (d *Disk) fsync(n *node, fd int) error {
	d.touch()
	if d.opts.IgnoreFsync {
		return nil
	}
	if d.opts.Journal {
		if err := d.commitNamespace(); err != nil { // before n.mu: commit takes d.mu
			return err
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	n.dsize, n.undo = st.Size, nil
	return nil
}

// PowerLoss puts the view back to its durable state: every file to its durable
// size and content, every directory to its durable entries. Nothing may use
// the view meanwhile (unmount first).
func (d *Disk) PowerLoss() (Loss, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	loss, err := d.loss()
	if err != nil {
		return loss, fmt.Errorf("lazyfs: power loss: %w", err)
	}
	if err := d.stageAll(); err != nil {
		return loss, fmt.Errorf("lazyfs: power loss: %w", err)
	}
	staged, err := readNames(d.stage)
	if err != nil {
		return loss, err
	}
	for _, name := range staged {
		id, _ := strconv.ParseUint(name, 10, 64)
		n := d.byID[id]
		p := d.stagePath(id)
		if n == nil || n.dlinks == 0 {
			_ = os.Remove(p)
			continue
		}
		if err := n.restore(p); err != nil {
			return loss, fmt.Errorf("lazyfs: power loss: %w", err)
		}
	}
	d.byIno = map[uint64]*node{d.root.ino: d.root}
	placed := map[uint64]string{d.root.id: d.view}
	var problems []error
	if err := d.rebuild(d.root, d.view, placed, &problems); err != nil {
		return loss, fmt.Errorf("lazyfs: power loss: %w", err)
	}
	for id, n := range d.byID {
		if placed[id] == "" {
			delete(d.byID, id)
			delete(d.durable, id)
			n.ino = 0
		}
		n.grave = false
	}
	d.recount()
	d.nsDirty = false
	for _, p := range []string{d.stage, d.grave} {
		if err := os.RemoveAll(p); err != nil {
			return loss, err
		}
		if err := os.Mkdir(p, 0o755); err != nil {
			return loss, err
		}
	}
	return loss, errors.Join(problems...)
}

// Loss is what a power loss dropped, by path in the view before it.
type Loss struct {
	Data    []string // files whose content or size went back to their last fsync
	Created []string // entries no directory fsync made durable: gone (a directory with all it held)
	Removed []string // removals and renames away no directory fsync made durable: back
	// Survivors are processes that still held the mount (a daemon's working
	// directory): they keep the old mount, which refuses every change.
	Survivors []string
}

func (l Loss) String() string {
	list := func(what string, paths []string) string {
		s := fmt.Sprintf("%d %s", len(paths), what)
		if len(paths) > 0 {
			s += " (" + strings.Join(paths[:min(len(paths), 4)], ", ")
			if len(paths) > 4 {
				s += ", …"
			}
			s += ")"
		}
		return s
	}
	s := list("files' unsynced data", l.Data) + "; " + list("entries never made durable", l.Created) + "; " + list("removals undone", l.Removed)
	if len(l.Survivors) > 0 {
		s += "; survived on the old mount: " + strings.Join(l.Survivors, ", ")
	}
	return s
}

// loss compares the view with the durable state. d.mu is held.
func (d *Disk) loss() (Loss, error) {
	var l Loss
	var walk func(dn *node, path, rel string) error
	walk = func(dn *node, path, rel string) error {
		names, err := readNames(path)
		if err != nil {
			return err
		}
		durable := d.durable[dn.id]
		seen := map[string]bool{}
		for _, name := range names {
			p, r := filepath.Join(path, name), filepath.Join(rel, name)
			st, err := lstat(p)
			if err != nil {
				return err
			}
			c := d.byIno[st.Ino]
			if c == nil || durable[name] != c.id {
				l.Created = append(l.Created, r)
				continue
			}
			seen[name] = true
			switch c.kind {
			case kindDir:
				if err := walk(c, p, r); err != nil {
					return err
				}
			case kindFile:
				c.mu.Lock()
				if st.Size != c.dsize || len(c.undo) > 0 {
					l.Data = append(l.Data, fmt.Sprintf("%s %+d bytes, %d pages rewritten", r, st.Size-c.dsize, len(c.undo)))
				}
				c.mu.Unlock()
			}
		}
		for name := range durable {
			if !seen[name] {
				l.Removed = append(l.Removed, filepath.Join(rel, name))
			}
		}
		return nil
	}
	err := walk(d.root, d.view, "")
	sort.Strings(l.Removed)
	return l, err
}

// stageAll moves every file of the view and the grave to stage/<id>, keeps the
// attributes of directories and special files, and empties the view.
func (d *Disk) stageAll() error {
	var walk func(path string) error
	walk = func(path string) error {
		names, err := readNames(path)
		if err != nil {
			return err
		}
		for _, name := range names {
			p := filepath.Join(path, name)
			st, err := lstat(p)
			if err != nil {
				return err
			}
			n := d.byIno[st.Ino]
			if n == nil || n.kind != kindOf(st.Mode) {
				continue // not ours: removed with the view
			}
			n.mode, n.uid, n.gid = st.Mode, st.Uid, st.Gid
			switch n.kind {
			case kindDir:
				if err := walk(p); err != nil {
					return err
				}
			case kindFile:
				if err := d.stageFile(n, p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(d.view); err != nil {
		return err
	}
	graved, err := readNames(d.grave)
	if err != nil {
		return err
	}
	for _, name := range graved {
		id, _ := strconv.ParseUint(name, 10, 64)
		p := filepath.Join(d.grave, name)
		n := d.byID[id]
		st, err := lstat(p)
		if n == nil || err != nil {
			continue
		}
		n.mode, n.uid, n.gid = st.Mode, st.Uid, st.Gid
		if n.kind == kindFile {
			if err := d.stageFile(n, p); err != nil {
				return err
			}
		}
	}
	names, err := readNames(d.view)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := os.RemoveAll(filepath.Join(d.view, name)); err != nil {
			return err
		}
	}
	return nil
}

func (d *Disk) stageFile(n *node, p string) error {
	sp := d.stagePath(n.id)
	if _, err := lstat(sp); err == nil {
		return syscall.Unlink(p) // another name of a staged inode
	}
	return syscall.Rename(p, sp)
}

// restore puts the file at p back to n's durable content and size.
func (n *node) restore(p string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	for page, b := range n.undo {
		if _, err := f.WriteAt(b, page*pageSize); err != nil {
			return err
		}
	}
	n.undo = nil
	return f.Truncate(n.dsize)
}

// rebuild re-creates the durable entries of dn under path, recursively.
func (d *Disk) rebuild(dn *node, path string, placed map[uint64]string, problems *[]error) error {
	ents := d.durable[dn.id]
	names := make([]string, 0, len(ents))
	for name := range ents {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := d.byID[ents[name]]
		if c == nil {
			continue
		}
		p := filepath.Join(path, name)
		var err error
		switch c.kind {
		case kindDir:
			if placed[c.id] != "" {
				*problems = append(*problems, fmt.Errorf("directory %s is durable under two names; kept at %s only", p, placed[c.id]))
				continue
			}
			if err = os.Mkdir(p, 0o700); err == nil {
				err = errors.Join(os.Lchown(p, int(c.uid), int(c.gid)), os.Chmod(p, os.FileMode(c.mode&0o777)|modeBits(c.mode)))
			}
		case kindFile:
			if q := placed[c.id]; q != "" {
				err = os.Link(q, p)
				break
			}
			if err = syscall.Rename(d.stagePath(c.id), p); errors.Is(err, syscall.ENOENT) {
				*problems = append(*problems, fmt.Errorf("file %s had lost its inode; re-created empty", p))
				err = os.WriteFile(p, nil, os.FileMode(c.mode&0o777))
			}
		case kindSymlink:
			if err = os.Symlink(c.target, p); err == nil {
				err = os.Lchown(p, int(c.uid), int(c.gid))
			}
		default:
			if err = syscall.Mknod(p, c.mode, int(c.rdev)); err == nil {
				err = os.Lchown(p, int(c.uid), int(c.gid))
			}
		}
		if err != nil {
			return err
		}
		st, err := lstat(p)
		if err != nil {
			return err
		}
		if placed[c.id] == "" {
			placed[c.id] = p
			c.ino = st.Ino
			d.byIno[st.Ino] = c
		}
		if c.kind == kindDir {
			if err := d.rebuild(c, p, placed, problems); err != nil {
				return err
			}
		}
	}
	return nil
}

func modeBits(m uint32) os.FileMode {
	var fm os.FileMode
	if m&syscall.S_ISUID != 0 {
		fm |= os.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		fm |= os.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		fm |= os.ModeSticky
	}
	return fm
}
