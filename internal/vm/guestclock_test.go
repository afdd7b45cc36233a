//go:build linux

package vm

import (
	"slices"
	"strings"
	"testing"
)

// TestQEMUArgsTSC: a TCG guest's kernel is told the counter's rate; a
// KVM guest's, which the hypervisor tells, is not.
func TestQEMUArgsTSC(t *testing.T) {
	for _, tc := range []struct {
		accel Accel
		khz   uint64
		want  string // the parameter, or "" for none
	}{
		{AccelTCG, 2300000, "tsc_early_khz=2300000"},
		{AccelTCG, 0, ""},
		{AccelKVM, 2300000, ""},
	} {
		args := qemuArgs(Config{TSCkHz: tc.khz}, tc.accel, Kernel{Image: "vmlinuz"}, "initrd", "/share", "console", "")
		i := slices.Index(args, "-append")
		if i < 0 {
			t.Fatalf("no kernel command line in %q", args)
		}
		cmdline := strings.Fields(args[i+1])
		if got := slices.IndexFunc(cmdline, func(p string) bool { return strings.HasPrefix(p, "tsc_early_khz=") }); tc.want == "" && got >= 0 || tc.want != "" && !slices.Contains(cmdline, tc.want) {
			t.Errorf("%s at %d kHz: kernel command line %q, want %q", tc.accel, tc.khz, args[i+1], tc.want)
		}
	}
}
