package fabric

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// An Option changes how Init connects this process to its peers.
type Option func(*options)

type options struct {
	provider string // "auto", "shm" or "verbs"
	device   string // verbs device, or a comma-separated list picked by node-local index
	node     string // overrides the node key
	shmPipe  int    // largest rendezvous message moved by pipeline on shared memory
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

func buildOptions(opts []Option) (options, error) {
	o := options{
		provider: os.Getenv("RIVET_PROVIDER"),
		device:   os.Getenv("RIVET_VERBS_DEVICE"),
		// RIVET_NODE replaces the node this process believes it is on:
		// processes with different values never share memory. It exists to
		// test multi-node jobs on one machine.
		node:    os.Getenv("RIVET_NODE"),
		shmPipe: shmPipeMax,
	}
	// RIVET_SHM_PIPELINE_MAX sets the largest rendezvous message that
	// shared memory moves by pipeline through its rings (bytes; 0, the
	// default: none, every one is read with process_vm_readv); see
	// docs/fabric.md.
	if v := os.Getenv("RIVET_SHM_PIPELINE_MAX"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return o, fmt.Errorf("%w: RIVET_SHM_PIPELINE_MAX=%q (want a size in bytes)", ErrInvalid, v)
		}
		o.shmPipe = n
	}
	for _, f := range opts {
		f(&o)
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

// pickDevice returns the device entry for the node-local index ix.
func (o *options) pickDevice(ix int) string {
	if o.device == "" {
		return ""
	}
	list := strings.Split(o.device, ",")
	return strings.TrimSpace(list[ix%len(list)])
}
