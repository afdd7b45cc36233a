//go:build linux

// Package pmi speaks the Process Management Interface that launchers serve
// to the processes they start: PMI-1 (text lines) and PMI-2 (length-prefixed
// records), as MPICH's Hydra mpiexec and Slurm's srun --mpi=pmi2 do. It has
// a client (what a Rivet process uses to learn its rank and exchange
// endpoint addresses) and a PMI-2 server (what rivetrun runs).
package pmi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Limits. Hydra and Slurm advertise 1024-byte values, but Hydra cuts a
// value of exactly 1024 bytes short (measured: a blob's hex chunk came back
// with odd length), so Rivet stays below it. Longer values must be split
// by the caller (see Client.PutBlob).
const (
	MaxKey   = 64
	MaxValue = 1000
	maxLine  = 1024 // PMI-1 line limit
	maxV2Msg = 999999
)

// ErrProtocol is wrapped by every malformed-message error.
var ErrProtocol = errors.New("pmi: protocol error")

// msg is one PMI message: a command and its attributes in order.
type msg struct {
	cmd   string
	attrs []kv
}

type kv struct{ k, v string }

func (m msg) get(k string) (string, bool) {
	for _, a := range m.attrs {
		if a.k == k {
			return a.v, true
		}
	}
	return "", false
}

// check returns the error a reply carries in rc/msg or rc/errmsg.
func (m msg) check() error {
	rc, ok := m.get("rc")
	if !ok || rc == "0" {
		return nil
	}
	text, _ := m.get("errmsg")
	if text == "" {
		text, _ = m.get("msg")
	}
	return fmt.Errorf("pmi: %s failed: rc=%s %s", m.cmd, rc, text)
}

// v1 framing: "cmd=NAME key=value ...\n".

func writeV1(w io.Writer, m msg) error {
	var b strings.Builder
	b.WriteString("cmd=" + m.cmd)
	for _, a := range m.attrs {
		if strings.ContainsAny(a.v, " \n") || strings.ContainsAny(a.k, " =\n") {
			return fmt.Errorf("%w: %q=%q cannot be sent in PMI-1", ErrProtocol, a.k, a.v)
		}
		b.WriteString(" " + a.k + "=" + a.v)
	}
	b.WriteByte('\n')
	if b.Len() > maxLine {
		return fmt.Errorf("%w: %d-byte line (PMI-1 allows %d)", ErrProtocol, b.Len(), maxLine)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func readV1(r *bufio.Reader) (msg, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return msg{}, err
	}
	return parseV1(strings.TrimRight(line, "\n"))
}

func parseV1(line string) (msg, error) {
	var m msg
	for i, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return m, fmt.Errorf("%w: %q in %q", ErrProtocol, f, line)
		}
		if i == 0 {
			if k != "cmd" {
				return m, fmt.Errorf("%w: line does not start with cmd=: %q", ErrProtocol, line)
			}
			m.cmd = v
			continue
		}
		m.attrs = append(m.attrs, kv{k, v})
	}
	if m.cmd == "" {
		return m, fmt.Errorf("%w: empty line", ErrProtocol)
	}
	return m, nil
}

// v2 framing: a 6-character decimal length, then "cmd=NAME;key=value;...".
// Values never contain ';' here (Rivet hex-encodes blobs); a peer's ";;"
// escape is undone on reading.

func writeV2(w io.Writer, m msg) error {
	var b strings.Builder
	b.WriteString("cmd=" + m.cmd + ";")
	for _, a := range m.attrs {
		b.WriteString(a.k + "=" + strings.ReplaceAll(a.v, ";", ";;") + ";")
	}
	if b.Len() > maxV2Msg {
		return fmt.Errorf("%w: %d-byte message", ErrProtocol, b.Len())
	}
	_, err := io.WriteString(w, fmt.Sprintf("%-6d", b.Len())+b.String())
	return err
}

func readV2(r *bufio.Reader) (msg, error) {
	var hdr [6]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return msg{}, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(hdr[:])))
	if err != nil || n <= 0 || n > maxV2Msg {
		return msg{}, fmt.Errorf("%w: bad length %q", ErrProtocol, hdr[:])
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return msg{}, err
	}
	return parseV2(string(body))
}

func parseV2(s string) (msg, error) {
	var m msg
	for first := true; s != ""; first = false {
		// A field ends at a ';' that is not doubled.
		end := -1
		for i := 0; i < len(s); i++ {
			if s[i] == ';' {
				if i+1 < len(s) && s[i+1] == ';' {
					i++
					continue
				}
				end = i
				break
			}
		}
		if end < 0 {
			return m, fmt.Errorf("%w: unterminated field in %q", ErrProtocol, s)
		}
		field := strings.ReplaceAll(s[:end], ";;", ";")
		s = s[end+1:]
		k, v, ok := strings.Cut(field, "=")
		if !ok {
			return m, fmt.Errorf("%w: field %q", ErrProtocol, field)
		}
		if first {
			if k != "cmd" {
				return m, fmt.Errorf("%w: message does not start with cmd=", ErrProtocol)
			}
			m.cmd = v
			continue
		}
		m.attrs = append(m.attrs, kv{k, v})
	}
	if m.cmd == "" {
		return m, fmt.Errorf("%w: empty message", ErrProtocol)
	}
	return m, nil
}
