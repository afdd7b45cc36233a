//go:build linux

package collectives

import "testing"

// ForceFromEnv applies the environment's overrides, reports the first bad
// one, and the package reads nothing at start-up.
func TestForceFromEnv(t *testing.T) {
	defer Force("allreduce", Auto)
	defer Force("bcast", Auto)
	t.Setenv(ForceEnv, "allreduce=ring, bcast=nope")
	if forcedFor("allreduce") != Auto {
		t.Fatalf("allreduce forced before ForceFromEnv: the package read the environment itself")
	}
	err := ForceFromEnv()
	if err == nil {
		t.Fatal("bcast=nope: no error")
	}
	if forcedFor("allreduce") != Ring || forcedFor("bcast") != Auto {
		t.Errorf("forced allreduce=%q bcast=%q, want ring and auto", forcedFor("allreduce"), forcedFor("bcast"))
	}
	t.Setenv(ForceEnv, "")
	if err := ForceFromEnv(); err != nil {
		t.Errorf("empty: %v", err)
	}
}
