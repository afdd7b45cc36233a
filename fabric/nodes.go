//go:build linux

package fabric

import (
	"context"
	"errors"
	"fmt"

	"github.com/rivet-hpc/rivet/fabric/bootstrap"
)

// Node is the node of world rank w, numbered from 0 in the order of each
// node's lowest rank. A node here is a kernel and pid namespace: its
// processes reach each other through shared memory (unless the verbs
// provider is forced) and watch each other's pids. It is -1 for a rank
// not in the job.
func (ep *Endpoint) Node(w int) int {
	switch {
	case w < 0 || w >= ep.size:
		return -1
	case ep.nodeOf == nil: // a job of one
		return 0
	}
	return ep.nodeOf[w]
}

// LaunchNode is the node the launcher placed world rank w on, numbered as
// the launcher numbers them — under Slurm, the index of the rank's node in
// the step (SLURM_NODEID), from PMI_process_mapping or, without PMI, from
// each rank's environment. ok is false when the launcher does not say
// (torchrun-style variables, a job of one) or w is not in the job.
//
// It usually partitions the ranks as Node does. Where it does not, Node
// is what shares memory: two slurmd daemons on one host are two launch
// nodes and one Node.
func (ep *Endpoint) LaunchNode(w int) (node int, ok bool) {
	if w < 0 || w >= len(ep.launchNode) || ep.launchNode[w] < 0 {
		return -1, false
	}
	return ep.launchNode[w], true
}

// learnLaunchNodes reads the launcher's placement, if it gives one; a
// malformed one fails the endpoint, since the launcher that wrote it cannot
// be trusted with the rest.
func (ep *Endpoint) learnLaunchNodes(ctx context.Context) error {
	p, ok := ep.boot.(bootstrap.Placer)
	if !ok {
		return nil
	}
	nodes, err := p.Nodes(ctx)
	switch {
	case errors.Is(err, bootstrap.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("fabric: where the launcher placed the ranks: %w", err)
	case len(nodes) != ep.jobSize:
		return fmt.Errorf("fabric: the launcher placed %d ranks in a job of %d", len(nodes), ep.jobSize)
	}
	ep.launchNode = make([]int, ep.size)
	for w := range ep.launchNode {
		ep.launchNode[w] = -1
	}
	copy(ep.launchNode[ep.base:], nodes)
	return nil
}
