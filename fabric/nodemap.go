//go:build linux

package fabric

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rivet-hpc/rivet/fabric/bootstrap"
)

// The job's node map is gathered once, by the job's first rank, and read
// by every rank as two values: where each rank is, and the pids of its
// own node's ranks. Reading every rank's "node" key at every rank was
// N² lookups at the launcher (2 each: a value and its length), 131,072
// for 256 processes; now the launcher serves about 2N for the first
// rank, plus a few per rank (the map and this node's pids, in values of
// about 1 KiB).

// nodeMap is where a job's ranks are: nodes by first appearance in rank
// order, each named by nodeID; of[i] is the node of the job's rank i.
type nodeMap struct {
	ids []string
	of  []int
}

// nodeID names a node key in a node map: a hash, since node keys are
// long (a host name, the boot id and the pid namespace) and a map names
// every node of the job.
func nodeID(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:8])
}

// encode writes m as "ID,ID,…;NODE*COUNT,NODE*COUNT,…": the node ids,
// then the nodes of the ranks in order as runs.
func (m *nodeMap) encode() []byte {
	var b strings.Builder
	b.WriteString(strings.Join(m.ids, ","))
	b.WriteByte(';')
	for i := 0; i < len(m.of); {
		j := i + 1
		for j < len(m.of) && m.of[j] == m.of[i] {
			j++
		}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d*%d", m.of[i], j-i)
		i = j
	}
	return []byte(b.String())
}

// decodeNodeMap reads what encode wrote, for a job of size ranks.
func decodeNodeMap(v []byte, size int) (*nodeMap, error) {
	ids, runs, ok := strings.Cut(string(v), ";")
	if !ok || ids == "" || runs == "" {
		return nil, fmt.Errorf("fabric: a bad node map %.80q", v)
	}
	m := &nodeMap{ids: strings.Split(ids, ","), of: make([]int, 0, size)}
	for _, run := range strings.Split(runs, ",") {
		n, c, ok := strings.Cut(run, "*")
		node, err1 := strconv.Atoi(n)
		count, err2 := strconv.Atoi(c)
		if !ok || err1 != nil || err2 != nil || node < 0 || node >= len(m.ids) || count < 1 || count > size-len(m.of) {
			return nil, fmt.Errorf("fabric: a bad run %q in the node map", run)
		}
		for range count {
			m.of = append(m.of, node)
		}
	}
	if len(m.of) != size {
		return nil, fmt.Errorf("fabric: the node map places %d ranks in a job of %d", len(m.of), size)
	}
	return m, nil
}

// pidsKey is the key under which the first rank puts node k's pids.
func pidsKey(k int) string { return "pids" + strconv.Itoa(k) }

// gatherNodes is run by the job's first rank after the fence that
// follows the "node" puts: it reads every rank's node key and puts the
// job's node map ("nodes") and each node's pids (pidsKey).
func gatherNodes(ctx context.Context, b bootstrap.Bootstrap, first, end int) error {
	m := &nodeMap{of: make([]int, 0, end-first)}
	index := map[string]int{}
	var pids [][]string
	for r := first; r < end; r++ {
		v, err := b.Get(ctx, r, "node")
		if err != nil {
			return err
		}
		s := string(v)
		i := strings.LastIndexByte(s, '|')
		if i < 0 {
			return fmt.Errorf("fabric: rank %d published a bad node key %q", r, s)
		}
		if _, err := strconv.Atoi(s[i+1:]); err != nil {
			return fmt.Errorf("fabric: rank %d published a bad pid %q", r, s[i+1:])
		}
		id := nodeID(s[:i])
		k, ok := index[id]
		if !ok {
			k = len(m.ids)
			index[id] = k
			m.ids = append(m.ids, id)
			pids = append(pids, nil)
		}
		m.of = append(m.of, k)
		pids[k] = append(pids[k], s[i+1:])
	}
	if err := b.Put(ctx, "nodes", m.encode()); err != nil {
		return err
	}
	for k, p := range pids {
		if err := b.Put(ctx, pidsKey(k), []byte(strings.Join(p, ","))); err != nil {
			return err
		}
	}
	return nil
}

// readNodes reads the node map the first rank put, and the pids of the
// ranks on node mine (a node key) in rank order; it fails if the map
// does not have this node.
func readNodes(ctx context.Context, b bootstrap.Bootstrap, first, size int, mine string) (_ *nodeMap, here int, pids []int, _ error) {
	v, err := b.Get(ctx, first, "nodes")
	if err != nil {
		return nil, 0, nil, err
	}
	m, err := decodeNodeMap(v, size)
	if err != nil {
		return nil, 0, nil, err
	}
	if here = slices.Index(m.ids, nodeID(mine)); here < 0 {
		return nil, 0, nil, fmt.Errorf("fabric: the node map of rank %d does not have this node", first)
	}
	v, err = b.Get(ctx, first, pidsKey(here))
	if err != nil {
		return nil, 0, nil, err
	}
	for _, s := range strings.Split(string(v), ",") {
		pid, err := strconv.Atoi(s)
		if err != nil {
			return nil, 0, nil, fmt.Errorf("fabric: a bad pid %q in the node map", s)
		}
		pids = append(pids, pid)
	}
	return m, here, pids, nil
}
