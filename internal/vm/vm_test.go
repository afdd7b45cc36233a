//go:build linux

package vm

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestVersionLess(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		less bool
	}{
		{"6.1.0-9-amd64", "6.1.0-56-amd64", true},
		{"6.1.0-56-amd64", "6.1.0-9-amd64", false},
		{"6.9.0-1-amd64", "6.10.0-1-amd64", true},
		{"6.1.0-56-amd64", "6.12.38+deb12-amd64", true},
		{"6.1.0-56-amd64", "6.1.0-56-amd64", false},
	} {
		if got := versionLess(tc.a, tc.b); got != tc.less {
			t.Errorf("versionLess(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func TestFindKernel(t *testing.T) {
	root := t.TempDir()
	oldBoot, oldMods := bootDir, modulesDir
	bootDir, modulesDir = filepath.Join(root, "boot"), filepath.Join(root, "lib/modules")
	defer func() { bootDir, modulesDir = oldBoot, oldMods }()

	if _, err := FindKernel(""); err == nil || !strings.Contains(err.Error(), "no kernel found") {
		t.Errorf("empty /boot: %v", err)
	}
	for _, v := range []string{"6.1.0-9-amd64", "6.1.0-56-amd64", "6.12.0-1-amd64"} {
		os.MkdirAll(bootDir, 0o755)
		os.WriteFile(filepath.Join(bootDir, "vmlinuz-"+v), nil, 0o644)
		if v != "6.12.0-1-amd64" { // an image without modules is not bootable here
			os.MkdirAll(filepath.Join(modulesDir, v), 0o755)
			os.WriteFile(filepath.Join(modulesDir, v, "modules.dep"), nil, 0o644)
		}
	}
	k, err := FindKernel("")
	if err != nil || k.Version != "6.1.0-56-amd64" {
		t.Errorf("newest = %+v, %v; want 6.1.0-56-amd64", k, err)
	}
	if k, err := FindKernel("6.1.0-9-amd64"); err != nil || k.Image != filepath.Join(bootDir, "vmlinuz-6.1.0-9-amd64") {
		t.Errorf("by version = %+v, %v", k, err)
	}
	if _, err := FindKernel("6.12.0-1-amd64"); err == nil || !strings.Contains(err.Error(), "no modules") {
		t.Errorf("image without modules: %v", err)
	}
	if _, err := FindKernel("/nowhere/vmlinuz-1.0"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing path: %v", err)
	}
}

func TestParseTopology(t *testing.T) {
	for _, s := range []string{"none", "rxe", "rxe2"} {
		if tp, err := ParseTopology(s); err != nil || string(tp) != s {
			t.Errorf("ParseTopology(%q) = %q, %v", s, tp, err)
		}
	}
	if _, err := ParseTopology("rxe3"); err == nil || !strings.Contains(err.Error(), "none, rxe, rxe2") {
		t.Errorf("ParseTopology(rxe3) = %v", err)
	}
	for tp := range topologyLinks {
		if _, err := ParseTopology(string(tp)); err != nil {
			t.Errorf("topology %q has links but is not listed", tp)
		}
	}
}

// TestCPIO checks the archive against GNU cpio, an independent reader.
func TestCPIO(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		if os.Getenv("RIVET_REQUIRE_VM") == "1" {
			t.Fatal("cpio not installed")
		}
		t.Skip("cpio not installed")
	}
	var buf bytes.Buffer
	cw := &cpioWriter{w: &buf}
	cw.Dir("bin", 0o755)
	cw.File("bin/hello", 0o755, []byte("#!/bin/sh\necho hi\n"))
	cw.File("odd", 0o600, []byte("abc")) // lengths that need padding
	cw.Symlink("bin/sh", "hello")
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("cpio", "-idm", "--quiet")
	cmd.Dir, cmd.Stdin = dir, &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio: %v: %s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "bin/hello")); string(b) != "#!/bin/sh\necho hi\n" {
		t.Errorf("bin/hello = %q", b)
	}
	if st, _ := os.Stat(filepath.Join(dir, "odd")); st == nil || st.Mode().Perm() != 0o600 || st.Size() != 3 {
		t.Errorf("odd = %v", st)
	}
	if l, _ := os.Readlink(filepath.Join(dir, "bin/sh")); l != "hello" {
		t.Errorf("bin/sh -> %q", l)
	}
}

func TestWatchStart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, startedFile)
	expired := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		watchStart(context.Background(), path, time.Minute, func() { expired <- struct{}{} })
		close(done)
	}()
	time.Sleep(300 * time.Millisecond)
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	<-done
	select {
	case <-expired:
		t.Error("expired although the guest started")
	default:
	}

	start := time.Now()
	never := filepath.Join(t.TempDir(), startedFile)
	watchStart(context.Background(), never, 300*time.Millisecond, func() { expired <- struct{}{} })
	select {
	case <-expired:
	default:
		t.Errorf("no expiry after %v without the file", time.Since(start))
	}
	// The host claims the file it gave up on: the guest cannot start
	// after (claimStart), and the share does not read as started.
	if b, err := os.ReadFile(never); err != nil || string(b) != hostClaim {
		t.Errorf("after expiry the file holds %q, %v; want the host's claim", b, err)
	}
	if started(filepath.Dir(never)) || !started(dir) {
		t.Errorf("started: %v for the host's claim, %v for the guest's file", started(filepath.Dir(never)), started(dir))
	}
	// A guest whose file appears between the last look and the deadline
	// (here before the first look: the deadline comes sooner) has
	// started: the host's claim fails and nothing expires.
	watchStart(context.Background(), path, time.Millisecond, func() { expired <- struct{}{} })
	select {
	case <-expired:
		t.Error("expired although the guest claimed the start first")
	default:
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	watchStart(ctx, filepath.Join(dir, "never"), time.Hour, func() { expired <- struct{}{} })
	select {
	case <-expired:
		t.Error("expired after its context ended")
	default:
	}
}
