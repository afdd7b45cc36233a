package ftsim

import (
	"time"

	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// Model is the simulated machine and network.
type Model struct {
	// PPN is how many processes a node holds (ranks are placed in
	// blocks: node i holds ranks i·PPN to (i+1)·PPN-1).
	PPN int
	// LNode and LNet are a message's latency between processes of one
	// node and of two nodes.
	LNode, LNet time.Duration
	// O is the CPU time a process spends to send or to receive one
	// message (LogGP's o).
	O time.Duration
	// G is the least time between two messages a process injects
	// (LogGP's g); ByteNode and ByteNet are the time per byte (LogGP's
	// G) within a node and across nodes.
	G                 time.Duration
	ByteNode, ByteNet time.Duration
	// Header is the bytes every message carries beside its payload.
	Header int
	// Jitter stretches each message's latency by up to this fraction, at
	// random (in order between any two processes, as the transports
	// keep them).
	Jitter float64
	// Stall is the probability that a process is descheduled before it
	// handles an event, and StallMax how long it may wait at most.
	Stall    float64
	StallMax time.Duration
	// Period is the heartbeat's; Detector the observers' times.
	Period   time.Duration
	Detector ulfm.Times
}

// Detector times as production's defaults: a 20 ms heartbeat, convicted
// after 10 periods, looked at every quarter period, unconfirmed after
// 10 timeouts (ft.DefaultTimeout and its siblings).
const (
	defaultPeriod = 20 * time.Millisecond
	defaultTO     = 10 * defaultPeriod
)

func defaultTimes() ulfm.Times {
	return ulfm.Times{Timeout: defaultTO, Tick: defaultPeriod / 4, StalledAfter: defaultTO / 4, Unconfirmed: 10 * defaultTO}
}

// Cluster is a model of a cluster of nodes of 32 processes on an RDMA
// network (docs/ft.md#simulation has where its constants come from):
// within a node, shared memory's latency and per-message cost; across
// nodes, a NIC's. Nobody is descheduled (Stall 0): Draw turns that on
// for its schedules.
func Cluster() Model {
	return Model{
		PPN:      32,
		LNode:    400 * time.Nanosecond,
		LNet:     2 * time.Microsecond,
		O:        300 * time.Nanosecond,
		G:        100 * time.Nanosecond,
		ByteNode: 0, // (a copy in the CPU's O, for the small messages simulated)
		ByteNet:  time.Nanosecond / 10,
		Header:   32,
		Jitter:   0.25,
		Period:   defaultPeriod,
		Detector: defaultTimes(),
	}
}

// node is the node rank r lives on.
func (m *Model) node(r int) int { return r / m.PPN }
