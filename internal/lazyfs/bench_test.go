package lazyfs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkWriteFsync compares a write+fdatasync loop through the mount with
// the same loop on the backing directory's file system, as a broker's log
// does it: appends (Redis AOF), and overwrites of a pre-allocated segment
// (Postgres WAL, which makes every write save the page it overwrites). It
// reports both latencies and their ratio (lazyfs/backing: above 1, the mount is
// slower). The backing loop's fdatasync is a real one; the mount's only marks
// the data durable in memory. The loop without fdatasync shows what FUSE costs
// a write on its own.
//
//	go test ./internal/lazyfs -run '^$' -bench WriteFsync -benchtime 2000x
func BenchmarkWriteFsync(b *testing.B) {
	if err := Available(); err != nil {
		b.Skipf("skipped: %v", err)
	}
	for _, c := range []struct {
		name      string
		size      int
		overwrite bool
		nosync    bool
	}{{"append 128B", 128, false, false}, {"append 4KiB", 4096, false, false}, {"overwrite 8KiB", 8192, true, false},
		{"append 4KiB without fdatasync", 4096, false, true}} {
		b.Run(c.name, func(b *testing.B) {
			dir := b.TempDir()
			mnt := filepath.Join(dir, "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				b.Fatal(err)
			}
			fs, err := Mount(mnt, filepath.Join(dir, "back"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer fs.Unmount()
			plain := filepath.Join(dir, "plain")
			if err := os.Mkdir(plain, 0o755); err != nil {
				b.Fatal(err)
			}
			open := func(d string) *os.File {
				p := filepath.Join(d, "log")
				if c.overwrite {
					// a segment made durable before the loop, as Postgres does
					if err := os.WriteFile(p, make([]byte, c.size*b.N), 0o644); err != nil {
						b.Fatal(err)
					}
					if d == mnt {
						if err := fs.Sync(); err != nil {
							b.Fatal(err)
						}
					}
					f, err := os.OpenFile(p, os.O_RDWR, 0)
					if err != nil {
						b.Fatal(err)
					}
					return f
				}
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
				if err != nil {
					b.Fatal(err)
				}
				return f
			}
			fl, fp := open(mnt), open(plain)
			defer fl.Close()
			defer fp.Close()
			rec := make([]byte, c.size)
			loop := func(f *os.File, i int) time.Duration {
				t0 := time.Now()
				var err error
				if c.overwrite {
					_, err = f.WriteAt(rec, int64(i*c.size))
				} else {
					_, err = f.Write(rec)
				}
				if err == nil && !c.nosync {
					err = unix.Fdatasync(int(f.Fd()))
				}
				if err != nil {
					b.Fatal(err)
				}
				return time.Since(t0)
			}
			var tl, tp time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				tl += loop(fl, i)
				tp += loop(fp, i)
			}
			b.StopTimer()
			b.ReportMetric(float64(tl.Microseconds())/float64(b.N), "lazyfs-µs/op")
			b.ReportMetric(float64(tp.Microseconds())/float64(b.N), "backing-µs/op")
			b.ReportMetric(float64(tl)/float64(tp), "lazyfs/backing")
		})
	}
}
