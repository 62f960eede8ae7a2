package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FSName is the source of every lazyfs mount in the mount table (what
// CleanupMounts looks for).
const FSName = "durachk-lazyfs"

// ErrUnavailable is wrapped by every error that says FUSE cannot be used here.
var ErrUnavailable = errors.New("FUSE is not available")

// FS is a mounted lazy file system. Safe for concurrent use.
type FS struct {
	mountpoint string
	disk       *Disk

	mu     sync.Mutex
	server *fuse.Server
}

// Mount serves the backing directory dir (see the package doc) at mountpoint,
// which must be an empty directory. What dir's view holds already is durable.
func Mount(mountpoint, dir string, opts Options) (*FS, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	return mount(mountpoint, dir, opts)
}

func mount(mountpoint, dir string, opts Options) (*FS, error) {
	d, err := OpenDisk(dir, opts)
	if err != nil {
		return nil, err
	}
	f := &FS{mountpoint: mountpoint, disk: d}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

// Mountpoint is where the file system is mounted.
func (f *FS) Mountpoint() string { return f.mountpoint }

// Disk is the model under the mount.
func (f *FS) Disk() *Disk { return f.disk }

func (f *FS) mount() error {
	var st syscall.Stat_t
	if err := syscall.Stat(f.disk.view, &st); err != nil {
		return err
	}
	root := &fs.LoopbackRoot{Path: f.disk.view, Dev: uint64(st.Dev)}
	epoch := f.disk.epoch.Load()
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &lnode{LoopbackNode: fs.LoopbackNode{RootData: r}, d: f.disk, epoch: epoch}
	}
	rootNode := root.NewNode(root, nil, "", &st)
	root.RootNode = rootNode
	// Only the kernel's own requests change the view while mounted, so its
	// caches stay right; a power loss remounts, which drops them.
	sec := time.Second
	// go-fuse opens /dev/fuse without O_CLOEXEC when it mounts by itself: a
	// child started later (the broker) would hold the connection open, and
	// one that waits on the mount when durachk dies would wait forever. No fork
	// until the descriptor is marked.
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	server, err := fs.Mount(f.mountpoint, rootNode, &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName: FSName, Name: "lazyfs",
			// Brokers run as their own users (postgres, rabbitmq).
			AllowOther: true, Options: []string{"default_permissions"},
			DirectMountStrict: true,
			// Passthrough would send reads and writes around us.
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
			MaxWrite:             fuse.MAX_KERNEL_WRITE,
		},
		EntryTimeout: &sec, AttrTimeout: &sec, NegativeTimeout: &sec,
	})
	if err != nil {
		return fmt.Errorf("lazyfs: mount %s: %w", f.mountpoint, err)
	}
	closeOnExecFuse()
	f.server = server
	return nil
}

// closeOnExecFuse marks every /dev/fuse descriptor of this process close-on-exec.
func closeOnExecFuse() {
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fds {
		if t, _ := os.Readlink("/proc/self/fd/" + e.Name()); t == "/dev/fuse" {
			if fd, err := strconv.Atoi(e.Name()); err == nil {
				syscall.CloseOnExec(fd)
			}
		}
	}
}

// Sync makes everything written so far durable (see Disk.Sync).
func (f *FS) Sync() error { return f.disk.Sync() }

// PowerLoss unmounts, drops everything that was never synced, and mounts
// again on what survived. Every process using the mount must be gone: a power
// cut takes the machine's processes with it.
func (f *FS) PowerLoss() (Loss, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	users, err := f.unmountLocked(0) // the broker is dead: its files are closed
	if err != nil {
		return Loss{}, err
	}
	loss, lossErr := f.disk.PowerLoss()
	loss.Survivors = users
	if err := f.mount(); err != nil {
		return loss, errors.Join(lossErr, err)
	}
	return loss, lossErr
}

// Unmount unmounts the file system; the backing directory stays. Idempotent.
// A mount that processes still use after two seconds is detached (it is gone
// once they let go), and they are named on stderr.
func (f *FS) Unmount() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	users, err := f.unmountLocked(2 * time.Second)
	if err == nil && len(users) > 0 {
		fmt.Fprintf(os.Stderr, "lazyfs: %s was still in use, detached: %s\n", f.mountpoint, strings.Join(users, ", "))
	}
	return err
}

// unmountLocked unmounts, trying for patience while the files of killed
// processes close. A mount still busy then is detached: whoever holds it (a
// daemon's working directory) keeps the old server, which refuses every
// change, until it lets go; users names them.
func (f *FS) unmountLocked(patience time.Duration) (users []string, err error) {
	if f.server == nil {
		return nil, nil
	}
	deadline := time.Now().Add(patience)
	for {
		if err = f.server.Unmount(); err == nil {
			f.server.Wait()
			f.server = nil
			return nil, nil
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	users = usersOf(f.mountpoint)
	if derr := syscall.Unmount(f.mountpoint, syscall.MNT_DETACH); derr != nil {
		return users, fmt.Errorf("lazyfs: unmount %s: %v (detach: %v)", f.mountpoint, err, derr)
	}
	old := f.server
	f.server = nil
	f.disk.epoch.Add(1) // the old server's nodes go stale
	go old.Wait()       // its loops end with its last user
	return users, nil
}

// usersOf names the processes whose working directory, root or open files
// are at or below dir.
func usersOf(dir string) []string {
	under := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	procs, _ := os.ReadDir("/proc")
	var out []string
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		base := "/proc/" + p.Name()
		how := ""
		if cwd, _ := os.Readlink(base + "/cwd"); under(cwd) {
			how = "working directory"
		} else if fds, _ := os.ReadDir(base + "/fd"); len(fds) > 0 {
			for _, fd := range fds {
				if t, _ := os.Readlink(base + "/fd/" + fd.Name()); under(t) {
					how = "open file " + t
					break
				}
			}
		}
		if how != "" {
			comm, _ := os.ReadFile(base + "/comm")
			out = append(out, fmt.Sprintf("%s (pid %d, %s)", strings.TrimSpace(string(comm)), pid, how))
		}
	}
	return out
}

var (
	availOnce sync.Once
	availErr  error
)

// Available says why this process cannot mount a lazy file system, or nil. It
// mounts one once to find out (a container may refuse mount(2) even to root).
func Available() error {
	availOnce.Do(func() { availErr = probe() })
	return availErr
}

func probe() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("%w: lazyfs needs Linux", ErrUnavailable)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("%w: no /dev/fuse (load the fuse module, or pass the device into the container)", ErrUnavailable)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: mounting without fusermount needs root", ErrUnavailable)
	}
	dir, err := os.MkdirTemp("", "durachk-lazyfs-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	f, err := mount(mnt, filepath.Join(dir, "back"), Options{})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return f.Unmount()
}

// lnode is a loopback node whose namespace changes and writes go through the
// Disk.
type lnode struct {
	fs.LoopbackNode
	d     *Disk
	epoch uint64 // of its mount; a power loss since makes it stale
}

// stale reports whether n belongs to a mount that a power loss detached: it
// serves a survivor's working directory and changes nothing.
func (n *lnode) stale() bool { return n.epoch != n.d.epoch.Load() }

func (n *lnode) path() string             { return filepath.Join(n.RootData.Path, n.Path(n.Root())) }
func (n *lnode) child(name string) string { return filepath.Join(n.path(), name) }

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return fs.ToErrno(err)
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// openFlags: the kernel computes append offsets itself; a truncation at open
// goes through Disk; a write-only descriptor is opened read-write so that
// what a write overwrites can be read and saved first.
func openFlags(flags uint32) (uint32, bool) {
	trunc := flags&syscall.O_TRUNC != 0
	flags &^= syscall.O_APPEND | syscall.O_TRUNC
	if flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		flags = flags&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return flags, trunc
}

var _ = (fs.NodeCreater)((*lnode)(nil))

func (n *lnode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if n.stale() {
		return nil, nil, 0, syscall.EIO
	}
	flags, trunc := openFlags(flags)
	var (
		ch   *fs.Inode
		fh   fs.FileHandle
		ff   uint32
		code syscall.Errno
	)
	err := n.d.Create(n.child(name), func() error {
		ch, fh, ff, code = n.LoopbackNode.Create(ctx, name, flags, mode, out)
		return errnoErr(code)
	})
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	h, code := n.d.handle(fh, trunc)
	if code != 0 {
		return nil, nil, 0, code
	}
	return ch, h, ff, 0
}

var _ = (fs.NodeOpener)((*lnode)(nil))

func (n *lnode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.stale() {
		return nil, 0, syscall.EIO
	}
	if n.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFREG {
		return n.LoopbackNode.Open(ctx, flags)
	}
	flags, trunc := openFlags(flags)
	fh, ff, code := n.LoopbackNode.Open(ctx, flags)
	if code != 0 {
		return nil, 0, code
	}
	h, code := n.d.handle(fh, trunc)
	return h, ff, code
}

// handle wraps a loopback file of the view.
func (d *Disk) handle(fh fs.FileHandle, trunc bool) (*handle, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return nil, syscall.EIO
	}
	fd, ok := lf.PassthroughFd() // the descriptor; it lives until Release
	if !ok {
		lf.Release(context.Background())
		return nil, syscall.EBADF
	}
	n, err := d.nodeOfFd(fd)
	if err != nil {
		lf.Release(context.Background())
		return nil, errno(err)
	}
	h := &handle{lf: lf, fd: fd, n: n, d: d}
	if trunc {
		if err := d.change(n, fd, 0, math.MaxInt64, func() error { return syscall.Ftruncate(fd, 0) }); err != nil {
			lf.Release(context.Background())
			return nil, errno(err)
		}
	}
	return h, 0
}

var _ = (fs.NodeSetattrer)((*lnode)(nil))

func (n *lnode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.stale() {
		return syscall.EIO
	}
	size, ok := in.GetSize()
	if !ok || n.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFREG {
		return n.LoopbackNode.Setattr(ctx, f, in, out)
	}
	fd, node := -1, (*node)(nil)
	if h, ok := f.(*handle); ok {
		fd, node = h.fd, h.n
	} else {
		file, err := os.OpenFile(n.path(), os.O_RDWR, 0)
		if err != nil {
			return errno(err)
		}
		defer file.Close()
		fd = int(file.Fd())
		if node, err = n.d.nodeOfFd(fd); err != nil {
			return errno(err)
		}
	}
	var code syscall.Errno
	err := n.d.change(node, fd, int64(size), math.MaxInt64, func() error {
		code = n.LoopbackNode.Setattr(ctx, f, in, out)
		return errnoErr(code)
	})
	return errno(err)
}

// create makes the entry name through mk, under the disk's Create (as the
// file Create above does).
func (n *lnode) create(name string, mk func() (*fs.Inode, syscall.Errno)) (*fs.Inode, syscall.Errno) {
	if n.stale() {
		return nil, syscall.EIO
	}
	var ch *fs.Inode
	err := n.d.Create(n.child(name), func() error {
		var code syscall.Errno
		ch, code = mk()
		return errnoErr(code)
	})
	return ch, errno(err)
}

func (n *lnode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.create(name, func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Mkdir(ctx, name, mode, out) })
}

func (n *lnode) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.create(name, func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out) })
}

func (n *lnode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.create(name, func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Symlink(ctx, target, name, out) })
}

func (n *lnode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.create(name, func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Link(ctx, target, name, out) })
}

func (n *lnode) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.stale() {
		return syscall.EIO
	}
	return errno(n.d.Unlink(n.child(name)))
}

func (n *lnode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if n.stale() {
		return syscall.EIO
	}
	return errno(n.d.Rmdir(n.child(name)))
}

func (n *lnode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if n.stale() {
		return syscall.EIO
	}
	np, ok := newParent.(*lnode)
	if !ok {
		return syscall.EXDEV
	}
	return errno(n.d.Rename(n.child(name), np.child(newName), uint(flags)))
}

// Tmpfile: an O_TMPFILE inode has no name to keep; callers fall back to a
// named temporary file.
func (n *lnode) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// CopyFileRange: ENOSYS makes the kernel copy with reads and writes, which
// come through Write.
func (n *lnode) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

func (n *lnode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, ff, code := n.LoopbackNode.OpendirHandle(ctx, flags)
	if code != 0 {
		return nil, 0, code
	}
	return &dirHandle{inner: fh, n: n}, ff, 0
}

// dirHandle is a loopback directory stream whose fsync makes the directory's
// entries durable.
type dirHandle struct {
	inner fs.FileHandle
	n     *lnode
}

func (h *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	r, ok := h.inner.(fs.FileReaddirenter)
	if !ok {
		return nil, syscall.ENOTSUP
	}
	return r.Readdirent(ctx)
}

func (h *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if s, ok := h.inner.(fs.FileSeekdirer); ok {
		return s.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (h *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	if r, ok := h.inner.(fs.FileReleasedirer); ok {
		r.Releasedir(ctx, flags)
	}
}

func (h *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	if h.n.stale() {
		return syscall.EIO
	}
	err := h.n.d.FsyncDir(h.n.path())
	if errors.Is(err, syscall.ENOENT) {
		return 0 // removed meanwhile: nothing reachable to persist
	}
	return errno(err)
}

// handle is an open file of the view: writes save what they overwrite of the
// durable content, fsync makes the content durable. It does not offer the
// loopback's passthrough descriptor, so every read and write comes here.
type handle struct {
	lf *fs.LoopbackFile
	fd int
	n  *node
	d  *Disk
}

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.lf.Read(ctx, buf, off)
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	k, err := h.d.write(h.n, h.fd, data, off)
	return uint32(max(k, 0)), errno(err)
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return errno(h.d.fsync(h.n, h.fd))
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	const keepSize = 0x01 // FALLOC_FL_KEEP_SIZE: allocation alone changes no byte
	from := int64(off)
	if mode&^keepSize == 0 {
		from = math.MaxInt64
	}
	var code syscall.Errno
	err := h.d.change(h.n, h.fd, from, math.MaxInt64, func() error {
		code = h.lf.Allocate(ctx, off, size, mode)
		return errnoErr(code)
	})
	return errno(err)
}

func (h *handle) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }
func (h *handle) Flush(ctx context.Context) syscall.Errno   { return h.lf.Flush(ctx) }
func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}
func (h *handle) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Setattr(ctx, in, out)
}
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}
func (h *handle) Statx(ctx context.Context, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return h.lf.Statx(ctx, flags, mask, out)
}
