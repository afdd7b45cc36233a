//go:build linux

// Package vm runs a command inside a throwaway qemu virtual machine booted
// from the host's own Debian kernel, with an optional soft-RoCE topology set
// up before the command starts. It is the engine behind cmd/rxevm.
//
// The guest sees the host's root file system read-only over 9p with a tmpfs
// overlay on top: the command finds every binary, library and source file
// where it is on the host (including go test binaries under /tmp), may write
// anywhere, and leaves no trace. The command's stdout and stderr are streamed
// back separately over two serial ports; its exit status comes back through
// a small read-write share.
package vm

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Errors returned by Run. Each is wrapped with detail; test with errors.Is.
var (
	// ErrTimeout means the command did not finish within Config.Timeout.
	// Its detail says what the guest was doing when it was killed: each
	// vCPU's instruction pointer and the kernel's stacks (hang.go).
	ErrTimeout = errors.New("timed out")
	// ErrNoStatus means the VM stopped without reporting the command's
	// status: a kernel panic, an init failure, or qemu itself failing.
	ErrNoStatus = errors.New("VM stopped without an exit status")
	// ErrNoStart means the guest did not start the command within
	// Config.StartTimeout, twice: it hung booting or building the
	// topology. Its detail says what the guest was doing, as ErrTimeout's.
	ErrNoStart = errors.New("the guest did not start the command")
	// ErrTopology means the requested topology could not be built.
	ErrTopology = errors.New("topology could not be built")
	// ErrNoQEMU means the qemu binary was not found.
	ErrNoQEMU = errors.New("qemu not found")
	// ErrClock means the guest's clock did not keep the host's time: its
	// kernel misjudged the rate of its time-stamp counter.
	ErrClock = errors.New("the guest's clock does not keep the host's time")
)

// Topology names a network set-up that is built inside the VM before the
// command runs.
type Topology string

// The topologies. Addresses come from TEST-NET-1 (RFC 5737) and exist only
// inside the VM.
const (
	// TopologyNone brings up loopback only.
	TopologyNone Topology = "none"
	// TopologyRXE creates the veth pair va/vb with 192.0.2.1 on va and one
	// soft-RoCE device rxe0 on va. Processes talk over loopback RC.
	TopologyRXE Topology = "rxe"
	// TopologyRXE2 is TopologyRXE plus 192.0.2.2 on vb and rxe1 on vb: two
	// devices at the two ends of a veth pair.
	TopologyRXE2 Topology = "rxe2"
)

// Topologies lists every valid single-VM topology; TopologyCluster(n)
// names the clusters.
var Topologies = []Topology{TopologyNone, TopologyRXE, TopologyRXE2}

// MaxClusterNodes bounds a cluster: every node is a whole VM.
const MaxClusterNodes = 4

// TopologyCluster is "cluster:n": n VMs (nodes), each its own kernel with
// one vCPU, joined by a switch the runner owns. Node i (from 1) is named
// node<i>, has 192.0.2.<i> on its virtio NIC eth0 and soft-RoCE device
// rxe0 on it. The command runs on node 1; Config.NodeArgs on the others.
func TopologyCluster(n int) Topology { return Topology("cluster:" + strconv.Itoa(n)) }

// Nodes is the number of VMs the topology boots.
func (t Topology) Nodes() int {
	if n, ok := clusterNodes(t); ok {
		return n
	}
	return 1
}

func clusterNodes(t Topology) (int, bool) {
	v, ok := strings.CutPrefix(string(t), "cluster:")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 2 && n <= MaxClusterNodes
}

// ParseTopology validates a topology name.
func ParseTopology(s string) (Topology, error) {
	for _, t := range Topologies {
		if string(t) == s {
			return t, nil
		}
	}
	if _, ok := clusterNodes(Topology(s)); ok {
		return Topology(s), nil
	}
	names := make([]string, len(Topologies))
	for i, t := range Topologies {
		names[i] = string(t)
	}
	return "", fmt.Errorf("unknown topology %q (want one of: %s, cluster:N with N from 2 to %d)", s, strings.Join(names, ", "), MaxClusterNodes)
}

// Accel selects how qemu executes the guest.
type Accel string

const (
	// AccelAuto probes KVM once per kernel and qemu (the result is cached)
	// and falls back to TCG when a guest does not boot with it.
	AccelAuto Accel = "auto"
	AccelKVM  Accel = "kvm"
	AccelTCG  Accel = "tcg"
)

// Config describes one run.
type Config struct {
	Args     []string      // the command and its arguments; Args[0] is looked up in the guest's PATH
	Env      []string      // the command's environment
	Dir      string        // the command's working directory; must be visible in the guest
	Topology Topology      // network set-up before the command; "" means TopologyNone
	Kernel   string        // kernel version or vmlinuz path; "" picks the newest installed
	QEMU     string        // qemu binary; "" means qemu-system-x86_64 from PATH
	CacheDir string        // where initramfs images and probe results are kept
	Timeout  time.Duration // 0 means no limit
	// StartTimeout bounds booting and building the topology: a guest that
	// has not started the command by then is killed and booted once more.
	// 0 means DefaultStartTimeout; negative means no bound.
	StartTimeout time.Duration
	Accel        Accel  // "" means AccelAuto
	Memory       string // guest memory, qemu syntax; "" means 2G
	CPUs         int    // guest vCPUs; 0 means 2
	Quiet        bool   // suppress the topology banner on stderr
	// TSCkHz is, under TCG, the rate in kHz the guest kernel is told its
	// time-stamp counter runs at (tsc_early_khz): 0 means the host's, which
	// the guest's counter is, measured once per process (guestclock.go).
	// Ignored under KVM, whose guests get the rate from the hypervisor.
	TSCkHz uint64
	// NodeArgs is what the other nodes of a cluster run (with the same
	// environment and directory) while node 1 runs Args; nil runs
	// nothing. They are killed when node 1's command ends.
	NodeArgs []string

	Stdout io.Writer // the command's standard output
	Stderr io.Writer // the command's standard error, and the runner's notes
}

// DefaultStartTimeout is Config.StartTimeout's default: under TCG the
// guest kernel booted in 3.7–6.8 s in 53 runs on the 2-core CI machine,
// some of them beside a second VM, so minutes mean a hang.
const DefaultStartTimeout = 3 * time.Minute

// Result is how the command ended.
type Result struct {
	ExitCode int            // the exit code, when Signal is 0
	Signal   syscall.Signal // the signal that killed the command, or 0
	Accel    Accel          // the accelerator used
	Kernel   string         // the kernel version booted
	Boot     time.Duration  // the guest kernel's uptime when the agent started: boot time as the guest counts it
	TSCkHz   uint64         // the TSC rate the guest kernel was told, in kHz; 0 if none
	Total    time.Duration  // the whole run, as the host saw it
	Dropped  uint64         // in a cluster, frames its switch dropped at a full (or absent) node
}

// Status is the exit status a shell would report: the exit code, or
// 128+N for a command killed by signal N.
func (r Result) Status() int {
	if r.Signal != 0 {
		return 128 + int(r.Signal)
	}
	return r.ExitCode
}

// spec is what the host hands to the guest agent (spec.json in the share).
type spec struct {
	Args     []string
	Env      []string
	Dir      string
	Topology Topology
	Quiet    bool
	Node     int // 1-based, in a cluster; 0 otherwise
}

// status is what the agent hands back (status.json in the share).
type status struct {
	Exit      int
	Signal    int
	Setup     string // non-empty: the topology or the command could not be set up
	Clock     string // non-empty: the guest's clock is off the host's by this much
	BootNanos int64  // guest uptime when the agent started
}
