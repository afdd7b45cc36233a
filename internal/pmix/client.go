package pmix

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
)

// ErrNoServer means the environment names no PMIx server: the process
// was not started by one.
var ErrNoServer = errors.New("pmix: not started by a PMIx server (no PMIX_NAMESPACE)")

// ErrNotFound is wrapped by Get's error when the rank put nothing under
// the key.
var ErrNotFound = errors.New("pmix: not found")

// Commands a client sends (openpmix's pmix_cmd_t).
const (
	cmdReq      = 0 // job data
	cmdCommit   = 2
	cmdFence    = 3
	cmdGet      = 4
	cmdFinalize = 5
)

// Scopes of a put (pmix_scope_t).
const scopeGlobal = 3

// Keys of the job data (the standard's attribute names).
const (
	KeyJobSize      = "pmix.job.size"
	KeyHostname     = "pmix.hname"
	KeyNodeID       = "pmix.nodeid"
	KeyLocalPeers   = "pmix.lpeers"
	KeyNodeArray    = "pmix.node.arr"
	keyProcBlob     = "pmix.pblob"
	keyUnivSize     = "pmix.univ.size"
	keySessionArray = "pmix.ssn.arr"
	keyCollect      = "pmix.collect"
)

// Client is one process's connection to its PMIx server. Its methods are
// safe for concurrent use; they are serialized.
type Client struct {
	mu     sync.Mutex
	c      net.Conn
	me     Proc
	server Proc
	pindex uint32
	tag    uint32
	broken error // set when a request was abandoned midway

	size  int
	job   map[string]Value            // job-level data
	nodes [][]Info                    // one array of node-level data a node
	procs map[uint32]map[string]Value // per-process job data

	puts  []Info                      // put since the last commit
	cache map[uint32]map[string]Value // what Get fetched since the last fence
}

// FromEnv connects to the server named by the environment an openpmix
// server (Open MPI's mpirun, PRRTE, Slurm's mpi/pmix) gives the processes
// it starts, and reads the job's data. It returns ErrNoServer when
// PMIX_NAMESPACE is not set.
func FromEnv(ctx context.Context) (*Client, error) {
	ns := os.Getenv("PMIX_NAMESPACE")
	if ns == "" {
		return nil, ErrNoServer
	}
	rank, err := strconv.ParseUint(os.Getenv("PMIX_RANK"), 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pmix: PMIX_NAMESPACE is set but PMIX_RANK=%q is not a rank", os.Getenv("PMIX_RANK"))
	}
	security, err := securityModule(os.Getenv("PMIX_SECURITY_MODE"))
	if err != nil {
		return nil, err
	}
	server, network, addr, err := serverURI()
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("pmix: the server %s.%d at %s: %w", server.Nspace, server.Rank, addr, err)
	}
	cl, err := Connect(ctx, c, Proc{Nspace: ns, Rank: uint32(rank)}, security)
	if err != nil {
		c.Close()
		return nil, err
	}
	cl.server = server
	return cl, nil
}

// Connect initializes as process me over c, a connection to a PMIx
// server, with the given security module ("native" or "none"): the
// handshake, then the job's data. On error the caller closes c.
func Connect(ctx context.Context, c net.Conn, me Proc, security string) (*Client, error) {
	done := deadline(ctx, c)
	defer done()
	pindex, err := handshake(c, me, security)
	if err != nil {
		return nil, ioErr(ctx, "handshake", err)
	}
	cl := &Client{c: c, me: me, pindex: pindex, tag: firstTag}
	e := newRequest(cmdReq)
	p, err := cl.roundTrip(ctx, "job data request", e.b)
	if err != nil {
		return nil, err
	}
	if err := cl.jobData(p); err != nil {
		return nil, err
	}
	return cl, nil
}

// jobData reads the answer to the job data request: the namespace, then
// key-values until the message ends, among them one blob of each
// process's own data.
func (cl *Client) jobData(p []byte) error {
	d := decoder{b: p}
	var ns string
	d.one("namespace", func() { ns = d.str() })
	if d.err == nil && ns != cl.me.Nspace {
		return fmt.Errorf("%w: job data for namespace %q, not %q", ErrProtocol, ns, cl.me.Nspace)
	}
	cl.job = map[string]Value{}
	cl.procs = map[uint32]map[string]Value{}
	for !d.empty() && d.err == nil {
		kv := d.kval()
		switch {
		case d.err != nil:
		case kv.Key == keyProcBlob:
			b, ok := kv.Value.V.([]byte)
			if !ok {
				d.fail("%s of type %d", keyProcBlob, kv.Value.Type)
				break
			}
			rank, vals, err := procData(b)
			if err != nil {
				return err
			}
			cl.procs[rank] = vals
		case kv.Key == KeyNodeArray:
			infos, _ := kv.Value.V.([]Info)
			cl.nodes = append(cl.nodes, infos)
		default:
			cl.job[kv.Key] = kv.Value
		}
	}
	if d.err != nil {
		return fmt.Errorf("pmix: job data: %w", d.err)
	}
	size, ok := cl.job[KeyJobSize].Uint()
	if !ok || size < 1 || size > 1<<31 {
		return fmt.Errorf("%w: the job data gives no %s (%+v)", ErrProtocol, KeyJobSize, cl.job[KeyJobSize])
	}
	if uint64(cl.me.Rank) >= size {
		return fmt.Errorf("%w: rank %d in a job of %d", ErrProtocol, cl.me.Rank, size)
	}
	cl.size = int(size)
	return nil
}

// procData reads one process's blob: its rank, then its key-values.
func procData(b []byte) (uint32, map[string]Value, error) {
	d := decoder{b: b}
	var rank uint32
	d.one("rank", func() { rank = d.uint32() })
	vals := map[string]Value{}
	for !d.empty() && d.err == nil {
		kv := d.kval()
		vals[kv.Key] = kv.Value
	}
	if d.err != nil {
		return 0, nil, fmt.Errorf("pmix: job data of a process: %w", d.err)
	}
	return rank, vals, nil
}

// Rank is this process's rank in its job.
func (cl *Client) Rank() int { return int(cl.me.Rank) }

// Size is the number of processes in the job.
func (cl *Client) Size() int { return cl.size }

// Nspace is the job's namespace: the server's name for it.
func (cl *Client) Nspace() string { return cl.me.Nspace }

// Server names the server (its namespace and rank), as PMIX_SERVER_URI*
// did; zero after Connect.
func (cl *Client) Server() Proc { return cl.server }

// Job returns the job-level value under key, from the data the server
// sent at connect.
func (cl *Client) Job(key string) (Value, bool) {
	v, ok := cl.job[key]
	return v, ok
}

// Proc returns what the server's job data says of one process under key
// (its host, node, local rank…).
func (cl *Client) Proc(rank int, key string) (Value, bool) {
	v, ok := cl.procs[uint32(rank)][key]
	return v, ok
}

// UniverseSize is the session's size the server gives (pmix.univ.size:
// the slots the job may grow into), 0 if it gives none.
func (cl *Client) UniverseSize() int {
	v, ok := cl.job[keyUnivSize]
	if !ok {
		infos, _ := cl.job[keySessionArray].V.([]Info)
		for _, in := range infos {
			if in.Key == keyUnivSize {
				v, ok = in.Value, true
			}
		}
	}
	if n, isUint := v.Uint(); ok && isUint && n < 1<<31 {
		return int(n)
	}
	return 0
}

// Nodes returns the node-level arrays of the job data, one a node.
func (cl *Client) Nodes() [][]Info { return cl.nodes }

// Put stages value under key for Commit; a later Put of the key
// replaces it.
func (cl *Client) Put(key string, value []byte) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	v := Info{Key: key, Value: Value{Type: ByteObject, V: append([]byte(nil), value...)}}
	for i := range cl.puts {
		if cl.puts[i].Key == key {
			cl.puts[i] = v
			return
		}
	}
	cl.puts = append(cl.puts, v)
}

// Commit sends what was put since the last commit to the server, for
// every process of the job (global scope).
func (cl *Client) Commit(ctx context.Context) error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var kvs encoder
	for _, kv := range cl.puts {
		kvs.count(1)
		kvs.str(kv.Key)
		if err := kvs.value(kv.Value); err != nil {
			return err
		}
	}
	e := newRequest(cmdCommit)
	e.count(1)
	e.u8(scopeGlobal)
	e.count(1)
	e.u8(bufNonDesc)
	e.bytes(kvs.b)
	if err := cl.request(ctx, "commit", e.b); err != nil {
		return err
	}
	cl.puts = nil
	return nil
}

// Fence waits until every process of the job has entered it, with data
// collection: after it, Get finds what every process committed before.
func (cl *Client) Fence(ctx context.Context) error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	e := newRequest(cmdFence)
	e.count(1)
	e.uvarint(1) // one proc: the whole job
	e.count(1)
	e.proc(cl.me.Nspace, RankWildcard)
	e.count(1)
	e.uvarint(1) // one info
	e.count(1)
	if err := e.info(Info{Key: keyCollect, Value: Value{Type: Bool, V: true}}); err != nil {
		return err
	}
	if err := cl.request(ctx, "fence", e.b); err != nil {
		return err
	}
	cl.cache = nil
	return nil
}

// Get returns what rank committed under key before the last Fence. The
// server answers with everything the rank committed, which later Gets of
// that rank read without asking again.
func (cl *Client) Get(ctx context.Context, rank int, key string) ([]byte, error) {
	if rank < 0 || rank >= cl.size {
		return nil, fmt.Errorf("pmix: rank %d is not in a job of %d", rank, cl.size)
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	r := uint32(rank)
	if _, ok := cl.cache[r]; !ok {
		if err := cl.fetch(ctx, r, key); err != nil {
			return nil, err
		}
	}
	v, ok := cl.cache[r][key]
	if !ok {
		return nil, fmt.Errorf("pmix: rank %d committed nothing under %q: %w", rank, key, ErrNotFound)
	}
	b, ok := v.V.([]byte)
	if !ok {
		return nil, fmt.Errorf("pmix: rank %d's %q is of data type %d, not a byte object", rank, key, v.Type)
	}
	return b, nil
}

// fetch asks the server for rank's committed data and caches it.
func (cl *Client) fetch(ctx context.Context, rank uint32, key string) error {
	e := newRequest(cmdGet)
	e.count(1)
	e.str(cl.me.Nspace)
	e.count(1)
	e.uvarint(uint64(rank))
	e.count(1)
	e.uvarint(0) // no infos
	e.count(1)
	e.str(key)
	p, err := cl.roundTrip(ctx, "get", e.b)
	if err != nil {
		return err
	}
	d := decoder{b: p}
	var st int32
	d.one("status", func() { st = d.int32() })
	if d.err == nil && st != 0 {
		if st == StatusNotFound {
			return fmt.Errorf("pmix: rank %d committed nothing under %q: %w", rank, key, ErrNotFound)
		}
		return &StatusError{Op: "get", Status: st}
	}
	if cl.cache == nil {
		cl.cache = map[uint32]map[string]Value{}
	}
	cl.cache[rank] = map[string]Value{}
	for !d.empty() && d.err == nil {
		var b []byte
		d.one("process data", func() { b = d.bytes() })
		if d.err != nil {
			break
		}
		bd := decoder{b: b}
		var p Proc
		bd.one("process", func() { p = bd.proc() })
		vals := map[string]Value{}
		for !bd.empty() && bd.err == nil {
			kv := bd.kval()
			vals[kv.Key] = kv.Value
		}
		if bd.err != nil {
			return fmt.Errorf("pmix: get: %w", bd.err)
		}
		if p.Rank == RankUndef {
			p.Rank = rank
		}
		cl.cache[p.Rank] = vals
	}
	if d.err != nil {
		return fmt.Errorf("pmix: get: %w", d.err)
	}
	return nil
}

// Finalize tells the server this process is done, waits for its
// acknowledgement and closes the connection. A server that does not hear
// it treats the process's exit as a failure of the job.
func (cl *Client) Finalize(ctx context.Context) error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	e := newRequest(cmdFinalize)
	err := cl.request(ctx, "finalize", e.b)
	if cerr := cl.c.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("pmix: %w", cerr)
	}
	if cl.broken == nil {
		cl.broken = errors.New("pmix: finalized")
	}
	return err
}

// request sends p and reads an answer that is a status alone.
func (cl *Client) request(ctx context.Context, op string, p []byte) error {
	ans, err := cl.roundTrip(ctx, op, p)
	if err != nil {
		return err
	}
	d := decoder{b: ans}
	var st int32
	d.one("status", func() { st = d.int32() })
	if d.err != nil {
		return fmt.Errorf("pmix: %s: %w", op, d.err)
	}
	if st != 0 {
		return &StatusError{Op: op, Status: st}
	}
	return nil
}

// roundTrip sends p under a new tag and returns the answer with that tag,
// skipping what the server sends unasked (event notifications).
func (cl *Client) roundTrip(ctx context.Context, op string, p []byte) ([]byte, error) {
	if cl.broken != nil {
		return nil, cl.broken
	}
	done := deadline(ctx, cl.c)
	defer done()
	tag := cl.tag
	cl.tag++
	if err := writeMsg(cl.c, cl.pindex, tag, p); err != nil {
		return nil, cl.fail(ctx, op, err)
	}
	for {
		t, ans, err := readMsg(cl.c)
		if err != nil {
			return nil, cl.fail(ctx, op, err)
		}
		if t == tag {
			return ans, nil
		}
		if t >= firstTag {
			return nil, cl.fail(ctx, op, fmt.Errorf("%w: an answer with tag %d to a request with tag %d", ErrProtocol, t, tag))
		}
	}
}

// fail marks the connection unusable (a request is left half done) and
// returns err for op, preferring the context's error.
func (cl *Client) fail(ctx context.Context, op string, err error) error {
	err = ioErr(ctx, op, err)
	cl.broken = fmt.Errorf("pmix: a %s failed midway (%v); the connection is unusable", op, err)
	return err
}

// ioErr names what ended op's I/O: the context, the server hanging up, or
// the error itself.
func ioErr(ctx context.Context, op string, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("pmix: %s: %w", op, context.Cause(ctx))
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("pmix: %s: the server closed the connection (it exited, or ended the job)", op)
	case errors.Is(err, ErrProtocol):
		return fmt.Errorf("pmix: %s: %w", op, err)
	}
	var se *StatusError
	if errors.As(err, &se) {
		return err
	}
	return fmt.Errorf("pmix: %s: %w", op, err)
}
