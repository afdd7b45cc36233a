//go:build linux

package fabric

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"time"

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
			return nil, fmt.Errorf("%w at its root (rank %d)", ErrSpawn, root)
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
	total := 0
	for _, cmd := range cmds {
		if cmd.N < 1 || cmd.Path == "" {
			return nil, nil, fmt.Errorf("%w: spawn of %d processes of %q", ErrInvalid, cmd.N, cmd.Path)
		}
		total += cmd.N
	}
	sp, ok := ep.boot.(bootstrap.Spawner)
	if !ok {
		return nil, nil, fmt.Errorf("fabric: spawn: the launcher (%s) does not spawn processes: %w", ep.boot.Launcher(), ErrNotSupported)
	}
	// A command no launcher can run fails here, at once: Hydra reports
	// the spawn of one a success, its proxy's exec fails, and the
	// children never come — the root waited for them until its context
	// ended. (Looked up as the launcher will, on this node.)
	for _, cmd := range cmds {
		if _, err := exec.LookPath(cmd.Path); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrSpawn, err)
		}
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
		if errors.Is(err, bootstrap.ErrNoSpawn) { // (PMI-1)
			return nil, nil, fmt.Errorf("fabric: spawn: %w: %w", ErrNotSupported, err)
		}
		return nil, nil, fmt.Errorf("%w: the launcher: %w", ErrSpawn, err)
	}
	if testHookSpawned != nil {
		testHookSpawned()
	}
	// The children's rank 0 dials in; the failure of any child before it
	// does ends the wait (a launcher under -ft tells of it).
	conn, err := ep.acceptChild(ctx, ln, base, total)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrSpawn, err)
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
		return nil, nil, fmt.Errorf("%w: the children's rank 0 did not say the secret (%v)", ErrSpawn, err)
	}
	kids, err := readBlob(conn)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: reading the children's records: %w", ErrSpawn, err)
	}
	if kids == nil {
		return nil, nil, fmt.Errorf("%w: the children could not start (a child failed in Init)", ErrSpawn)
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
