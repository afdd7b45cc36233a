//go:build linux

package vm

import (
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// qmpConn is a session on a qemu's QMP socket, past the capabilities
// handshake.
type qmpConn struct {
	conn net.Conn
	dec  *json.Decoder
}

// dialQMP opens a session; every exchange on it must finish by deadline.
func dialQMP(sock string, deadline time.Time) (*qmpConn, error) {
	conn, err := net.DialTimeout("unix", sock, time.Until(deadline))
	if err != nil {
		return nil, fmt.Errorf("QMP: %w", err)
	}
	conn.SetDeadline(deadline)
	q := &qmpConn{conn: conn, dec: json.NewDecoder(conn)}
	var greeting map[string]any
	if err := q.dec.Decode(&greeting); err != nil {
		conn.Close()
		return nil, fmt.Errorf("QMP greeting: %w", err)
	}
	if _, err := q.execute("qmp_capabilities", nil); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmpConn) Close() error { return q.conn.Close() }

// execute runs one command and returns its result, skipping the events
// qemu sends between.
func (q *qmpConn) execute(command string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	b, _ := json.Marshal(req)
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("QMP %s: %w", command, err)
	}
	for {
		var resp struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Desc string `json:"desc"`
			} `json:"error"`
		}
		if err := q.dec.Decode(&resp); err != nil {
			return nil, fmt.Errorf("QMP %s: %w", command, err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("QMP %s: %s", command, resp.Error.Desc)
		}
		if resp.Return != nil {
			return resp.Return, nil
		}
	}
}

// monitor runs a human monitor command ("info registers -a") and returns
// its text.
func (q *qmpConn) monitor(line string) (string, error) {
	r, err := q.execute("human-monitor-command", map[string]string{"command-line": line})
	if err != nil {
		return "", err
	}
	var s string
	if err := json.Unmarshal(r, &s); err != nil {
		return "", fmt.Errorf("QMP %q: %w", line, err)
	}
	return s, nil
}
