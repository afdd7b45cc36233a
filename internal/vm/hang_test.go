//go:build linux

package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestVCPUStates(t *testing.T) {
	regs := "CPU#0\r\nRAX=0000000000000000 RBX=0000000000000000\r\n" +
		"RIP=ffffffff81a592eb RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\r\n" +
		"CPU#1\r\nRIP=ffffffff8100abcd RFL=00000202 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=0\r\n"
	want := "\nCPU#0 RIP=ffffffff81a592eb halted\nCPU#1 RIP=ffffffff8100abcd running"
	if got := vcpuStates(regs); got != want {
		t.Errorf("vcpuStates = %q, want %q", got, want)
	}
}

// A SysRq t dump keeps user-space tasks and drops kernel threads,
// unreliable frames, register dumps and the scheduler's statistics.
func TestSysrqAnswer(t *testing.T) {
	dump := `[    9.0] early line before the keys
[   20.024486] sysrq: Show State
[   20.024835] task:kthreadd        state:S stack:0     pid:2     ppid:0      flags:0x00004000
[   20.025276] Call Trace:
[   20.025501]  __schedule+0x34d/0xa00
[   20.024835] task:kworker/0:1     state:I stack:0     pid:20    ppid:2      flags:0x00004000
[   20.025501]  worker_thread+0x34d/0xa00
[   20.028651] task:agent           state:S stack:0     pid:1     ppid:0      flags:0x00000000
[   20.028955]  __schedule+0x34d/0xa00
[   20.029000]  ? update_load_avg+0x7e/0x780
[   20.029020] RIP: 0033:0x48b8c3
[   20.029030] RSP: 002b:00007fffaf4c44e0 EFLAGS: 00000286 ORIG_RAX: 00000000000000ca
[   20.029040] RAX: ffffffffffffffda RBX: 0000000000000000 RCX: 000000000048b8c3
[   20.029050] R13: 0000000000000150 R14: 00000000007ca640 R15: ffffffffffffffff
[   20.029060] Code: 7f c3 cc cc
[   20.102559] task:sleep           state:S stack:0     pid:119   ppid:1      flags:0x00000002
[   20.103136]  hrtimer_nanosleep+0x9e/0x170
[   20.110000] Sched Debug Version: v0.11, 6.1.0-57-amd64 #1
[   20.110001] runnable tasks:
[   20.110002] sysrq: Changing Loglevel
[   20.110003] sysrq: Loglevel set to 7
`
	path := filepath.Join(t.TempDir(), "console.log")
	if err := os.WriteFile(path, []byte(dump), 0o644); err != nil {
		t.Fatal(err)
	}
	from := int64(strings.Index(dump, "\n") + 1)
	out, ok := sysrqAnswer(path, from, "Loglevel set to 7", time.Now().Add(time.Second))
	if !ok {
		t.Fatal("no answer found")
	}
	want := `[   20.024486] sysrq: Show State
[   20.028651] task:agent           state:S stack:0     pid:1     ppid:0      flags:0x00000000
[   20.028955]  __schedule+0x34d/0xa00
[   20.029020] RIP: 0033:0x48b8c3
[   20.102559] task:sleep           state:S stack:0     pid:119   ppid:1      flags:0x00000002
[   20.103136]  hrtimer_nanosleep+0x9e/0x170`
	if got := userTasks(out); got != want {
		t.Errorf("userTasks(sysrqAnswer) =\n%s\nwant\n%s", got, want)
	}
}

// Without the answer to SysRq 7, sysrqAnswer gives up at its deadline.
func TestSysrqNoAnswer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	os.WriteFile(path, []byte("[    1.0] booting\n"), 0o644)
	if out, ok := sysrqAnswer(path, 0, "Loglevel set to 7", time.Now().Add(300*time.Millisecond)); ok {
		t.Errorf("answer %q from a console without one", out)
	}
}
