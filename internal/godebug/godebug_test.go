package godebug

import (
	"strings"
	"testing"
)

func TestAsyncPreemption(t *testing.T) {
	for godebug, want := range map[string]bool{
		"":                                    true,
		"asyncpreemptoff=1":                   false,
		"gctrace=1,asyncpreemptoff=2":         false,
		"asyncpreemptoff=1,asyncpreemptoff=0": true,
		"asyncpreemptoff=0,asyncpreemptoff=1": false,
		"asyncpreemptoff=x":                   true,
		"xasyncpreemptoff=1":                  true,
	} {
		if got := AsyncPreemption(godebug); got != want {
			t.Errorf("AsyncPreemption(%q) = %v, want %v", godebug, got, want)
		}
	}
	if State("asyncpreemptoff=1") != "off" || State("") != "on" {
		t.Error("State")
	}
}

func TestWithAsyncPreemptOff(t *testing.T) {
	for _, tc := range []struct {
		environ, want []string // want nil: left alone
	}{
		{[]string{"A=1"}, []string{"A=1", "GODEBUG=asyncpreemptoff=1"}},
		{nil, []string{"GODEBUG=asyncpreemptoff=1"}},
		{[]string{"GODEBUG=", "B=2"}, []string{"GODEBUG=asyncpreemptoff=1", "B=2"}},
		{[]string{"GODEBUG=madvdontneed=1"}, []string{"GODEBUG=madvdontneed=1,asyncpreemptoff=1"}},
		{[]string{"GODEBUG=asyncpreemptoff=0"}, nil},
		{[]string{"GODEBUG=gctrace=1,asyncpreemptoff=1"}, nil},
	} {
		env, ok := WithAsyncPreemptOff(tc.environ)
		if ok != (tc.want != nil) || strings.Join(env, " ") != strings.Join(tc.want, " ") {
			t.Errorf("WithAsyncPreemptOff(%q) = %q, %v; want %q", tc.environ, env, ok, tc.want)
		}
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok && AsyncPreemption(v) {
				t.Errorf("%q leaves preemption on", env)
			}
		}
	}
}
