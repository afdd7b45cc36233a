//go:build linux

package vm

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/tsc"
)

// A TCG guest keeps time by its time-stamp counter, which qemu reads
// from the host's: it runs at the host's rate. The guest's kernel must
// learn that rate at boot, and under TCG it can only measure it against
// emulated timers: the PIT first, then the HPET. On a loaded host the
// PIT measure can come out far too low — a vCPU held while the PIT
// counts is a counter that seems to have moved less — and the kernel
// prefers the PIT when the two disagree: "PIT calibration deviates from
// HPET: 581656 2298763", and the guest's clock ran four times fast. Its
// timeouts then expire early, and across a cluster its clock leaves the
// others' (Slurm refused a step: "Job credential expired"). So a TCG
// guest is told the rate (tsc_early_khz, Linux 5.8 and later; its own
// refinement against the HPET still runs), and the agent checks the
// guest's clock against its RTC, which qemu keeps from the host's.

// hostTSC is the host's counter rate in kHz, measured once; 0 where the
// counter's rate is not constant (the guest measures it then).
var hostTSC = sync.OnceValue(func() uint64 {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(b[bytes.Index(b, []byte("\nflags"))+1:], []byte("\n"))
	flags := " " + string(line) + " "
	if !strings.Contains(flags, " constant_tsc ") || !strings.Contains(flags, " nonstop_tsc ") {
		return 0
	}
	return tsc.KHz(50 * time.Millisecond)
})

// clockSlack is how far a guest's clock may be from its RTC beyond the
// RTC's own second. Set from the RTC at boot, a clock that keeps time is
// less than that second behind it; one that runs 4× fast is 6 s ahead
// within 2 s of boot.
const clockSlack = 2 * time.Second

// checkClock compares the guest's clock with its RTC and returns what is
// wrong, or "" if nothing is (or there is no RTC to ask).
func checkClock() string {
	before := time.Now()
	b, err := os.ReadFile("/sys/class/rtc/rtc0/since_epoch")
	after := time.Now()
	if err != nil {
		return ""
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return ""
	}
	// The RTC read happened between before and after, at a true time in
	// [rtc, rtc+1s); the clock, set from the RTC, lags true time by under
	// a second.
	rtc := time.Unix(sec, 0)
	var off time.Duration
	switch {
	case before.After(rtc.Add(time.Second + clockSlack)):
		off = before.Sub(rtc.Add(time.Second))
	case after.Before(rtc.Add(-time.Second - clockSlack)):
		off = after.Sub(rtc.Add(-time.Second))
	default:
		return ""
	}
	var up unix.Timespec
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &up)
	return fmt.Sprintf("%v off its RTC %v after boot%s", off.Round(time.Millisecond),
		time.Duration(up.Nano()).Round(time.Millisecond), kernelLines("tsc:"))
}

// kernelLines is the kernel log's lines that hold s, each on a line of
// its own, for an error.
func kernelLines(s string) string {
	buf := make([]byte, 1<<20)
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil || n <= 0 {
		return ""
	}
	var out strings.Builder
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		if strings.Contains(line, s) {
			if strings.HasPrefix(line, "<") { // the record's level
				_, line, _ = strings.Cut(line, ">")
			}
			out.WriteString("\n" + strings.TrimSpace(line))
		}
	}
	return out.String()
}
