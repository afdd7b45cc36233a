//go:build linux

package fabric

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/fabric/bootstrap"
	"github.com/rivet-hpc/rivet/internal/pmi"
)

// Dynamic processes (MPI 4.1 §11.8): a communicator's members spawn a new
// job, whose processes join this one's universe — world ranks after every
// rank the spawners knew of — and the two groups get an intercommunicator.
//
// How the two jobs meet: the spawn root listens on a TCP port and hands
// the children, in the launcher's preput (spawnKey), the port's addresses,
// a secret, their first world rank and the universe's size. The children
// start as any job does (their own bootstrap, shared memory and verbs
// among themselves), then their rank 0 dials the root with the secret and
// their records — node, pid, shared-memory segment, verbs address, free
// context ids — and gets the spawners' back. Each side hands what its
// root got to its members, every process connects to the other side (the
// segments of those on its node, through /proc/<pid>/fd; verbs to the
// others), and both sides make the intercommunicator from the same three
// context ids. Nothing but the rendezvous goes through the launcher, so
// any launcher that serves PMI-2's spawn will do.

// spawnKey is the preput key of a spawn's rendezvous (spawnInfo).
const spawnKey = "rivet-spawn"

// SpawnCmd is one command of SpawnMultiple: N processes of Path with Args
// (not counting the program's name), and info keys for the launcher.
type SpawnCmd = bootstrap.SpawnCmd

// spawnInfo is what a spawn hands its children.
type spawnInfo struct {
	base, universe int
	secret         [16]byte
	addrs          []string // the spawn root's rendezvous
}

func (s *spawnInfo) encode() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d %d %x %s", s.base, s.universe, s.secret, strings.Join(s.addrs, ","))
	return hex.EncodeToString(b.Bytes()) // PMI values cannot carry spaces
}

func decodeSpawnInfo(v string) (*spawnInfo, error) {
	raw, err := hex.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("fabric: the spawn's rendezvous %q: %w", v, err)
	}
	f := strings.Fields(string(raw))
	s := &spawnInfo{}
	var e1, e2 error
	if len(f) == 4 {
		s.base, e1 = strconv.Atoi(f[0])
		s.universe, e2 = strconv.Atoi(f[1])
	}
	sec, e3 := hex.DecodeString(f[min(2, len(f)-1)])
	if len(f) != 4 || e1 != nil || e2 != nil || e3 != nil || len(sec) != len(s.secret) || s.base < 1 || s.universe <= s.base {
		return nil, fmt.Errorf("fabric: a malformed spawn rendezvous %q", raw)
	}
	copy(s.secret[:], sec)
	s.addrs = strings.Split(f[3], ",")
	return s, nil
}

// spawnedBy reads how this job was spawned, or nil if a launcher started
// it.
func spawnedBy(ctx context.Context, b bootstrap.Bootstrap) (*spawnInfo, error) {
	sp, ok := b.(bootstrap.Spawner)
	if !ok || sp.SpawnedBy() == "" {
		return nil, nil
	}
	v, err := sp.Preput(ctx, spawnKey)
	if errors.Is(err, bootstrap.ErrNotFound) {
		return nil, nil // spawned, but not by Rivet: a job of its own
	}
	if err != nil {
		return nil, err
	}
	info, err := decodeSpawnInfo(v)
	if err != nil {
		return nil, err
	}
	// The launcher may number the processes itself (rivetrun: from the
	// next rank free, past processes spawned that never joined).
	if v, err := sp.Preput(ctx, pmi.UniverseBaseKey); err == nil {
		if b, err := strconv.Atoi(v); err == nil && b >= info.base {
			info.base = b
		}
	}
	if info.base+b.Size() > info.universe {
		return nil, fmt.Errorf("fabric: a spawn of %d processes from world rank %d overflows a universe of %d", b.Size(), info.base, info.universe)
	}
	return info, nil
}

// UniverseEnv sets the universe's size (WithUniverse).
const UniverseEnv = "RIVET_UNIVERSE_SIZE"

// universeOf is the universe size the launcher gives, 0 if none.
func universeOf(ctx context.Context, b bootstrap.Bootstrap) int {
	if sp, ok := b.(bootstrap.Spawner); ok {
		return sp.UniverseSize(ctx)
	}
	return 0
}

// WithUniverse sets how many processes the job may grow to by spawning,
// its own included (MPI_UNIVERSE_SIZE): every world rank a spawn gives is
// below it, and the shared-memory segments keep a ring for each. The
// largest of it, the launcher's universe size (rivetrun -universe,
// mpiexec -usize) and the job's size wins; RIVET_UNIVERSE_SIZE sets the
// same.
func WithUniverse(n int) Option { return func(o *options) { o.universe = n } }

// offsetBoot is a spawned job's bootstrap as the endpoint uses it: its
// ranks are world ranks, the job's own shifted by base.
type offsetBoot struct {
	bootstrap.Bootstrap
	base int
}

func (b offsetBoot) Rank() int { return b.Bootstrap.Rank() + b.base }
func (b offsetBoot) Get(ctx context.Context, rank int, key string) ([]byte, error) {
	return b.Bootstrap.Get(ctx, rank-b.base, key)
}

// JobID is the launcher's name for the job, if it has one.
func (b offsetBoot) JobID() string {
	if j, ok := b.Bootstrap.(bootstrap.JobNamer); ok {
		return j.JobID()
	}
	return ""
}

// keepBoot is a bootstrap whose Close is left to someone else.
type keepBoot struct{ bootstrap.Bootstrap }

func (keepBoot) Close() error { return nil }

func rankRange(from, n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = from + i
	}
	return r
}

// Joined lists the world ranks this process reaches, itself included, in
// order: its job's, and those of every job a spawn joined to it (or that
// spawned it). A failure detector's ring runs over them.
func (ep *Endpoint) Joined() []int {
	ep.e.mu.Lock()
	defer ep.e.mu.Unlock()
	return slices.Clone(ep.e.joined())
}

// UniverseSize is how many world ranks the universe has room for: every
// rank a spawn gives is below it (MPI_UNIVERSE_SIZE).
func (ep *Endpoint) UniverseSize() int { return ep.size }

// Parent is the intercommunicator to the processes that spawned this job
// (MPI_Comm_get_parent): its remote group is the spawning communicator's
// group. nil if a launcher started this job.
func (ep *Endpoint) Parent() *Comm { return ep.parent }

// Spawn starts n processes of cmd with args (not counting the program's
// name) as a new job through the launcher (MPI_Comm_spawn), and returns
// the intercommunicator between c's group and theirs; in the children,
// Endpoint.Parent returns its other side. Only root's cmd, args and n
// matter. Collective over c. The children take the world ranks after
// every rank c's members know of, and must fit the universe
// (WithUniverse). Under ULFM's semantics (MPI 4.1 §16.2.4): a failure
// may make Spawn raise at some members and succeed at others; if it
// raises at root, nothing was spawned that the members can reach; a
// member waiting for root learns of root's failure and raises; a child
// that cannot reach its spawners ends its Init with an error.
func (c *Comm) Spawn(ctx context.Context, root int, cmd string, args []string, n int) (*Comm, error) {
	return c.SpawnMultiple(ctx, root, []SpawnCmd{{Path: cmd, Args: args, N: n}})
}

// SpawnMultiple is Spawn of several commands (MPI_Comm_spawn_multiple):
// their processes are one job, numbered in the commands' order.
func (c *Comm) SpawnMultiple(ctx context.Context, root int, cmds []SpawnCmd) (*Comm, error) {
	if err := c.valid(); err != nil {
		return nil, err
	}
	if c.inter != nil {
		return nil, errInter("Spawn")
	}
	if root < 0 || root >= c.Size() {
		return nil, fmt.Errorf("%w: spawn root %d in a communicator of %d", ErrRank, root, c.Size())
	}
	ep := c.ep
	ep.createMu.Lock()
	defer ep.createMu.Unlock()

	// Every member's record, and the next free world rank any knows of.
	mine, err := ep.record()
	if err != nil {
		return nil, err
	}
	all, err := c.allgatherInternal(ctx, allRanks(c.Size()), tagSpawnRecord, mine)
	if err != nil {
		return nil, err
	}
	ours := make([]*record, len(all))
	for i, b := range all {
		if ours[i], err = parseRecord(b); err != nil {
			return nil, err
		}
	}

	// The root spawns and meets the children; the members hear how it went.
	var theirs []byte
	// The children join only if the root's Spawn succeeds (MPI 4.1
	// §16.2.4): their rank 0 waits for its word, which the root gives as
	// it returns.
	var children net.Conn
	succeeded := false
	defer func() {
		if children != nil {
			word := []byte{0}
			if succeeded {
				word[0] = 1
			}
			children.Write(word)
			children.Close()
		}
	}()
	if c.rank == root {
		var rerr error
		theirs, children, rerr = c.spawnRoot(ctx, cmds, ours, all)
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(theirs)))
		var reqs []Request
		for r := range c.Size() {
			if r != c.rank {
				reqs = append(reqs, c.isend(n[:], r, tagSpawnLen, c.ctxMgmt()))
				if rerr == nil {
					reqs = append(reqs, c.isend(theirs, r, tagSpawnRecords, c.ctxMgmt()))
				}
			}
		}
		if err := WaitAll(ctx, reqs, nil); rerr == nil && err != nil {
			rerr = err
		}
		if rerr == nil && testHookSpawnRoot != nil {
			testHookSpawnRoot()
		}
		if rerr != nil {
			return nil, rerr
		}
	} else {
		if theirs, err = c.recvSized(ctx, root, tagSpawnLen, tagSpawnRecords); err != nil {
			return nil, err
		}
		if theirs == nil {
			return nil, fmt.Errorf("fabric: the spawn failed at its root (rank %d)", root)
		}
	}
	kids, err := parseRecords(theirs)
	if err != nil {
		return nil, err
	}
	ic, err := ep.joinSpawned(c.ranks, ours, kids, true)
	succeeded = err == nil
	return ic, err
}

// The internal tags of a spawn, on the spawning communicator's (or the
// children's world's) management context: above IntercommCreate's.
const (
	tagSpawnRecord = 70 + iota
	tagSpawnLen
	tagSpawnRecords
)

// recvSized receives a length on lenTag, then that many bytes on tag,
// from rank src of c's management context; nil for a length of 0 (the
// sender's way of saying it failed).
func (c *Comm) recvSized(ctx context.Context, src, lenTag, tag int) ([]byte, error) {
	var n [8]byte
	if _, err := c.recvInternal(ctx, n[:], src, lenTag); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size == 0 {
		return nil, nil
	}
	if size > 64<<20 {
		return nil, fmt.Errorf("%w: a spawn's records of %d bytes", ErrInvalid, size)
	}
	b := make([]byte, size)
	if _, err := c.recvInternal(ctx, b, src, tag); err != nil {
		return nil, err
	}
	return b, nil
}

// testHookSpawned, if set, runs at a spawn's root once the launcher has
// started the children, before they dial in.
var testHookSpawned func()

// testHookSpawnRoot, if set, runs at a spawn's root once the members have
// the children's records, before the children hear that the spawn
// succeeded: tests kill the root there.
var testHookSpawnRoot func()

// spawnRoot spawns cmds, waits for the children's rank 0 to dial in,
// trades the records and returns the children's, and the connection on
// which the children wait for the root's last word.
func (c *Comm) spawnRoot(ctx context.Context, cmds []SpawnCmd, ours []*record, raw [][]byte) (_ []byte, _ net.Conn, err error) {
	ep := c.ep
	sp, ok := ep.boot.(bootstrap.Spawner)
	if !ok {
		return nil, nil, fmt.Errorf("fabric: spawn: the launcher (%s) does not spawn processes: %w", ep.boot.Launcher(), ErrNotSupported)
	}
	total := 0
	for _, cmd := range cmds {
		if cmd.N < 1 || cmd.Path == "" {
			return nil, nil, fmt.Errorf("%w: spawn of %d processes of %q", ErrInvalid, cmd.N, cmd.Path)
		}
		total += cmd.N
	}
	base := 0
	for _, r := range ours {
		base = max(base, r.next)
	}
	if base+total > ep.size {
		return nil, nil, fmt.Errorf("fabric: spawn: %d more processes from world rank %d do not fit a universe of %d (WithUniverse, rivetrun -universe, mpiexec -usize): %w",
			total, base, ep.size, ErrNotSupported)
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, nil, fmt.Errorf("fabric: spawn: %w", err)
	}
	defer ln.Close()
	info := spawnInfo{base: base, universe: ep.size, addrs: rendezvousAddrs(ln.Addr().(*net.TCPAddr).Port)}
	if _, err := randRead(info.secret[:]); err != nil {
		return nil, nil, err
	}
	preput := map[string]string{spawnKey: info.encode(), pmi.UniverseBaseKey: strconv.Itoa(base)}
	if _, err := sp.Spawn(ctx, cmds, preput); err != nil {
		return nil, nil, fmt.Errorf("fabric: spawn: %w", err)
	}
	if testHookSpawned != nil {
		testHookSpawned()
	}
	// The children's rank 0 dials in; the failure of any child before it
	// does ends the wait (a launcher under -ft tells of it).
	conn, err := ep.acceptChild(ctx, ln, base, total)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			conn.Close()
		}
	}()
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	var sec [16]byte
	if _, err := io.ReadFull(conn, sec[:]); err != nil || subtle.ConstantTimeCompare(sec[:], info.secret[:]) != 1 {
		return nil, nil, fmt.Errorf("fabric: spawn: the children's rank 0 did not say the secret (%v)", err)
	}
	kids, err := readBlob(conn)
	if err != nil {
		return nil, nil, fmt.Errorf("fabric: spawn: reading the children's records: %w", err)
	}
	if kids == nil {
		return nil, nil, fmt.Errorf("fabric: spawn: the children could not start (a child failed in Init)")
	}
	if err := writeBlob(conn, bytes.Join(raw, nil)); err != nil {
		return nil, nil, fmt.Errorf("fabric: spawn: %w", err)
	}
	return kids, conn, nil
}

// acceptChild waits for the children's rank 0, or for any of world ranks
// base to base+n-1 to be known failed, or for ctx.
func (ep *Endpoint) acceptChild(ctx context.Context, ln net.Listener, base, n int) (net.Conn, error) {
	tl := ln.(*net.TCPListener)
	for {
		tl.SetDeadline(time.Now().Add(20 * time.Millisecond))
		conn, err := tl.Accept()
		if err == nil {
			return conn, nil
		}
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			return nil, fmt.Errorf("fabric: spawn: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("fabric: spawn: waiting for the children: %w", err)
		}
		ep.Poll()
		for w := base; w < base+n; w++ {
			if err := ep.Failure(w); errors.Is(err, ErrProcFailed) {
				return nil, fmt.Errorf("fabric: spawn: a child failed before it joined: %w", err)
			}
		}
	}
}

// rendezvousAddrs lists where children may dial this process: its
// interfaces' addresses, loopback last.
func rendezvousAddrs(port int) []string {
	var out, lo []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ip, ok := a.(*net.IPNet)
		if !ok || ip.IP.IsLinkLocalUnicast() {
			continue
		}
		s := net.JoinHostPort(ip.IP.String(), strconv.Itoa(port))
		if ip.IP.IsLoopback() {
			lo = append(lo, s)
		} else {
			out = append(out, s)
		}
	}
	if len(out)+len(lo) == 0 {
		lo = []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	}
	return append(out, lo...)
}

func writeBlob(w io.Writer, b []byte) error {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

// readBlob reads what writeBlob wrote; nil for an empty blob.
func readBlob(r io.Reader) ([]byte, error) {
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size == 0 {
		return nil, nil
	}
	if size > 64<<20 {
		return nil, fmt.Errorf("%w: a blob of %d bytes", ErrInvalid, size)
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return b, err
}

// joinParent is the children's side, at the end of Init: rank 0 dials
// the spawn root, and every child connects to the spawners and makes
// Parent.
func (ep *Endpoint) joinParent(ctx context.Context) error {
	info := ep.parentInfo
	w := ep.world
	mine, err := ep.record()
	if err != nil {
		return err
	}
	all, aerr := w.allgatherInternal(ctx, allRanks(w.Size()), tagSpawnRecord, mine)
	var ours []*record
	for _, b := range all {
		r, err := parseRecord(b)
		if err != nil {
			aerr = err
			break
		}
		ours = append(ours, r)
	}
	if aerr != nil && w.rank != 0 {
		return fmt.Errorf("fabric: joining the spawners: %w", aerr)
	}
	var theirs []byte
	if w.rank == 0 {
		// Rank 0 dials the root whatever happened here, and tells it.
		var sent []byte
		if aerr == nil {
			sent = bytes.Join(all, nil)
		}
		var rerr error
		theirs, rerr = dialSpawner(ctx, info, sent)
		if aerr != nil {
			rerr = fmt.Errorf("fabric: joining the spawners: %w", aerr)
		}
		var n [8]byte
		if rerr == nil {
			binary.LittleEndian.PutUint64(n[:], uint64(len(theirs)))
		}
		var reqs []Request
		for r := 1; r < w.Size(); r++ {
			reqs = append(reqs, w.isend(n[:], r, tagSpawnLen, w.ctxMgmt()))
			if rerr == nil {
				reqs = append(reqs, w.isend(theirs, r, tagSpawnRecords, w.ctxMgmt()))
			}
		}
		if err := WaitAll(ctx, reqs, nil); rerr == nil && err != nil {
			rerr = err
		}
		if rerr != nil {
			return rerr
		}
	} else {
		if theirs, err = w.recvSized(ctx, 0, tagSpawnLen, tagSpawnRecords); err != nil {
			return fmt.Errorf("fabric: joining the spawners: %w", err)
		}
		if theirs == nil {
			return fmt.Errorf("fabric: joining the spawners: rank 0 could not reach them")
		}
	}
	parents, err := parseRecords(theirs)
	if err != nil {
		return err
	}
	ep.createMu.Lock()
	defer ep.createMu.Unlock()
	ic, err := ep.joinSpawned(ep.world.ranks, ours, parents, false)
	if err != nil {
		return err
	}
	ep.parent = ic
	return nil
}

// dialSpawner is the children's rank 0 meeting the spawn root: it sends
// the secret and the children's records, and returns the spawners'.
func dialSpawner(ctx context.Context, info *spawnInfo, ours []byte) ([]byte, error) {
	var conn net.Conn
	var errs []error
	for _, a := range info.addrs {
		d := net.Dialer{Timeout: 2 * time.Second}
		c, err := d.DialContext(ctx, "tcp", a)
		if err == nil {
			conn = c
			break
		}
		errs = append(errs, err)
	}
	if conn == nil {
		return nil, fmt.Errorf("fabric: reaching the spawn root at %v: %w", info.addrs, errors.Join(errs...))
	}
	defer conn.Close()
	// The root answers at once, or is gone: its kernel resets the
	// connection. Only a root whose node died leaves it to the deadline.
	deadline := time.Now().Add(time.Minute)
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	conn.SetDeadline(deadline)
	if _, err := conn.Write(info.secret[:]); err != nil {
		return nil, err
	}
	if err := writeBlob(conn, ours); err != nil || ours == nil {
		return nil, err
	}
	theirs, err := readBlob(conn)
	if err != nil {
		return nil, fmt.Errorf("fabric: the spawn root's records: %w", err)
	}
	if theirs == nil {
		return nil, fmt.Errorf("fabric: the spawn root sent no records")
	}
	// The root's last word: whether its Spawn succeeded. Nothing (the
	// root died) is a no.
	conn.SetDeadline(time.Time{})
	word := make([]byte, 1)
	if _, err := io.ReadFull(&ctxReader{ctx, conn}, word); err != nil || word[0] != 1 {
		return nil, fmt.Errorf("fabric: the spawn failed at its root (%v): the children leave", err)
	}
	return theirs, nil
}

// ctxReader reads from a connection until ctx ends.
type ctxReader struct {
	ctx  context.Context
	conn net.Conn
}

func (r *ctxReader) Read(b []byte) (int, error) {
	for {
		r.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := r.conn.Read(b)
		if ne, ok := err.(net.Error); ok && ne.Timeout() && n == 0 {
			if err := r.ctx.Err(); err != nil {
				return 0, err
			}
			continue
		}
		return n, err
	}
}

// A record is what a process of one side of a spawn tells the other:
// where it is and how to reach it, and what any new communicator with it
// must avoid.
type record struct {
	world   int
	pid     int
	next    int    // the next world rank free as it knows
	node    string // its node key
	shm     string // its segment (FDPath), "" if none
	verbs   []byte // its verbs address, nil if none
	beat    string // its heartbeat thread (its "beat" key)
	ids     idMask // its free context ids
	lastGen uint64
}

// record is this process's.
func (ep *Endpoint) record() ([]byte, error) {
	var b bytes.Buffer
	le := binary.LittleEndian
	put := func(v uint64) { b.Write(le.AppendUint64(nil, v)) }
	putStr := func(s []byte) { put(uint64(len(s))); b.Write(s) }
	put(uint64(ep.rank))
	put(uint64(os.Getpid()))
	put(uint64(ep.nextWorld()))
	node := nodeKey()
	if ep.opts.node != "" {
		node = ep.opts.node
	}
	putStr([]byte(node))
	var shmPath, addr []byte
	if ep.shm != nil {
		shmPath = []byte(ep.shm.FDPath())
	}
	if ep.verbs != nil {
		addr = ep.verbs.Address()
	}
	putStr(shmPath)
	putStr(addr)
	putStr(ep.beatID())
	ep.idMu.Lock()
	ids := ep.ids
	ep.idMu.Unlock()
	for _, w := range ids {
		put(w)
	}
	put(ep.lastGen)
	// Fixed length: allgatherInternal trades equal lengths.
	if b.Len() > recordSize {
		return nil, fmt.Errorf("fabric: a spawn record of %d bytes (node key %q)", b.Len(), node)
	}
	out := make([]byte, recordSize)
	copy(out, b.Bytes())
	return out, nil
}

// recordSize is every record's length.
const recordSize = 2048

func parseRecord(b []byte) (*record, error) {
	if len(b) != recordSize {
		return nil, fmt.Errorf("%w: a spawn record of %d bytes", ErrInvalid, len(b))
	}
	le := binary.LittleEndian
	off := 0
	bad := false
	get := func() uint64 {
		if off+8 > len(b) {
			bad = true
			return 0
		}
		v := le.Uint64(b[off:])
		off += 8
		return v
	}
	getStr := func() []byte {
		n := int(get())
		if n < 0 || off+n > len(b) {
			bad = true
			return nil
		}
		s := b[off : off+n]
		off += n
		return s
	}
	r := &record{world: int(get()), pid: int(get()), next: int(get())}
	r.node = string(getStr())
	r.shm = string(getStr())
	if v := getStr(); len(v) > 0 {
		r.verbs = slices.Clone(v)
	}
	r.beat = string(getStr())
	for i := range r.ids {
		r.ids[i] = get()
	}
	r.lastGen = get()
	if bad {
		return nil, fmt.Errorf("%w: a malformed spawn record", ErrInvalid)
	}
	return r, nil
}

func parseRecords(b []byte) ([]*record, error) {
	if len(b) == 0 || len(b)%recordSize != 0 {
		return nil, fmt.Errorf("%w: spawn records of %d bytes", ErrInvalid, len(b))
	}
	var out []*record
	for off := 0; off < len(b); off += recordSize {
		r, err := parseRecord(b[off : off+recordSize])
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// nextWorld is the next world rank free as this process knows: after its
// job's, and after every rank it has met since.
func (ep *Endpoint) nextWorld() int {
	ep.e.mu.Lock()
	defer ep.e.mu.Unlock()
	n := ep.base + ep.jobSize
	for w, p := range ep.e.route {
		if p != nil {
			n = max(n, w+1)
		}
	}
	return n
}

// joinSpawned connects this process to the other side of a spawn and
// makes the intercommunicator: local are this side's world ranks (its
// records ours), remote the other side's records; first says this side
// (the spawners) comes first in the bridge. With createMu held.
func (ep *Endpoint) joinSpawned(local []int, ours, theirs []*record, first bool) (*Comm, error) {
	mine := nodeKey()
	if ep.opts.node != "" {
		mine = ep.opts.node
	}
	remote := make([]int, len(theirs))
	var and idMask
	for i := range and {
		and[i] = ^uint64(0)
	}
	gen := uint64(0)
	for _, r := range slices.Concat(ours, theirs) {
		for i := range and {
			and[i] &= r.ids[i]
		}
		gen = max(gen, r.lastGen)
	}
	e := ep.e
	e.mu.Lock()
	for i, r := range theirs {
		w := r.world
		remote[i] = w
		if w < 0 || w >= ep.size || w == ep.rank || slices.Contains(local, w) {
			e.mu.Unlock()
			return nil, fmt.Errorf("%w: a spawn's process names world rank %d (a universe of %d)", ErrRank, w, ep.size)
		}
		if e.route[w] != nil {
			continue // met already (an earlier spawn's, merged since)
		}
		if err := ep.reach(w, r, r.node == mine); err != nil {
			e.mu.Unlock()
			return nil, err
		}
	}
	e.all = nil // (joined anew)
	e.mu.Unlock()
	return ep.makeInter(local, remote, first, &and, gen)
}

// reach connects to world rank w, which joined the universe after Init,
// as its record says: through its segment if it is on this node (and
// this process shares memory with its node), else over verbs; and
// watches its pid if it is on this node. With e.mu held.
func (ep *Endpoint) reach(w int, r *record, here bool) error {
	e := ep.e
	if n, ok := ep.nodeKeys[r.node]; ok {
		ep.nodeOf[w] = n
	} else if ep.nodeOf != nil {
		ep.nodeKeys[r.node] = len(ep.nodeKeys)
		ep.nodeOf[w] = ep.nodeKeys[r.node]
	}
	switch {
	case here && ep.shm != nil && r.shm != "" && ep.opts.provider != "verbs":
		if err := ep.shm.Add(ep.rank, w, r.shm, r.pid); err != nil {
			if errors.Is(err, fs.ErrNotExist) || unix.Kill(r.pid, 0) == unix.ESRCH {
				// Its descriptors are gone (it exited, or is a zombie)
				// — the spawn returned at other members, and it
				// finished or failed — before this process reached it:
				// a peer that left, not an error of the spawn.
				e.markFailedNow(w, fmt.Errorf("%w: world rank %d left before this process reached it", ErrClosed, w))
				return nil
			}
			return err
		}
		e.route[w] = ep.shm
	case ep.verbs != nil && len(r.verbs) > 0:
		if err := ep.verbs.AddPeer(w, r.verbs); err != nil {
			return err
		}
		e.route[w] = ep.verbs
	default:
		return fmt.Errorf("fabric: world rank %d joined, but nothing reaches it (same node %v, its segment %q, its verbs address %d bytes, this process's verbs provider %v): %w",
			w, here, r.shm, len(r.verbs), ep.verbs != nil, ErrNoRoute)
	}
	if here {
		// The detector asks this node's kernel about a process here
		// before a verdict, rather than judge it by its reads.
		ep.addBeatID(w, r.pid, r.beat)
	}
	if here && ep.opts.sources&SourcePidfd != 0 {
		if e.health == nil {
			e.health = &health{}
		}
		e.health.watch(w, r.pid)
	}
	return nil
}

// watch adds process pid, world rank w, to those watched.
func (h *health) watch(w, pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	unix.CloseOnExec(fd)
	h.pfds = append(h.pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	h.world = append(h.world, w)
}
