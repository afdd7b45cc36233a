//go:build linux

package vm

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"
)

// hangReport says what a guest is doing, before the runner kills it for
// not starting the command in time or for running past its timeout: a
// rare hang is found from one report or not at all. It asks qemu for
// every vCPU's instruction pointer and whether it is halted (qemu's view,
// which needs nothing of the guest), then asks the guest's kernel through
// magic SysRq keys on the emulated keyboard (the kernel runs with
// sysrq_always_enabled) for the stacks of its running CPUs (l), its
// blocked tasks (w) and its user-space tasks (t, kernel threads left
// out). A guest not yet past its keyboard driver answers no key; the
// registers still say where it is.
func hangReport(sock, console string, tail int) string {
	var b strings.Builder
	b.WriteString(consoleTail(console, tail))
	deadline := time.Now().Add(HangReportTime)
	q, err := dialQMP(sock, deadline)
	if err != nil {
		return b.String() + "\nno report from qemu: " + err.Error()
	}
	defer q.Close()
	regs, err := q.monitor("info registers -a")
	if err != nil {
		return b.String() + "\nno report from qemu: " + err.Error()
	}
	b.WriteString("\nvCPUs:" + vcpuStates(regs))
	// The kernel prints a SysRq key's name at its default console level
	// but what the key asks for at the console's own (loglevel=4, warnings
	// and worse). Key 8 lets informational lines through; it is pressed
	// until the kernel answers, as a guest still booting may come up
	// during the report. Then each key is followed by key 7: the kernel
	// takes keys in order, so 7's answer marks the end of the key's.
	if !sysrqProbe(q, console, deadline) {
		return b.String() + "\nSysRq: no answer on the console"
	}
	for _, key := range []string{"l", "w", "t"} {
		from := fileSize(console)
		for _, k := range []string{key, "7"} {
			if _, err := q.monitor("sendkey alt-sysrq-" + k); err != nil {
				return b.String() + "\nSysRq: " + err.Error()
			}
		}
		out, ok := sysrqAnswer(console, from, "Loglevel set to 7", deadline)
		if !ok {
			return b.String() + "\nSysRq " + key + ": no answer on the console"
		}
		if key == "t" {
			out = userTasks(out)
		}
		fmt.Fprintf(&b, "\nSysRq %s:\n%s", key, out)
	}
	return b.String()
}

// hangKill kills a guest (or a cluster) once, first taking a hangReport
// of the guest that hung.
type hangKill struct {
	once   sync.Once
	stop   context.CancelFunc
	report string
}

// hung reports on the guest with the QMP socket qmp and the console file
// console, after the console's last tail lines, then kills, unless the
// kill was done already. A cluster's report names its node.
func (h *hangKill) hung(node, qmp, console string, tail int) {
	h.once.Do(func() {
		h.report = hangReport(qmp, console, tail)
		if node != "" {
			h.report = "\n" + node + ":" + h.report
		}
		h.stop()
	})
}

// result is the report, if hung ran; after it, hung does nothing.
func (h *hangKill) result() string {
	h.once.Do(func() {})
	return h.report
}

// HangReportTime bounds the report on a guest killed for a hang: it
// delays the kill by at most this.
const HangReportTime = 20 * time.Second

// vcpuStates is one line per vCPU of qemu's register dump: its RIP and
// whether it is halted (idle, waiting for an interrupt).
func vcpuStates(regs string) string {
	var b strings.Builder
	cpu := ""
	for _, line := range strings.Split(regs, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "CPU#") {
			cpu = line
		}
		if strings.HasPrefix(line, "RIP=") {
			rip, _, _ := strings.Cut(line, " ")
			state := "running"
			if strings.Contains(line, "HLT=1") {
				state = "halted"
			}
			fmt.Fprintf(&b, "\n%s %s %s", cpu, rip, state)
		}
	}
	return b.String()
}

// sysrqProbe presses SysRq 8 every sysrqRetry until the kernel answers
// or deadline passes, and reports whether it answered.
func sysrqProbe(q *qmpConn, console string, deadline time.Time) bool {
	from := fileSize(console)
	for time.Now().Before(deadline) {
		if _, err := q.monitor("sendkey alt-sysrq-8"); err != nil {
			return false
		}
		if _, ok := sysrqAnswer(console, from, "Loglevel set to 8", minTime(deadline, time.Now().Add(sysrqRetry))); ok {
			return true
		}
	}
	return false
}

// sysrqRetry is how long a probe waits for an answer before pressing the
// key again.
const sysrqRetry = 2 * time.Second

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// sysrqAnswer waits until the console, from offset from, holds the line
// end, or until deadline, and returns what came before it, without the
// stack's unreliable entries ("? ") or register dumps.
func sysrqAnswer(console string, from int64, end string, deadline time.Time) (string, bool) {
	for {
		b, _ := os.ReadFile(console)
		if int64(len(b)) > from {
			text := strings.ReplaceAll(string(b[from:]), "\r", "")
			if i := strings.Index(text, end); i >= 0 {
				return answerLines(text[:i]), true
			}
		}
		if time.Now().After(deadline) {
			return "", false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// answerLines keeps the lines of a SysRq answer worth reading.
func answerLines(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		msg := line
		if _, m, ok := strings.Cut(line, "] "); ok {
			msg = m
		}
		switch {
		case strings.Contains(msg, "Changing Loglevel"), strings.Contains(msg, "Loglevel set to"), strings.TrimSpace(msg) == "sysrq:", strings.HasPrefix(msg, " ? "),
			strings.HasPrefix(msg, "Code: "), registerDump.MatchString(msg) && !strings.HasPrefix(msg, "RIP: "), strings.TrimSpace(line) == "":
			continue
		}
		b.WriteString(line + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// registerDump matches a line of general registers ("RAX: ... RBX: ...",
// "RSP: 0018:... EFLAGS: ..."); the caller keeps a stack's "RIP: " line.
var registerDump = regexp.MustCompile(`^(R[A-Z0-9]{2}|R[0-9]): `)

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// userTasks keeps, of a SysRq t dump, the tasks that are not kernel
// threads (kthreadd, pid 2, and its children), and drops the scheduler
// statistics that follow the tasks.
func userTasks(dump string) string {
	var b strings.Builder
	keep := true
	for _, line := range strings.SplitAfter(dump, "\n") {
		if strings.Contains(line, "Sched Debug Version") || strings.Contains(line, "runnable tasks:") {
			break
		}
		if i := strings.Index(line, "task:"); i >= 0 {
			f := line[i:]
			keep = !strings.Contains(f, " pid:2 ") && !strings.Contains(f, " ppid:2 ")
		}
		if keep {
			b.WriteString(line)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}
