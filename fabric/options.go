//go:build linux

package fabric

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rivet-hpc/rivet/fabric/internal/shm"
	"github.com/rivet-hpc/rivet/verbs"
)

// An Option changes how Init connects this process to its peers.
//
// Every environment variable the fabric reads is an Option's too, read in
// one place (buildOptions) before the Options given to Init, which win:
//
//	RIVET_PROVIDER          WithProvider
//	RIVET_VERBS_DEVICE      WithDevice
//	RIVET_VERBS_TIMEOUT     WithVerbsTimeout (as the exponent t)
//	RIVET_VERBS_RETRY       WithVerbsTimeout's retries
//	RIVET_TUNE_PROCESS=1    WithProcessTuning(true)
//	RIVET_SYSMON            what process tuning does with the runtime's monitor
//	RIVET_SHM_PIPELINE_MAX  the shared-memory pipeline (docs/fabric.md)
//	RIVET_VERBOSE=1         Init logs how it reaches each peer
//	RIVET_NODE              the node this process says it is on (tests)
//	RIVET_FT_FD             rivetrun -ft's failure notices (set by rivetrun)
//	RIVET_FT_HEARTBEAT      WithHeartbeat (a duration, or 0 for none)
//	RIVET_FT_SOURCES        WithFailureSources ("heartbeat,pidfd", "all", "none")
//	RIVET_FT_QUORUM=off     WithQuorum(false)
//	RIVET_UNIVERSE_SIZE     WithUniverse
type Option func(*options)

type options struct {
	provider string        // "auto", "shm" or "verbs"
	device   string        // verbs device, or a comma-separated list picked by node-local index
	node     string        // overrides the node key
	shmPipe  int           // largest rendezvous message moved by pipeline on shared memory
	wait     string        // WithWaitMode
	tune     bool          // WithProcessTuning
	sysmon   string        // with tune: "auto", "idle" or "normal"
	verbose  bool          // log routes at Init
	ftFD     int           // the launcher's failure notices, 0 if none
	beat     time.Duration // the heartbeat's period, 0 for none
	sources  Source        // where failures are learned from
	quorum   bool          // WithQuorum
	universe int           // WithUniverse
	// The verbs queue pairs' transport timeout (exponent) and retry count;
	// 0 means the fabric's default (vTimeout, verbs.DefaultRetryCount).
	qpTimeout uint8
	qpRetry   int
	qpAck     time.Duration // WithVerbsTimeout's, when qpAckSet
	qpAckSet  bool
}

// WithVerbsTimeout sets the verbs provider's transport timeout — how
// long a queue pair waits for an acknowledgement before it transmits
// again — and its retry count. Together they bound how long a request to
// a dead peer takes to fail: retries+1 transmissions, ack apart (see
// verbs.RetryBound). The NIC takes the timeout as 4.096 µs × 2^t for t
// from 1 to 31, so ack is rounded up to the next such value (8.2 µs to
// about 2.4 hours); retries is 1..6. 0 keeps the default for either (ack
// about 268 ms, 6 retries: a bound of about 2.1 s). Shorter bounds find
// failures sooner and call a peer that is only slow (a loaded or
// emulated machine) dead more often. The RIVET_VERBS_TIMEOUT (t, the
// exponent, as perftest and the verbs API take it) and RIVET_VERBS_RETRY
// environment variables set the same.
func WithVerbsTimeout(ack time.Duration, retries int) Option {
	return func(o *options) { o.qpAck, o.qpAckSet, o.qpRetry = ack, true, retries }
}

// ackExponent is the smallest t from 1 to 31 with 4.096 µs × 2^t ≥ ack,
// 0 for 0, or false when ack is negative or longer than 4.096 µs × 2^31.
func ackExponent(ack time.Duration) (uint8, bool) {
	if ack == 0 {
		return 0, true
	}
	for t := uint8(1); t <= 31; t++ {
		if time.Duration(4096<<t)*time.Nanosecond >= ack {
			return t, ack > 0
		}
	}
	return 0, false
}

// WithProvider chooses how peers are reached: "auto" (the default) uses
// shared memory for processes on this node and verbs (RDMA) for the
// others; "verbs" uses verbs for every peer, on this node too (RDMA
// loopback); "shm" uses shared memory only, and fails Init if a peer is
// on another node. The RIVET_PROVIDER environment variable sets the same,
// and an Option wins over it.
func WithProvider(name string) Option { return func(o *options) { o.provider = name } }

// WithDevice names the RDMA device the verbs provider opens (default:
// the first with an active port). A comma-separated list spreads the
// processes of one node over several devices: the i-th process of the
// node (in rank order) takes entry i modulo the list's length. The
// RIVET_VERBS_DEVICE environment variable sets the same.
func WithDevice(name string) Option { return func(o *options) { o.device = name } }

// WithProcessTuning lets Init tune the whole process for a rank that
// busy-polls, as rivetrun and rivet bench ask. Without it Init changes
// nothing outside the endpoint. With it:
//
//   - On a process that may run on one CPU only (pinned by rivetrun,
//     mpirun --bind-to core or taskset), of a node with no more ranks
//     than CPUs, the Go runtime's monitor thread moves to the SCHED_IDLE
//     policy, so that its wake-ups every 10 ms while a goroutine runs
//     stop preempting the rank's polling thread (docs/fabric.md).
//     RIVET_SYSMON=idle moves it on any process (and fails Init if it
//     cannot); RIVET_SYSMON=normal leaves it alone.
//   - When this node runs more ranks than it has CPUs, GOMAXPROCS becomes
//     1 (unless the environment sets GOMAXPROCS): the runtime's idle
//     threads otherwise spin looking for work and keep the rank that
//     others wait for off the CPU.
//
// RIVET_TUNE_PROCESS=1 in the environment turns it on; rivetrun sets it
// for every rank unless the environment already says.
func WithProcessTuning(on bool) Option { return func(o *options) { o.tune = on } }

// WithWaitMode says how a call that waits spends the time: WaitAuto (the
// default) sleeps on the verbs provider's completions once a few polls
// find nothing, when every peer of the process is reached over verbs on
// another node — on soft-RoCE a spinning rank takes the CPU its NIC, the
// kernel, needs (docs/fabric.md) — and spins, then yields, otherwise;
// WaitPoll always spins, then yields. The RIVET_WAIT environment
// variable sets the same ("auto", "poll"), and an Option wins over it.
func WithWaitMode(mode string) Option { return func(o *options) { o.wait = mode } }

// DefaultHeartbeat is the period of a process's heartbeat unless
// WithHeartbeat says otherwise.
const DefaultHeartbeat = 20 * time.Millisecond

// WithHeartbeat sets the period of this process's heartbeat: a thread
// outside the Go scheduler that counts in a word its peers read — with a
// load on the node, an RDMA read across nodes — so that a failure
// detector (package ft) can tell a process that stopped from one that is
// only busy. It also ends the process, with ExitDeclaredFailed, once a
// peer has declared it failed. The default is DefaultHeartbeat; 0 turns
// it off (and with it every detector's view of this process). The
// RIVET_FT_HEARTBEAT environment variable sets the same ("20ms", "0").
func WithHeartbeat(period time.Duration) Option { return func(o *options) { o.beat = period } }

func buildOptions(opts []Option) (options, error) {
	o := options{
		provider: os.Getenv("RIVET_PROVIDER"),
		device:   os.Getenv("RIVET_VERBS_DEVICE"),
		// RIVET_NODE replaces the node this process believes it is on:
		// processes with different values never share memory. It exists to
		// test multi-node jobs on one machine.
		node:    os.Getenv("RIVET_NODE"),
		shmPipe: shm.DefaultPipeMax,
		tune:    os.Getenv("RIVET_TUNE_PROCESS") == "1",
		sysmon:  os.Getenv("RIVET_SYSMON"),
		verbose: os.Getenv("RIVET_VERBOSE") == "1",
		wait:    os.Getenv("RIVET_WAIT"),
		beat:    DefaultHeartbeat,
		sources: AllSources,
		quorum:  true,
	}
	switch v := os.Getenv("RIVET_FT_QUORUM"); v {
	case "", "on":
	case "off":
		o.quorum = false
	default:
		return o, fmt.Errorf("%w: RIVET_FT_QUORUM=%q (want on or off)", ErrInvalid, v)
	}
	if v := os.Getenv(UniverseEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return o, fmt.Errorf("%w: %s=%q (want a number of processes)", ErrInvalid, UniverseEnv, v)
		}
		o.universe = n
	}
	if v := os.Getenv("RIVET_FT_SOURCES"); v != "" {
		s, err := ParseSources(v)
		if err != nil {
			return o, fmt.Errorf("RIVET_FT_SOURCES: %w", err)
		}
		o.sources = s
	}
	if v := os.Getenv("RIVET_FT_HEARTBEAT"); v != "" {
		d, err := time.ParseDuration(v)
		if v == "0" {
			d, err = 0, nil
		}
		if err != nil || d < 0 {
			return o, fmt.Errorf("%w: RIVET_FT_HEARTBEAT=%q (want a duration, such as 20ms, or 0)", ErrInvalid, v)
		}
		o.beat = d
	}
	switch o.sysmon {
	case "":
		o.sysmon = "auto"
	case "auto", "idle", "normal":
	default:
		return o, fmt.Errorf("%w: RIVET_SYSMON=%q (want idle, normal or auto)", ErrInvalid, o.sysmon)
	}
	// The launcher's failure notices (rivetrun -ft): a descriptor it
	// handed down, above the standard three.
	if v := os.Getenv("RIVET_FT_FD"); v != "" {
		if fd, err := strconv.Atoi(v); err == nil && fd > 2 {
			o.ftFD = fd
		}
	}
	// RIVET_SHM_PIPELINE_MAX sets the largest rendezvous message that
	// shared memory moves by pipeline through its rings (bytes; 0, the
	// default: none, every one is read with process_vm_readv); see
	// docs/fabric.md.
	if err := envInt("RIVET_SHM_PIPELINE_MAX", math.MaxInt, &o.shmPipe); err != nil {
		return o, err
	}
	var timeout int
	if err := envInt("RIVET_VERBS_TIMEOUT", 31, &timeout); err != nil {
		return o, err
	}
	o.qpTimeout = uint8(timeout)
	if err := envInt("RIVET_VERBS_RETRY", 6, &o.qpRetry); err != nil {
		return o, err
	}
	for _, f := range opts {
		f(&o)
	}
	if o.qpAckSet {
		t, ok := ackExponent(o.qpAck)
		if !ok {
			return o, fmt.Errorf("%w: verbs timeout %v (want 0, or up to 4.096 µs × 2^31)", ErrInvalid, o.qpAck)
		}
		o.qpTimeout = t
	}
	if o.beat < 0 || o.beat > 0 && o.beat < time.Millisecond {
		return o, fmt.Errorf("%w: heartbeat period %v (want 0, or 1 ms or more)", ErrInvalid, o.beat)
	}
	if o.qpTimeout > 31 || o.qpRetry < 0 || o.qpRetry > 6 {
		return o, fmt.Errorf("%w: verbs timeout %d, retries %d (want 0..31 and 0..6)", ErrInvalid, o.qpTimeout, o.qpRetry)
	}
	var err error
	if o.wait, err = checkWaitMode(o.wait); err != nil {
		return o, err
	}
	switch o.provider = strings.ToLower(o.provider); o.provider {
	case "":
		o.provider = "auto"
	case "auto", "shm", "verbs":
	default:
		return o, fmt.Errorf("%w: provider %q (want auto, shm or verbs)", ErrInvalid, o.provider)
	}
	return o, nil
}

// envInt sets *dst from the environment variable name, if it is set: a
// whole number from 0 to max, else an error wrapping ErrInvalid.
func envInt(name string, max int, dst *int) error {
	v := os.Getenv(name)
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > max {
		return fmt.Errorf("%w: %s=%q (want a whole number from 0 to %d)", ErrInvalid, name, v, max)
	}
	*dst = n
	return nil
}

// vTimeout is the fabric's default transport timeout: 268 ms between
// retransmissions, four times the verbs package's default. With that one
// (67 ms, a 0.54 s bound) one fabric test run in eight in the soft-RoCE
// VM had a live peer declared dead: its probe went unacknowledged for the
// whole bound, four ranks on two emulated CPUs. A false failure costs a
// job a live process for good; a slower true one costs 1.6 s.
const vTimeout = 16

// qpConfig is the connection settings the options ask of verbs queue
// pairs, with the defaults filled in.
func (o *options) qpConfig() verbs.ConnectConfig {
	c := verbs.ConnectConfig{Timeout: o.qpTimeout, RetryCount: o.qpRetry}
	if c.Timeout == 0 {
		c.Timeout = vTimeout
	}
	if c.RetryCount == 0 {
		c.RetryCount = verbs.DefaultRetryCount
	}
	return c
}

// pickDevice returns the device entry for the node-local index ix.
func (o *options) pickDevice(ix int) string {
	if o.device == "" {
		return ""
	}
	list := strings.Split(o.device, ",")
	return strings.TrimSpace(list[ix%len(list)])
}
