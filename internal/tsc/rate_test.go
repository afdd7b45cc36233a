package tsc

import (
	"testing"
	"time"
)

// TestKHz: two measures of the counter's rate across different spans
// agree within 1%, where the counter is one; without one there is none.
func TestKHz(t *testing.T) {
	short, long := KHz(20*time.Millisecond), KHz(100*time.Millisecond)
	if !Have {
		if short != 0 || long != 0 {
			t.Fatalf("no counter, but rates %d and %d kHz", short, long)
		}
		return
	}
	t.Logf("%d kHz over 20 ms, %d kHz over 100 ms", short, long)
	if short == 0 || long == 0 {
		t.Fatalf("rates %d and %d kHz", short, long)
	}
	if diff := max(short, long) - min(short, long); diff*100 > long {
		t.Errorf("rates %d and %d kHz differ by more than 1%%", short, long)
	}
}
