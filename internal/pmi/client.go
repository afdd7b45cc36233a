//go:build linux

package pmi

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoLauncher means the environment names no PMI server.
var ErrNoLauncher = errors.New("pmi: not started by a PMI launcher (no PMI_FD or PMI_PORT)")

// Client is one process's connection to its launcher's PMI server. Its
// methods are safe for concurrent use; they are serialized.
type Client struct {
	mu      sync.Mutex
	conn    io.ReadWriteCloser
	r       *bufio.Reader
	v2      bool
	rank    int
	size    int
	jobid   string // the PMI-2 job id, or the PMI-1 KVS name
	spawner string // the job that spawned this one (PMI-2), "" if none
	broken  error  // set when a request was abandoned midway: the stream is out of step
}

// FromEnv connects to the launcher named by PMI_FD (Hydra, srun) or
// PMI_PORT (with PMI_ID), and initializes. It returns ErrNoLauncher when
// neither is set.
func FromEnv(ctx context.Context) (*Client, error) {
	var conn io.ReadWriteCloser
	switch {
	case os.Getenv("PMI_FD") != "":
		fd, err := strconv.Atoi(os.Getenv("PMI_FD"))
		if err != nil || fd < 0 {
			return nil, fmt.Errorf("pmi: PMI_FD=%q is not a file descriptor", os.Getenv("PMI_FD"))
		}
		unix.CloseOnExec(fd)
		// Non-blocking, so reads go through the netpoller and deadlines work.
		if err := unix.SetNonblock(fd, true); err != nil {
			return nil, fmt.Errorf("pmi: PMI_FD %d: %w", fd, err)
		}
		conn = os.NewFile(uintptr(fd), "pmi")
	case os.Getenv("PMI_PORT") != "":
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", os.Getenv("PMI_PORT"))
		if err != nil {
			return nil, fmt.Errorf("pmi: PMI_PORT: %w", err)
		}
		conn = c
	default:
		return nil, ErrNoLauncher
	}
	rank := -1
	if v := os.Getenv("PMI_RANK"); v != "" {
		rank, _ = strconv.Atoi(v)
	}
	v1 := false
	switch v := os.Getenv(VersionEnv); v {
	case "", "2":
	case "1":
		v1 = true
	default:
		conn.Close()
		return nil, fmt.Errorf("pmi: %s=%q: 1, or 2 (the default: PMI-2 where the launcher speaks it)", VersionEnv, v)
	}
	c, err := newClient(ctx, conn, rank, os.Getenv("PMI_JOBID"), os.Getenv("PMI_ID"), v1)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// NewClient initializes PMI over conn: PMI-2 if the server speaks it, else
// PMI-1. rank is the PMI_RANK hint (-1 if unknown); jobid and srcid are
// PMI_JOBID and PMI_ID, which may be empty.
func NewClient(ctx context.Context, conn io.ReadWriteCloser, rank int, jobid, srcid string) (*Client, error) {
	return newClient(ctx, conn, rank, jobid, srcid, false)
}

// VersionEnv set to 1 makes FromEnv speak PMI-1 even to a launcher that
// speaks PMI-2. MPICH 4.0's Hydra needs it for jobs of about 200 or more
// processes on a node: on its PMI-2 path, where every lookup goes from
// the node's proxy to mpiexec, the two came to block writing to each
// other and the job hung; its PMI-1 path ran 256. PMI-1 cannot spawn.
const VersionEnv = "RIVET_PMI_VERSION"

func newClient(ctx context.Context, conn io.ReadWriteCloser, rank int, jobid, srcid string, v1 bool) (*Client, error) {
	c := &Client{conn: conn, r: bufio.NewReader(conn), rank: rank}
	done := c.deadline(ctx)
	defer done()
	if v1 {
		if err := c.roundTripV1(msg{"init", []kv{{"pmi_version", "1"}, {"pmi_subversion", "1"}}}, "response_to_init"); err != nil {
			return nil, c.ioErr(ctx, "init", err)
		}
		return c, c.initV1()
	}
	// Both versions open with a PMI-1 line.
	if err := writeV1(conn, msg{"init", []kv{{"pmi_version", "2"}, {"pmi_subversion", "0"}}}); err != nil {
		return nil, c.ioErr(ctx, "init", err)
	}
	resp, err := readV1(c.r)
	if err != nil {
		return nil, c.ioErr(ctx, "init", err)
	}
	if v, _ := resp.get("pmi_version"); resp.cmd == "response_to_init" && resp.check() == nil && v == "2" {
		c.v2 = true
		return c, c.fullinit(jobid, srcid)
	}
	// A PMI-1 server: start again at version 1.
	if err := c.roundTripV1(msg{"init", []kv{{"pmi_version", "1"}, {"pmi_subversion", "1"}}}, "response_to_init"); err != nil {
		return nil, c.ioErr(ctx, "init", err)
	}
	return c, c.initV1()
}

func (c *Client) fullinit(jobid, srcid string) error {
	req := msg{"fullinit", []kv{{"pmirank", strconv.Itoa(c.rank)}, {"threaded", "FALSE"}}}
	if jobid != "" {
		req.attrs = append(req.attrs, kv{"pmijobid", jobid})
	}
	if srcid != "" {
		req.attrs = append(req.attrs, kv{"srcid", srcid})
	}
	resp, err := c.roundTrip(req, "fullinit-response")
	if err != nil {
		return err
	}
	for _, f := range []struct {
		key string
		dst *int
	}{{"rank", &c.rank}, {"size", &c.size}} {
		v, _ := resp.get(f.key)
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%w: fullinit-response %s=%q", ErrProtocol, f.key, v)
		}
		*f.dst = n
	}
	if s, ok := resp.get("spawner-jobid"); ok && s != "NULL" {
		c.spawner = s
	}
	id, err := c.roundTrip(msg{cmd: "job-getid"}, "job-getid-response")
	if err != nil {
		return err
	}
	c.jobid, _ = id.get("jobid")
	return c.validate()
}

func (c *Client) initV1() error {
	name, err := c.roundTrip(msg{cmd: "get_my_kvsname"}, "my_kvsname")
	if err != nil {
		return err
	}
	c.jobid, _ = name.get("kvsname")
	// Hydra and srun give rank and size in the environment under PMI-1.
	c.size, _ = strconv.Atoi(os.Getenv("PMI_SIZE"))
	if c.size == 0 {
		if u, err := c.roundTrip(msg{cmd: "get_universe_size"}, "universe_size"); err == nil {
			v, _ := u.get("size")
			c.size, _ = strconv.Atoi(v)
		}
	}
	return c.validate()
}

func (c *Client) validate() error {
	if c.size < 1 || c.rank < 0 || c.rank >= c.size {
		return fmt.Errorf("%w: rank %d of size %d", ErrProtocol, c.rank, c.size)
	}
	return nil
}

// Rank is this process's rank in the job.
func (c *Client) Rank() int { return c.rank }

// Size is the number of processes in the job.
func (c *Client) Size() int { return c.size }

// Version is 2 or 1: the PMI version spoken.
func (c *Client) Version() int {
	if c.v2 {
		return 2
	}
	return 1
}

// JobID is the job's identifier (the KVS name under PMI-1).
func (c *Client) JobID() string { return c.jobid }

// Put publishes key=value; others see it after the next Fence.
func (c *Client) Put(ctx context.Context, key, value string) error {
	if err := checkKV(key, value); err != nil {
		return err
	}
	_, err := c.call(ctx, "put",
		msg{"kvs-put", []kv{{"key", key}, {"value", value}}}, "kvs-put-response",
		msg{"put", []kv{{"kvsname", c.jobid}, {"key", key}, {"value", value}}}, "put_result")
	return err
}

// Fence is the collective that makes every rank's puts visible to all.
// Every rank must call it.
func (c *Client) Fence(ctx context.Context) error {
	_, err := c.call(ctx, "fence", msg{cmd: "kvs-fence"}, "kvs-fence-response", msg{cmd: "barrier_in"}, "barrier_out")
	return err
}

// ErrNotFound is returned by Get for a key nobody put.
var ErrNotFound = errors.New("pmi: key not found")

// Get reads a key put by any rank before the last Fence.
func (c *Client) Get(ctx context.Context, key string) (string, error) {
	if err := checkKV(key, ""); err != nil {
		return "", err
	}
	resp, err := c.call(ctx, "get "+key,
		msg{"kvs-get", []kv{{"jobid", c.jobid}, {"srcid", "-1"}, {"key", key}}}, "kvs-get-response",
		msg{"get", []kv{{"kvsname", c.jobid}, {"key", key}}}, "get_result")
	if err != nil {
		return "", err
	}
	if found, ok := resp.get("found"); ok && found != "TRUE" {
		return "", fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	v, ok := resp.get("value")
	if !ok {
		return "", fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return v, nil
}

// call sends the request for the PMI version spoken and checks the reply;
// ctx ending interrupts it (and leaves the client unusable, since the
// reply may still come).
func (c *Client) call(ctx context.Context, what string, v2 msg, v2resp string, v1 msg, v1resp string) (msg, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return msg{}, c.broken
	}
	defer c.deadline(ctx)()
	req, want := v1, v1resp
	if c.v2 {
		req, want = v2, v2resp
	}
	resp, err := c.roundTrip(req, want)
	return resp, c.ioErr(ctx, what, err)
}

// PutBlob publishes arbitrary bytes under key, hex-encoded and split into
// chunks that fit the value limit: key.n holds the count, key.0… the parts.
func (c *Client) PutBlob(ctx context.Context, key string, data []byte) error {
	enc := hex.EncodeToString(data)
	chunk := MaxValue
	if !c.v2 {
		// PMI-1 limits the whole line, command and names included.
		chunk = min(MaxValue, maxLine-len("cmd=put kvsname= key=.999999 value=\n")-len(c.jobid)-len(key))
	}
	n := 0
	for off := 0; off < len(enc) || n == 0; off += chunk {
		part := enc[off:min(off+chunk, len(enc))]
		if err := c.Put(ctx, key+"."+strconv.Itoa(n), part); err != nil {
			return err
		}
		n++
		if off+chunk >= len(enc) {
			break
		}
	}
	return c.Put(ctx, key+".n", strconv.Itoa(n))
}

// GetBlob reads what PutBlob published.
func (c *Client) GetBlob(ctx context.Context, key string) ([]byte, error) {
	ns, err := c.Get(ctx, key+".n")
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(ns)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("%w: %s.n=%q", ErrProtocol, key, ns)
	}
	var enc []byte
	for i := 0; i < n; i++ {
		part, err := c.Get(ctx, key+"."+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		enc = append(enc, part...)
	}
	out := make([]byte, hex.DecodedLen(len(enc)))
	if _, err := hex.Decode(out, enc); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrProtocol, key, err)
	}
	return out, nil
}

// Finalize tells the launcher this process is done with PMI, and closes
// the connection.
func (c *Client) Finalize(ctx context.Context) error {
	_, err := c.call(ctx, "finalize", msg{cmd: "finalize"}, "finalize-response", msg{cmd: "finalize"}, "finalize_ack")
	return errors.Join(err, c.conn.Close())
}

// Abort asks the launcher to end the job with code.
func (c *Client) Abort(code int, text string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.v2 {
		return writeV2(c.conn, msg{"abort", []kv{{"isworld", "TRUE"}, {"msg", text}}})
	}
	return writeV1(c.conn, msg{"abort", []kv{{"exitcode", strconv.Itoa(code)}}})
}

func checkKV(key, value string) error {
	switch {
	case key == "" || len(key) > MaxKey:
		return fmt.Errorf("pmi: key %q: 1 to %d bytes", key, MaxKey)
	case len(value) > MaxValue:
		return fmt.Errorf("pmi: value for %q is %d bytes (at most %d; use PutBlob)", key, len(value), MaxValue)
	}
	for _, s := range []string{key, value} {
		for _, r := range s {
			if r == ';' || r == ' ' || r == '=' && s == key || r == '\n' || r < 0x20 {
				return fmt.Errorf("pmi: %q has characters PMI cannot carry", s)
			}
		}
	}
	return nil
}

func (c *Client) roundTrip(req msg, want string) (msg, error) {
	if !c.v2 {
		var resp msg
		err := writeV1(c.conn, req)
		if err == nil {
			resp, err = readV1(c.r)
		}
		if err == nil && resp.cmd != want {
			err = fmt.Errorf("%w: sent %s, got %s", ErrProtocol, req.cmd, resp.cmd)
		}
		if err == nil {
			err = resp.check()
		}
		return resp, err
	}
	if err := writeV2(c.conn, req); err != nil {
		return msg{}, err
	}
	resp, err := readV2(c.r)
	if err != nil {
		return msg{}, err
	}
	if resp.cmd != want {
		return resp, fmt.Errorf("%w: sent %s, got %s", ErrProtocol, req.cmd, resp.cmd)
	}
	return resp, resp.check()
}

func (c *Client) roundTripV1(req msg, want string) error {
	v2 := c.v2
	c.v2 = false
	_, err := c.roundTrip(req, want)
	c.v2 = v2
	return err
}

type deadliner interface{ SetDeadline(time.Time) error }

// deadline makes ctx's end interrupt the connection's I/O; the returned
// function undoes it.
func (c *Client) deadline(ctx context.Context) func() {
	d, ok := c.conn.(deadliner)
	if !ok {
		return func() {}
	}
	// Only once ctx is done, so that the I/O error is seen with ctx.Err set.
	stop := context.AfterFunc(ctx, func() { d.SetDeadline(time.Unix(1, 0)) })
	return func() { stop(); d.SetDeadline(time.Time{}) }
}

// ioErr prefers the context's error when the context ended the I/O.
func (c *Client) ioErr(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		c.broken = fmt.Errorf("pmi: a %s was abandoned midway (%v); the connection is unusable", what, ctx.Err())
		return fmt.Errorf("pmi: %s: %w", what, ctx.Err())
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("pmi: %s: the launcher closed the connection", what)
	}
	if errors.Is(err, ErrProtocol) || errors.Unwrap(err) != nil {
		return err
	}
	return fmt.Errorf("pmi: %s: %w", what, err)
}
