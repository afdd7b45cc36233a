//go:build linux

package falloc

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// shmFile is a new file in /dev/shm, tmpfs on every Linux: a file system
// whose fallocate signals interrupt.
func shmFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.CreateTemp("/dev/shm", "falloc-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); os.Remove(f.Name()) })
	return f
}

// allocated returns f's size and the bytes the file system holds for it.
func allocated(t *testing.T, f *os.File) (size, held int64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Size, st.Blocks * 512
}

func TestAllocate(t *testing.T) {
	f := shmFile(t)
	if err := Allocate(int(f.Fd()), 1<<20); err != nil {
		t.Fatal(err)
	}
	if size, held := allocated(t, f); size != 1<<20 || held < 1<<20 {
		t.Fatalf("after Allocate(1 MiB): size %d, %d bytes held", size, held)
	}
	// A shorter range leaves the size; none is nothing to do.
	for _, n := range []int64{4096, 0} {
		if err := Allocate(int(f.Fd()), n); err != nil {
			t.Fatalf("Allocate(%d): %v", n, err)
		}
		if size, _ := allocated(t, f); size != 1<<20 {
			t.Fatalf("Allocate(%d) of a 1 MiB file: size %d", n, size)
		}
	}
	err := Allocate(-1, 4096)
	var se *os.SyscallError
	if !errors.Is(err, unix.EBADF) || !errors.As(err, &se) || se.Syscall != "fallocate" {
		t.Fatalf("Allocate of no file: %v, want fallocate's EBADF", err)
	}
}

// interrupting makes fallocate act as tmpfs's does under signals that
// come every gap bytes of allocation: a longer call is interrupted with
// nothing kept. It counts the calls.
func interrupting(t *testing.T, gap int64, calls *int) {
	t.Cleanup(func() { fallocate = unix.Fallocate })
	fallocate = func(fd int, mode uint32, off, n int64) error {
		*calls++
		if n > gap {
			return unix.EINTR
		}
		return unix.Fallocate(fd, mode, off, n)
	}
}

// TestAllocateInterrupted: with signals faster than the whole range can
// be allocated, Allocate still allocates all of it, in steps, and keeps
// what each step allocated.
func TestAllocateInterrupted(t *testing.T) {
	for _, gap := range []int64{48 << 20, 3 << 20, 100 << 10} {
		f := shmFile(t)
		calls := 0
		interrupting(t, gap, &calls)
		if err := Allocate(int(f.Fd()), 64<<20); err != nil {
			t.Fatalf("signals every %d bytes: %v", gap, err)
		}
		if size, held := allocated(t, f); size != 64<<20 || held < 64<<20 {
			t.Fatalf("signals every %d bytes: size %d, %d bytes held", gap, size, held)
		}
		// Halving to below gap, then at most two calls per success (one
		// doubled past gap, one back under it): a bound that holds only
		// if completed steps are kept.
		if max := 16 + 2*(64<<20)/(gap/2); calls > int(max) {
			t.Fatalf("signals every %d bytes: %d calls, want at most %d", gap, calls, max)
		}
		t.Logf("signals every %d KiB: %d calls", gap>>10, calls)
	}

	// An error that is not an interruption ends it, wrapped.
	f := shmFile(t)
	calls := 0
	fallocate = func(fd int, mode uint32, off, n int64) error {
		if calls++; calls == 3 {
			return unix.ENOSPC
		}
		if n > 1<<20 {
			return unix.EINTR
		}
		return unix.Fallocate(fd, mode, off, n)
	}
	if err := Allocate(int(f.Fd()), 8<<20); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("no space at the third call: %v, want ENOSPC", err)
	}
}

// TestAllocateSignals allocates 64 MiB in /dev/shm while the calling
// thread takes a signal every 200 µs. Linux 6.1's tmpfs fails each
// fallocate that a signal meets with EINTR (a plain call of that size did
// every time in the soft-RoCE VM); newer kernels may not interrupt it at
// all, and then there is nothing to retry.
func TestAllocateSignals(t *testing.T) {
	f := shmFile(t)
	interrupted := 0
	t.Cleanup(func() { fallocate = unix.Fallocate })
	fallocate = func(fd int, mode uint32, off, n int64) error {
		err := unix.Fallocate(fd, mode, off, n)
		if err == unix.EINTR {
			interrupted++
		}
		return err
	}
	tid, done := make(chan int), make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		done <- Allocate(int(f.Fd()), 64<<20)
	}()
	target := <-tid
	tick := time.NewTicker(200 * time.Microsecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if size, held := allocated(t, f); size != 64<<20 || held < 64<<20 {
				t.Fatalf("size %d, %d bytes held", size, held)
			}
			t.Logf("%d calls interrupted", interrupted)
			return
		case <-tick.C:
			// SIGURG: the runtime's own preemption signal, which it
			// takes at any time.
			unix.Tgkill(os.Getpid(), target, unix.SIGURG)
		}
	}
}
