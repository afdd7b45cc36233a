//go:build linux

package hw

import "testing"

// FuzzParseGID: any text parses or is refused, and a parsed GID prints as
// text that parses back to it.
func FuzzParseGID(f *testing.F) {
	for _, s := range []string{"fe80:0000:0000:0000:5054:00ff:fe12:3456", "::ffff:192.0.2.1", "0000:0000:0000:0000:0000:0000:0000:0000", "zz", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseGID(s)
		if err != nil {
			return
		}
		back, err := ParseGID(g.String())
		if err != nil || back != g {
			t.Fatalf("%q → %v → %v, %v", s, g, back, err)
		}
	})
}
