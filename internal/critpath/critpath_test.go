package critpath

import "testing"

// TestTally runs in both builds: go test ./internal/critpath, and with
// -tags rivetprobe (scripts/test.sh runs both).
func TestTally(t *testing.T) {
	Reset()
	Doorbell() // nothing arrived: no interval
	Arrived()
	Arrived() // the first arrival starts it
	Doorbell()
	Doorbell()
	ticks, n := Tally()
	if !Enabled {
		if ticks != 0 || n != 0 || Now() != 0 {
			t.Fatalf("a build without rivetprobe measured: %d ticks, %d intervals", ticks, n)
		}
		return
	}
	if n != 1 {
		t.Fatalf("%d intervals, want 1", n)
	}
	Reset()
	if ticks, n := Tally(); ticks != 0 || n != 0 {
		t.Fatalf("after Reset: %d ticks, %d intervals", ticks, n)
	}
}
