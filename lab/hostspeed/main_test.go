//go:build linux

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"8": 8, "4096": 4096, "64KiB": 64 << 10, "512MiB": 512 << 20, "1GiB": 1 << 30} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-8", "4", "3000", "12MiB", "KiB", "1TiB", "x"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q): no error", in)
		}
	}
}

func TestRelative(t *testing.T) {
	rel := relative([]time.Duration{200, 100, 150, 300})
	want := []float64{2, 1, 1.5, 3}
	for i := range want {
		if rel[i] != want[i] {
			t.Fatalf("relative = %v, want %v", rel, want)
		}
	}
	if s := slowShare(rel, 1.5); s != 0.75 {
		t.Errorf("slowShare = %v, want 0.75", s)
	}
	if relative(nil) != nil || slowShare(nil, 1.5) != 0 {
		t.Error("empty input")
	}
}

func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-mem", "64KiB", "-d", "300ms", "-window", "100ms"}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// a header, a line per window (the last may start just before the end), the share
	if len(lines) < 5 || !strings.HasPrefix(lines[0], "# ") || !strings.HasPrefix(lines[len(lines)-1], "# windows at 1.5x") {
		t.Fatalf("output:\n%s", out.String())
	}
	fastest := false
	for _, l := range lines[1 : len(lines)-1] {
		fastest = fastest || strings.HasSuffix(l, " 1.00")
	}
	if !fastest {
		t.Errorf("no window is the fastest (1.00):\n%s", out.String())
	}
	for _, args := range [][]string{{"-mem", "3KiB"}, {"-d", "0s"}, {"-d", "1s", "-window", "2s"}, {"-bogus"}} {
		if err := run(args, &out); err == nil {
			t.Errorf("run(%q): no error", args)
		}
	}
}
