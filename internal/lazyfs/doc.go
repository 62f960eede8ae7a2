// Package lazyfs is a file system that loses what was never synced: a FUSE
// layer over a real directory that durachk mounts under a private broker's data
// directory, so that a simulated power cut of the broker's machine drops every
// write and every directory change the broker did not make durable. The idea is
// Jepsen's lazyfs; this is a separate, smaller implementation.
//
// # The model
//
// The live state (what the broker reads and writes, synced or not) is a real
// directory, the view. What a power cut would leave is the durable state; it
// differs from the view only by what was never synced, and the package keeps
// just enough to undo that:
//
//   - File data and size become durable at fsync(2) or fdatasync(2) of the file
//     (any descriptor of its inode), or at a write through a descriptor opened
//     with O_SYNC or O_DSYNC (the kernel sends the fsync). Before that, the
//     first change of each 4 KiB page of the durable content is saved in memory
//     (an undo log), and the durable size is remembered. Appending past the
//     durable size saves nothing.
//   - Directory entries (create, mkdir, mknod, symlink, link, unlink, rmdir,
//     rename) become durable at fsync of the directory that holds them, and
//     only then: a new file that was fsynced but whose directory was not is gone
//     after a power loss; a file whose directory entry is durable but whose data
//     never was comes back empty (or with its last durable content). A rename
//     is two directory changes: the new name is durable once the target
//     directory is fsynced, the removal of the old one once the source directory
//     is; within one directory one fsync makes both durable. This is the
//     strictest reading of POSIX; ext4 and xfs in practice persist more (an
//     fsync of a new file also commits its name, a rename is atomic across
//     directories). Options.Journal models them: any fsync (of a file or a
//     directory) makes every namespace change before it durable, in one
//     step, as a journal commit does.
//   - Nothing is written back on its own: real kernels write dirty pages back
//     after about 30 s (vm.dirty_expire_centisecs) and ext4 commits its journal
//     every 5 s, so a power cut here is one that comes within that window.
//     Sync (a checkpoint: everything so far is durable) stands for that
//     writeback where a run needs it, e.g. after a broker has started.
//   - Not modelled: attributes (mode, owner, times, xattrs) survive as written;
//     sync(2) and syncfs(2) persist nothing (FUSE does not pass them on);
//     writes reach the durable state whole or not at all (no torn sectors),
//     and unsynced writes are lost together, never a subset of them or a
//     reordering within a file; no disk write cache lies about a flush.
//
// PowerLoss applies the model: it puts every file back to its durable size and
// content and the tree back to its durable entries. Unmounted, the view is the
// durable state.
//
// # Layout
//
// The backing directory holds view/ (the live tree, served at the mount
// point), grave/ (the inodes of files and directories removed from the view
// whose removal is not durable yet, by node id) and stage/ (used during a
// power loss). The view must not be changed except through the mount.
//
// # Processes
//
// Mount serves the file system from the calling process; durachk runs it in a
// process of its own instead (StartRemote, `durachk lazyfs`), because a Go
// process that serves a FUSE mount can hang when it forks a child that
// touches the mount before exec (remote.go).
package lazyfs
