//go:build linux

package pmi

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// MappingKey is the job attribute in which Hydra and Slurm's PMI plugins
// say which node runs each rank.
const MappingKey = "PMI_process_mapping"

// JobAttr reads a job attribute the launcher provides, such as
// MappingKey. It returns ErrNotFound if the launcher has none by that
// name. PMI-1 has no job attributes: there launchers serve them as keys of
// the job's key-value space, and JobAttr reads them there.
func (c *Client) JobAttr(ctx context.Context, key string) (string, error) {
	if err := checkKV(key, ""); err != nil {
		return "", err
	}
	resp, err := c.call(ctx, "job attribute "+key,
		msg{"info-getjobattr", []kv{{"key", key}}}, "info-getjobattr-response",
		msg{"get", []kv{{"kvsname", c.jobid}, {"key", key}}}, "get_result")
	if err != nil && resp.cmd == "get_result" {
		// A PMI-1 server answers a missing key with a failure.
		return "", fmt.Errorf("%w: job attribute %s", ErrNotFound, key)
	}
	if err != nil {
		return "", err
	}
	if !c.v2 {
		v, ok := resp.get("value")
		if !ok {
			return "", fmt.Errorf("%w: job attribute %s", ErrNotFound, key)
		}
		return v, nil
	}
	v, ok := resp.get("value")
	if found, _ := resp.get("found"); found != "TRUE" || !ok {
		return "", fmt.Errorf("%w: job attribute %s", ErrNotFound, key)
	}
	return v, nil
}

// maxMappingValue bounds the numbers in a process mapping, so that no
// arithmetic on them overflows.
const maxMappingValue = 1 << 24

// ParseMapping reads a PMI_process_mapping value, such as
// "(vector,(0,2,2))", into the node of each of size ranks. Each block
// (first, nodes, per) gives per consecutive ranks to each of the nodes
// first…first+nodes-1 in turn; the blocks repeat until every rank has a
// node, so "(vector,(0,2,1))" places 4 ranks cyclically on 2 nodes.
func ParseMapping(s string, size int) ([]int, error) {
	bad := func(why string) ([]int, error) {
		return nil, fmt.Errorf("pmi: %s %q is malformed: %s", MappingKey, s, why)
	}
	if size < 1 {
		return nil, fmt.Errorf("pmi: a mapping for %d ranks", size)
	}
	body, ok := strings.CutPrefix(strings.ReplaceAll(s, " ", ""), "(vector")
	if !ok || !strings.HasSuffix(body, ")") {
		return bad(`want "(vector,(first,nodes,per),…)"`)
	}
	body = strings.TrimSuffix(body, ")")
	type block struct{ first, nodes, per int }
	var blocks []block
	for body != "" {
		rest, ok := strings.CutPrefix(body, ",(")
		end := strings.IndexByte(rest, ')')
		if !ok || end < 0 {
			return bad("a block is not \"(first,nodes,per)\"")
		}
		f := strings.Split(rest[:end], ",")
		if len(f) != 3 {
			return bad("a block has " + strconv.Itoa(len(f)) + " numbers, not 3")
		}
		var n [3]int
		for i, v := range f {
			x, err := strconv.Atoi(v)
			if err != nil || x < 0 || x > maxMappingValue {
				return bad(fmt.Sprintf("%q is not a number from 0 to %d", v, maxMappingValue))
			}
			n[i] = x
		}
		if n[1] == 0 || n[2] == 0 {
			return bad("a block places no rank")
		}
		blocks = append(blocks, block{n[0], n[1], n[2]})
		body = rest[end+1:]
	}
	if len(blocks) == 0 {
		return bad("it names no node")
	}
	nodes := make([]int, 0, size)
	for len(nodes) < size {
		for _, b := range blocks {
			for node := b.first; node < b.first+b.nodes; node++ {
				for range b.per {
					if len(nodes) == size {
						return nodes, nil
					}
					nodes = append(nodes, node)
				}
			}
		}
	}
	return nodes, nil
}
