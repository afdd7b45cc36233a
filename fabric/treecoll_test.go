//go:build linux

package fabric

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestTreeOf: the binomial tree over n members reaches every member
// once, each child's subtree is where subtree says, and depth is log n.
func TestTreeOf(t *testing.T) {
	for n := 1; n <= 300; n++ {
		seen := make([]int, n)
		var walk func(i, depth int) int
		walk = func(i, depth int) int {
			seen[i]++
			size := 1
			_, children := treeOf(i, n)
			for _, c := range children {
				if p, _ := treeOf(c, n); p != i {
					t.Fatalf("n %d: child %d of %d names %d its parent", n, c, i, p)
				}
				size += walk(c, depth+1)
			}
			if depth > 9 {
				t.Fatalf("n %d: member %d at depth %d", n, i, depth)
			}
			return size
		}
		if got := walk(0, 0); got != n {
			t.Fatalf("n %d: the tree holds %d members", n, got)
		}
		for i, k := range seen {
			if k != 1 {
				t.Fatalf("n %d: member %d reached %d times", n, i, k)
			}
			if i > 0 && subtree(i, n) < 1 {
				t.Fatalf("n %d: subtree of %d is %d", n, i, subtree(i, n))
			}
		}
		for i := 0; i < n; i++ {
			size := 1
			var count func(int)
			count = func(j int) {
				_, cs := treeOf(j, n)
				for _, c := range cs {
					size++
					count(c)
				}
			}
			count(i)
			if size != subtree(i, n) {
				t.Fatalf("n %d: member %d's subtree holds %d, subtree says %d", n, i, size, subtree(i, n))
			}
		}
	}
}

func init() {
	progs.Add("tree", progTree)
	progs.Add("treedeath", progTreeDeath)
}

// progTree: allgathers over every member and over an odd subset
// (ranks 1, 2, 4, …, and the last), of values of several lengths, and an
// allreduce, each checked against what every member contributed.
func progTree(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	n, me := w.Size(), w.Rank()
	var odd []int
	for r := 1; r < n; r *= 2 {
		odd = append(odd, r)
	}
	if !slices.Contains(odd, n-1) {
		odd = append(odd, n-1)
	}
	for k, members := range [][]int{allRanks(n), odd} {
		if !slices.Contains(members, me) {
			continue
		}
		for _, l := range []int{0, 1, 7, 520, 20000} {
			value := func(r int) []byte { return bytes.Repeat([]byte{byte(r + l)}, l) }
			all, err := w.allgatherInternal(ctx, members, 100+k, value(me))
			must(err, "allgather")
			for r := range n {
				switch {
				case !slices.Contains(members, r) && all[r] != nil:
					failf("members %v, length %d: a value from non-member %d", members, l, r)
				case slices.Contains(members, r) && !bytes.Equal(all[r], value(r)):
					failf("members %v, length %d: rank %d's value %x", members, l, r, all[r])
				}
			}
		}
		buf := []byte{byte(me + 1), 0, 0, 0}
		must(w.treeAllreduce(ctx, members, 110+k, buf, func(acc, in []byte) { acc[0] += in[0] }), "allreduce")
		want := 0
		for _, r := range members {
			want += r + 1
		}
		if int(buf[0]) != want%256 {
			failf("members %v: allreduce %d, want %d", members, buf[0], want%256)
		}
	}
	return nil
}

// progTreeDeath: rank 3, a leaf's parent in the tree of 8, is killed
// before it exchanges; every other member returns, with an error matching
// ErrProcFailed, instead of waiting for a value that will not come.
func progTreeDeath(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	if w.Rank() == 3 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	_, err := w.allgatherInternal(ctx, allRanks(w.Size()), 100, []byte{1, 2, 3})
	if !errors.Is(err, ErrProcFailed) {
		failf("allgather with rank 3 dead: %v", err)
	}
	err = w.treeAllreduce(ctx, allRanks(w.Size()), 101, []byte{1}, func(acc, in []byte) {})
	if !errors.Is(err, ErrProcFailed) {
		failf("allreduce with rank 3 dead: %v", err)
	}
	return nil
}

// TestTreeExchange: the exchanges of communicator creation over 1, 2, 5,
// 8 and 13 ranks, and with a member dead.
func TestTreeExchange(t *testing.T) {
	for _, n := range []int{1, 2, 5, 8, 13} {
		runOK(t, n, "tree")
	}
	out, errs, _ := runJob(t, 8, "treedeath", true)
	for r := 0; r < 8; r++ {
		if r != 3 && !strings.Contains(out, "["+string(rune('0'+r))+"] rank "+string(rune('0'+r))+" ok") {
			t.Fatalf("rank %d did not finish\n%s\n%s", r, out, errs)
		}
	}
}
