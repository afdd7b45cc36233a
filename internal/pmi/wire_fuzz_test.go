//go:build linux

package pmi

import (
	"bufio"
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// FuzzV2 feeds arbitrary bytes to the PMI-2 reader: it must return a
// message or an error, never panic, and a message it reads (whose names
// hold no ';', which the writer does not escape) must survive a write
// and a read unchanged.
func FuzzV2(f *testing.F) {
	for _, s := range []string{"26    cmd=fullinit;pmirank=0;", "14    cmd=kvs-fence;", "30    cmd=kvs-get;key=a;;b=c;;;", "000000", "9     cmd=x;k=v"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := readV2(bufio.NewReader(bytes.NewReader(in)))
		if err != nil || strings.Contains(m.cmd, ";") {
			return
		}
		for _, a := range m.attrs {
			if strings.ContainsAny(a.k, ";=") {
				return
			}
		}
		var b bytes.Buffer
		if err := writeV2(&b, m); err != nil {
			return // too long to send
		}
		back, err := readV2(bufio.NewReader(&b))
		if err != nil || !reflect.DeepEqual(back, m) {
			t.Fatalf("%q read as %+v, written as %q, read back as %+v, %v", in, m, b.String(), back, err)
		}
	})
}

// FuzzV1 does the same for PMI-1 lines.
func FuzzV1(f *testing.F) {
	for _, s := range []string{"cmd=init pmi_version=1 pmi_subversion=1", "cmd=get kvsname=k key=a", "cmd=", "key=v cmd=x", "cmd=x a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		m, err := parseV1(line)
		if err != nil {
			return
		}
		var b bytes.Buffer
		if err := writeV1(&b, m); err != nil {
			return // not sendable in PMI-1
		}
		back, err := readV1(bufio.NewReader(&b))
		if err != nil || !reflect.DeepEqual(back, m) {
			t.Fatalf("%q parsed as %+v, written as %q, read back as %+v, %v", line, m, b.String(), back, err)
		}
	})
}

// FuzzParseMapping: any PMI_process_mapping a launcher sends is read into
// a node for every rank, or refused; never a panic, never a short answer.
func FuzzParseMapping(f *testing.F) {
	for _, s := range []string{"(vector,(0,2,2))", "(vector,(0,1,2),(1,1,1))", "(vector,(0,16777216,16777216))", "(vector,(0,1", "(vector)"} {
		f.Add(s, uint16(5))
	}
	f.Fuzz(func(t *testing.T, s string, size uint16) {
		nodes, err := ParseMapping(s, int(size))
		if err != nil {
			return
		}
		if len(nodes) != int(size) {
			t.Fatalf("%q for %d ranks: %d nodes", s, size, len(nodes))
		}
		for _, n := range nodes {
			if n < 0 || n > 2*maxMappingValue {
				t.Fatalf("%q: node %d", s, n)
			}
		}
	})
}
