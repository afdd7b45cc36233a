//go:build linux

package fabric

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/fabric/bootstrap"
	"github.com/rivet-hpc/rivet/fabric/internal/rdma"
	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/internal/heartbeat"
)

var randRead = rand.Read

// testHookBeforeUnlink lets tests die at the worst moment for cleanup.
var testHookBeforeUnlink func(*Endpoint)

// testHookVerbsInitial, if set, is the verbs credits a peer gets when it
// connects (rdma.Config.Initial): tests about messages already at the
// receiver have them all sent before it polls.
var testHookVerbsInitial int

// Endpoint is this process's place in a job: its bootstrap, providers and
// matching engine, and the world and self communicators.
type Endpoint struct {
	boot bootstrap.Bootstrap // its ranks are world ranks (see offsetBoot)
	e    *engine
	rank int // world rank
	size int // the universe's size: every world rank is below it
	// base is the world rank of the job's first process, and jobSize the
	// job's size: a job a launcher started has base 0, one a spawn
	// started the ranks after its spawners' (spawn.go).
	base, jobSize int
	opts          options
	shm           *shmProvider
	verbs         *verbsProvider
	mem           memRegistry
	world         *Comm
	self          *Comm
	node          []int // world ranks on this node
	// nodeOf is the node of every world rank; launchNode the launcher's
	// node of every world rank, nil if the launcher does not say.
	nodeOf, launchNode []int
	local              []int          // the job's world ranks sharing memory through shm (empty without shm)
	nodeKeys           map[string]int // node index by nodeID of the node key (see nodeKey)
	parentInfo         *spawnInfo     // how this job was spawned; nil if a launcher started it
	parent             *Comm          // the intercommunicator to the spawners (Parent)

	createMu   sync.Mutex // communicator creation, one at a time
	lastGen    uint64     // the latest communicator generation made here; under createMu
	idMu       sync.Mutex
	ids        idMask
	closed     atomic.Bool
	ftFile     *os.File
	told       chan struct{}   // closed when every verdict went to the launcher
	stopEvents func()          // ends watchVerbs
	beat       *heartbeat.Beat // this process's heartbeat, nil if none
	stalled    []bool          // by world rank: a detector sees its heartbeat late (SetStalled)
	byePids    []int           // the pids Close says goodbye to (see goodbyes)
	// beatIDs: by world rank on this node, where its heartbeat thread is
	// in /proc. Replaced whole when a spawn adds some (a detector reads
	// it meanwhile).
	beatIDs atomic.Pointer[map[int]beatID]
}

// Init joins the job this process was started in (see bootstrap.Detect)
// and connects to its peers: shared memory to every process on this node,
// verbs (RDMA) to the others (see WithProvider). It is collective: every
// process of the job calls it. Before it returns it runs the garbage
// collector once and gives the memory its exchanges used back to the OS
// (runtime/debug.FreeOSMemory): they grow with the job's size.
func Init(ctx context.Context, opts ...Option) (*Endpoint, error) {
	b, err := bootstrap.Detect(ctx)
	if err != nil {
		return nil, err
	}
	ep, err := InitWith(ctx, b, opts...)
	if err != nil {
		b.Close()
		return nil, err
	}
	return ep, nil
}

// InitWith is Init over a bootstrap the caller made.
func InitWith(ctx context.Context, b bootstrap.Bootstrap, opts ...Option) (*Endpoint, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := o.tuneMonitor(); err != nil {
		return nil, err
	}
	sp, err := spawnedBy(ctx, b)
	if err != nil {
		return nil, err
	}
	base, universe := 0, max(b.Size(), o.universe, universeOf(ctx, b))
	if sp != nil {
		base, universe = sp.base, sp.universe
	}
	ep := &Endpoint{boot: b, rank: base + b.Rank(), size: universe, base: base, jobSize: b.Size(), opts: o, parentInfo: sp}
	if base != 0 {
		ep.boot = offsetBoot{b, base}
	}
	ep.e = newEngine(ep.rank, ep.size)
	for i := range ep.ids {
		ep.ids[i] = ^uint64(0)
	}
	ep.ids[0] &^= 3 // 0: world, 1: self
	if err := ep.connect(ctx); err != nil {
		ep.closeProviders()
		return nil, err
	}
	if o.verbose {
		ep.logRoutes(os.Stderr)
	}
	ep.world = newComm(ep, 0, 0, rankRange(ep.base, ep.jobSize))
	ep.self = newComm(ep, 1, 0, []int{ep.rank})
	if fd := o.ftFD; fd != 0 {
		unix.CloseOnExec(fd)
		unix.SetNonblock(fd, true)
		ep.ftFile = os.NewFile(uintptr(fd), "rivet-ft")
		// The launcher's notices are a failure source; verdicts go back
		// to it whichever sources are on.
		if o.sources&SourceLauncher != 0 {
			go watchLauncher(ep.e, ep.ftFile)
		}
		ep.e.mu.Lock()
		ep.e.verdicts = make(chan int, ep.size)
		ep.e.mu.Unlock()
		ep.told = make(chan struct{})
		go tellLauncher(ep.ftFile, ep.e.verdicts, ep.told)
	}
	if ep.parentInfo != nil {
		if err := ep.joinParent(ctx); err != nil {
			ep.boot = keepBoot{ep.boot} // the caller closes it, as after any error of InitWith
			ep.Close()
			return nil, err
		}
	}
	if d, ok := ep.boot.(bootstrap.Detacher); ok {
		// The launcher would end the job when this process dies: leave
		// it, now that every address is read (bootstrap.Detacher).
		if err := d.Detach(); err != nil {
			ep.Close()
			return nil, fmt.Errorf("fabric: leaving the launcher after Init: %w", err)
		}
	}
	// What Init exchanged with the launcher and the node's processes
	// grows with their number and is garbage now. Left to the collector,
	// which starts only once the heap reaches 4 MiB, it stayed in every
	// rank that allocates little afterwards: a rank of 256 on one node
	// held 4.3 MiB, 2.6 MiB with this (one collection, at start).
	debug.FreeOSMemory()
	return ep, nil
}

// nodeKey names this node and pid namespace: processes with equal keys
// can share memory and see each other's pids.
func nodeKey() string {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return host + "|" + strings.TrimSpace(string(boot)) + "|" + ns
}

func (ep *Endpoint) connect(ctx context.Context) error {
	b := ep.boot
	if ep.size == 1 {
		return nil
	}
	first, end := ep.base, ep.base+ep.jobSize // the job's world ranks
	mine := nodeKey()
	if ep.opts.node != "" {
		mine = ep.opts.node
	}
	var bye *goodbyes
	if ep.opts.provider == "verbs" && ep.opts.sources&SourcePidfd != 0 {
		// Bound before the fence: a peer may close as soon as it is past
		// the bootstrap (see goodbyes).
		var err error
		if bye, err = listenGoodbyes(os.Getpid(), ep.size); err != nil {
			return err
		}
	}
	defer func() {
		if bye != nil && (ep.e.health == nil || ep.e.health.bye != bye) {
			bye.close()
		}
	}()
	if err := b.Put(ctx, "node", []byte(mine+"|"+strconv.Itoa(os.Getpid()))); err != nil {
		return err
	}
	if ep.rank == first {
		// The random part of the job's segment names: the others are
		// named from it and their pids, learnt from the node map, so
		// no process reads a key per peer for them.
		var key [8]byte
		if _, err := randRead(key[:]); err != nil {
			return err
		}
		if err := b.Put(ctx, "shmkey", fmt.Appendf(nil, "%x", key)); err != nil {
			return err
		}
	}
	if err := b.Fence(ctx); err != nil {
		return err
	}
	if ep.rank == first {
		if err := gatherNodes(ctx, b, first, end); err != nil {
			return err
		}
	}
	if err := b.Fence(ctx); err != nil {
		return err
	}
	m, here, pids, err := readNodes(ctx, b, first, ep.jobSize, mine)
	if err != nil {
		return err
	}
	ep.nodeOf = make([]int, ep.size)
	for r := range ep.nodeOf {
		ep.nodeOf[r] = -1 // not in the universe yet
	}
	for i, k := range m.of {
		ep.nodeOf[first+i] = k
		if k == here {
			ep.node = append(ep.node, first+i)
		}
	}
	if me := slices.Index(ep.node, ep.rank); len(pids) != len(ep.node) || me < 0 || pids[me] != os.Getpid() {
		return fmt.Errorf("fabric: the node map of rank %d has %d pids for %d ranks on this node, not this process's", first, len(pids), len(ep.node))
	}
	nodes := make(map[string]int, len(m.ids))
	for k, id := range m.ids {
		nodes[id] = k
	}
	ep.nodeKeys = nodes
	if ep.opts.quorum && len(nodes) > 1 {
		ep.e.nodeOf = ep.nodeOf
	}
	if err := ep.learnLaunchNodes(ctx); err != nil {
		return err
	}
	// Who is reached how: shared memory within the node unless verbs is
	// forced, verbs for everyone else.
	var remote []int
	for r := first; r < end; r++ {
		if r == ep.rank {
			continue
		}
		if ep.opts.provider == "verbs" || !slices.Contains(ep.node, r) {
			remote = append(remote, r)
		}
	}
	if ep.opts.provider != "verbs" && (len(ep.node) > 1 || ep.size > ep.jobSize) {
		// Shared memory with the others here — and with processes a
		// spawn may start here later, if the universe has room for any.
		ep.local = ep.node
	}
	// With room in the universe, verbs is made ready for processes a
	// spawn may add on other nodes: required when forced, else if this
	// node has an RDMA device at all.
	spare := ep.size > ep.jobSize && ep.opts.provider != "shm"
	if len(remote) > 0 || spare {
		if len(remote) > 0 && ep.opts.provider == "shm" {
			return fmt.Errorf("fabric: world rank %d is on another node, and the shm provider was chosen: %w", remote[0], ErrNoRoute)
		}
		v, err := newVerbsProvider(rdma.Config{Device: ep.opts.pickDevice(slices.Index(ep.node, ep.rank)), QP: ep.opts.qpConfig(),
			Me: ep.rank, Size: ep.size, Peers: remote, Mem: &ep.mem, Initial: testHookVerbsInitial,
			Resolve: func(ctx context.Context, w int) ([]byte, error) { return b.Get(ctx, w, "verbs") }},
			ep.e, ep.opts.sources&SourceCompletion != 0)
		switch {
		case err != nil && len(remote) > 0:
			return fmt.Errorf("%w (world rank %d is reached over verbs)", err, remote[0])
		case err != nil && ep.opts.provider == "verbs":
			return err
		case err == nil:
			ep.verbs = v
		}
	}
	if v := ep.verbs; v != nil {
		if err := b.Put(ctx, "verbs", v.Address()); err != nil {
			return err
		}
	}
	if len(ep.local) > 0 {
		// A ring for each process this node may come to hold (this
		// job's here and every spawn's), claimed by the ones that send
		// to this process. A /dev/shm that cannot hold what the node's
		// segments need to start is an error here, at every process
		// alike, not a SIGBUS later.
		nodeCap := len(ep.local) + ep.size - ep.jobSize
		cells := shmseg.Cells(nodeCap)
		if err := shmseg.CheckSpace(len(ep.local), nodeCap, cells); err != nil {
			return fmt.Errorf("fabric: %w", err)
		}
		v, err := b.Get(ctx, first, "shmkey")
		if err != nil {
			return err
		}
		var key [8]byte
		if n, err := hex.Decode(key[:], v); err != nil || n != len(key) {
			return fmt.Errorf("fabric: rank %d published a bad shmkey %q", first, v)
		}
		sp, err := newShmSegment(segmentPrefix(b), ep.rank, ep.size, nodeCap, cells, ep.opts.shmPipe, key)
		if err != nil {
			return err
		}
		ep.shm = sp
	}
	if err := ep.startHeartbeat(); err != nil {
		return err
	}
	// Where this process's heartbeat thread is: in its segment's header
	// for the node's processes that map it, as a key for the others.
	if ep.shm != nil {
		id := ep.ownBeatID()
		ep.shm.Publish(shmseg.WordBeatID, uint64(id.tid))
		ep.shm.Publish(shmseg.WordBeatID+8, id.ns)
	} else if len(ep.node) > 1 {
		if err := b.Put(ctx, "beat", ep.beatID()); err != nil {
			return err
		}
	}
	if err := b.Fence(ctx); err != nil {
		return err
	}
	if ep.shm != nil {
		paths := make([]string, len(ep.local))
		for i, r := range ep.local {
			paths[i] = shmseg.Path(segmentPrefix(b), r, pids[i], ep.shm.Key())
			if r != ep.rank {
				if err := awaitSegment(ctx, r, paths[i], pids[i]); err != nil {
					return err
				}
			}
		}
		if err := ep.shm.Connect(ep.local, paths, pids); err != nil {
			return err
		}
		if testHookBeforeUnlink != nil {
			testHookBeforeUnlink(ep)
		}
		for _, r := range ep.local {
			if r != ep.rank {
				ep.e.route[r] = ep.shm
			}
		}
		ep.e.provs = append(ep.e.provs, ep.shm)
	}
	if err := ep.learnBeatIDs(ctx, pids); err != nil {
		return err
	}
	if err := ep.connectVerbs(ctx, remote); err != nil {
		return err
	}
	ep.e.all = nil // (the routes are set)
	oversubscribed := len(ep.node) > nodeCPUs()
	ep.opts.tuneMonitorAuto(oversubscribed)
	if len(ep.node) > 1 {
		if oversubscribed {
			// Oversubscribed: yield almost at once, and keep the Go
			// runtime to one thread running Go code — its idle threads
			// spin looking for work, taking the CPU from the very rank
			// this one waits for (4 ranks on 2 CPUs: barrier 44 → 11 µs).
			ep.e.spin = 16
			if ep.opts.tune && os.Getenv("GOMAXPROCS") == "" {
				runtime.GOMAXPROCS(1)
			}
		}
		if ep.opts.provider == "verbs" {
			for i, r := range ep.node {
				if r != ep.rank {
					ep.byePids = append(ep.byePids, pids[i])
				}
			}
		}
		if ep.opts.sources&SourcePidfd != 0 {
			ep.e.health = newHealth(ep.node, pids, ep.rank, bye)
		}
	}
	return nil
}

// awaitSegment waits until world rank r, process pid, has made its
// segment at path: a fence does not say it has (Hydra's PMI-2 fence does
// not wait for the other processes), and its name is not read from a key
// that would. It fails at once if the process is gone.
func awaitSegment(ctx context.Context, r int, path string, pid int) error {
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		_, err := os.Stat(path)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("fabric: the shared memory of rank %d: %w", r, err)
		case unix.Kill(pid, 0) == unix.ESRCH:
			return fmt.Errorf("fabric: rank %d (pid %d) is gone before it made its shared memory", r, pid)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fabric: waiting for the shared memory of rank %d: %w", r, context.Cause(ctx))
		case <-time.After(wait):
		}
	}
}

// connectVerbs routes the peers in remote over verbs. Connections are
// made on first use (see fabric/internal/rdma/connect.go), and the peers'
// addresses read then — unless the launcher may be gone by then: a rank
// of the job hosts the bootstrap's store (a Forgetter), which may die with
// it, or Init leaves the launcher (a Detacher). Survivors that had not
// talked yet must still reach each other, so they read every address now.
func (ep *Endpoint) connectVerbs(ctx context.Context, remote []int) error {
	v := ep.verbs
	if v == nil {
		return nil
	}
	_, eager := ep.boot.(bootstrap.Forgetter)
	if _, detach := ep.boot.(bootstrap.Detacher); detach {
		eager = true
	}
	for _, r := range remote {
		if eager {
			addr, err := ep.boot.Get(ctx, r, "verbs")
			if err != nil {
				return err
			}
			if err := v.SetAddr(r, addr); err != nil {
				return err
			}
		}
		ep.e.route[r] = v
	}
	ep.e.provs = append(ep.e.provs, v)
	if ep.shm == nil && len(ep.node) <= 1 && ep.opts.wait == WaitAuto && v.CanSleep() {
		// Every peer is over verbs, on another node: a wait sleeps on
		// its completions (waitmode.go).
		ep.e.idler = v
		ep.e.spin = idleSpin
	}
	evctx, cancel := context.WithCancel(context.Background())
	events, err := v.Device().Events(evctx)
	if err != nil {
		cancel()
		return fmt.Errorf("fabric: verbs provider: %w", err)
	}
	ep.stopEvents = cancel
	go ep.watchVerbs(events)
	v.ServeHandshakes()
	return nil
}

// logRoutes says how this process reaches each peer, grouping ranks by
// provider: "rivet: rank 0 (pmi-2): self 0; shm 1; verbs(rxe0) 2-3".
func (ep *Endpoint) logRoutes(w io.Writer) {
	var b strings.Builder
	fmt.Fprintf(&b, "rivet: rank %d (%s):", ep.rank, ep.boot.Launcher())
	for r := 0; r < ep.size; {
		if ep.Provider(r) == "" {
			r++
			continue
		}
		name := ep.Provider(r)
		if name == "verbs" {
			name += "(" + ep.Device() + ")"
		}
		lo := r
		for r < ep.size && ep.Provider(r) == ep.Provider(lo) {
			r++
		}
		if r-1 == lo {
			fmt.Fprintf(&b, " %s %d;", name, lo)
		} else {
			fmt.Fprintf(&b, " %s %d-%d;", name, lo, r-1)
		}
	}
	fmt.Fprintln(w, strings.TrimSuffix(b.String(), ";"))
}

// segmentPrefix starts every segment name of a job with the same prefix,
// the launcher's job id when it has one, so rivetrun can sweep them.
func segmentPrefix(b bootstrap.Bootstrap) string {
	id := ""
	if j, ok := b.(bootstrap.JobNamer); ok {
		id = j.JobID()
	}
	id = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, id)
	if !strings.HasPrefix(id, "rivet-") {
		id = "rivet-" + id
	}
	return id
}

// World is the communicator of every process in the job (MPI_COMM_WORLD).
func (ep *Endpoint) World() *Comm { return ep.world }

// Self is the communicator of this process alone (MPI_COMM_SELF).
func (ep *Endpoint) Self() *Comm { return ep.self }

// Launcher names what started the job, for logs.
func (ep *Endpoint) Launcher() string { return ep.boot.Launcher() }

// Provider names how this process reaches world rank r: "self", "shm",
// "verbs", or "" when nothing reaches it.
func (ep *Endpoint) Provider(r int) string {
	if r < 0 || r >= ep.size || ep.e.route[r] == nil {
		return ""
	}
	return ep.e.route[r].name()
}

// Device names the RDMA device the verbs provider uses, or "" when this
// process reaches no peer over verbs.
func (ep *Endpoint) Device() string {
	if ep.verbs == nil {
		return ""
	}
	return ep.verbs.Device().Name()
}

// Failed returns the world ranks this process knows to have failed.
func (ep *Endpoint) Failed() []int {
	ep.e.mu.Lock()
	defer ep.e.mu.Unlock()
	var out []int
	for r, err := range ep.e.failed {
		if err != nil && errors.Is(err, ErrProcFailed) {
			out = append(out, r)
		}
	}
	return out
}

func (ep *Endpoint) releaseID(id uint32) {
	ep.idMu.Lock()
	ep.ids[id/64] |= 1 << (id % 64)
	ep.idMu.Unlock()
}

// closeFlushWait bounds how long Close waits for the control frames it
// owes live peers to find room at them.
const closeFlushWait = 10 * time.Second

// Close leaves the job: peers see a clean exit, not a failure. Requests
// still in progress are abandoned; what this process owes its peers for
// those that completed (a rendezvous FIN, a notice) it still sends,
// waiting up to 10 s for room at a peer that does not poll. Close is
// idempotent.
func (ep *Endpoint) Close() error {
	if ep.closed.Swap(true) {
		return nil
	}
	ep.e.flushFT() // an agreement's decision, passed on before leaving
	// Control frames that wait for room at their peer — a rendezvous FIN
	// for a receive that completed here, a notice — go before the
	// goodbye: their peers are alive and make room once they poll.
	ctx, cancel := context.WithTimeout(context.Background(), closeFlushWait)
	_ = ep.e.waitUntil(ctx, ep.e.ctlSent)
	cancel()
	if ep.byePids != nil {
		// First: a peer that loses this process from here on, by a
		// connection or its pidfd, finds the goodbye queued.
		sayGoodbye(ep.rank, ep.byePids)
	}
	ep.e.mu.Lock()
	if ep.shm != nil {
		ep.shm.MarkClosed()
	}
	if ep.verbs != nil {
		ep.verbs.Goodbye()
	}
	ep.e.closed = true
	if ep.e.verdicts != nil {
		close(ep.e.verdicts) // fence runs only before closed
	}
	ep.e.mu.Unlock()
	if ep.stopEvents != nil {
		ep.stopEvents()
	}
	ep.closeProviders()
	if ep.ftFile != nil {
		<-ep.told // the verdicts given before Close reach the launcher
		ep.ftFile.Close()
	}
	if f, ok := ep.boot.(bootstrap.Forgetter); ok {
		ep.e.mu.Lock()
		failed := slices.Clone(ep.e.order)
		ep.e.mu.Unlock()
		for _, w := range failed {
			f.Forget(w)
		}
	}
	return ep.boot.Close()
}

func (ep *Endpoint) closeProviders() {
	if ep.beat != nil {
		// Before the memory it counts in and watches is unmapped.
		ep.beat.Stop()
		ep.beat = nil
	}
	v := ep.verbs
	if v != nil {
		defer v.WaitHandshakes() // after the unlock: they take e.mu to finish
	}
	ep.e.mu.Lock()
	defer ep.e.mu.Unlock()
	if ep.e.health != nil {
		ep.e.health.close()
	}
	if ep.shm != nil {
		ep.shm.close()
	}
	if ep.verbs != nil {
		if ep.stopEvents != nil {
			ep.stopEvents()
		}
		ep.verbs.close()
		ep.verbs = nil
	}
}
