//go:build linux

package bootstrap

import (
	"strings"
	"testing"
)

// FuzzParseHostlist: any string gives hosts or an error — no panic, no
// runaway expansion — and every host is a non-empty name without the
// list's syntax.
func FuzzParseHostlist(f *testing.F) {
	for _, s := range []string{"nid[001-003,010],login1", "a[1-2]b[3-4]", "node", "x[", "x]", "a[0-65536]b[0-65536]", "[1-3]", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ParseHostlist(s)
		if err != nil {
			return
		}
		if len(hosts) == 0 || len(hosts) > maxHosts {
			t.Fatalf("%q: %d hosts", s, len(hosts))
		}
		for _, h := range hosts {
			if h == "" || strings.ContainsAny(h, "[],") {
				t.Fatalf("%q gave host %q", s, h)
			}
		}
	})
}
