//go:build linux

package fabric

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

func init() { progs.Add("onesided", progOneSided) }

// progOneSided: every rank exposes 1 MiB; each writes into and reads back
// from its right neighbour's memory (from Go memory, staged, and from
// AllocMem memory, in place), and all of them fetch-add and
// compare-and-swap words of rank 0's.
func progOneSided(ctx context.Context, ep *Endpoint) error {
	w := ep.World()
	me, n := w.Rank(), w.Size()
	right, left := (me+1)%n, (me+n-1)%n
	const size = 1 << 20
	mem, err := ep.AllocMem(size)
	must(err, "AllocMem")
	defer func() { must(ep.FreeMem(mem), "FreeMem") }()
	local, err := ep.Expose(mem)
	if ep.Provider(right) == "shm" {
		// Without verbs there is nothing to expose memory to.
		if !errors.Is(err, ErrNotSupported) {
			failf("Expose without the verbs provider: %v", err)
		}
		if err := ep.Put(ctx, right, RemoteMem{Len: 8}, 0, []byte{1}); !errors.Is(err, ErrNotSupported) {
			failf("Put to a peer over shm: %v", err)
		}
		return nil
	}
	must(err, "Expose")
	if _, err := ep.Expose(make([]byte, 64)); !errors.Is(err, ErrInvalid) {
		failf("Expose of Go memory: %v", err)
	}
	// Everyone learns everyone's memory.
	keys := make([]RemoteMem, n)
	kb, _ := local.MarshalBinary()
	var reqs []Request
	bufs := make([][]byte, n)
	for r := 0; r < n; r++ {
		if r == me {
			keys[r] = local
			continue
		}
		bufs[r] = make([]byte, RemoteMemSize)
		rq, _ := w.Irecv(bufs[r], r, 1)
		sq, _ := w.Isend(kb, r, 1)
		reqs = append(reqs, rq, sq)
	}
	must(WaitAll(ctx, reqs, nil), "key exchange")
	for r := 0; r < n; r++ {
		if r != me {
			must(keys[r].UnmarshalBinary(bufs[r]), "UnmarshalBinary")
		}
	}
	sync := func() {
		for r := 0; r < n; r++ {
			if r != me {
				_, err := w.Sendrecv(ctx, nil, r, 2, nil, r, 2)
				must(err, "sync")
			}
		}
	}

	// Puts: 64 KiB from Go memory at 0, 256 KiB from AllocMem at 64 KiB,
	// and a 1-byte put at the very end.
	heap := pattern(64<<10, me)
	reg, err := ep.AllocMem(256 << 10)
	must(err, "AllocMem")
	defer func() { must(ep.FreeMem(reg), "FreeMem") }()
	copy(reg, pattern(256<<10, me+100))
	must(ep.Put(ctx, right, keys[right], 0, heap), "put heap")
	must(ep.Put(ctx, right, keys[right], 64<<10, reg), "put registered")
	must(ep.Put(ctx, right, keys[right], size-1, []byte{byte(me)}), "put last byte")
	must(ep.Flush(ctx, right), "flush puts")
	if is, done := ep.oneSidedCounts(right); is != 3 || done != 3 {
		failf("one-sided counts %d issued, %d done; want 3, 3", is, done)
	}
	sync()
	if !bytes.Equal(mem[:64<<10], pattern(64<<10, left)) || !bytes.Equal(mem[64<<10:320<<10], pattern(256<<10, left+100)) || mem[size-1] != byte(left) {
		failf("the left neighbour's puts did not land")
	}
	// Gets: read back what we wrote, into Go memory and into AllocMem.
	back := make([]byte, 64<<10)
	must(ep.Get(ctx, right, keys[right], 0, back), "get heap")
	clear(reg)
	must(ep.Get(ctx, right, keys[right], 64<<10, reg), "get registered")
	must(ep.Flush(ctx, right), "flush gets")
	if !bytes.Equal(back, heap) || !bytes.Equal(reg, pattern(256<<10, me+100)) {
		failf("gets read back something else")
	}
	sync()

	// Atomics on rank 0's words 0 (a counter) and 8 (a lock).
	if me == 0 {
		clear(mem[:16])
	}
	sync()
	const adds = 50
	var got [adds]uint64
	for i := range got {
		must(ep.FetchAndAdd(ctx, 0, keys[0], 0, 1, &got[i]), "fetch-add")
	}
	var old uint64 = 99
	must(ep.CompareAndSwap(ctx, 0, keys[0], 8, 0, uint64(me+1), &old), "compare-and-swap")
	must(ep.Flush(ctx, 0), "flush atomics")
	for i := 1; i < adds; i++ {
		if got[i] <= got[i-1] {
			failf("fetch-add results not increasing: %v", got)
		}
	}
	winners := make([]byte, 1)
	if old == 0 {
		winners[0] = 1
	}
	// Rank 0 counts the winners and checks the counter.
	if me == 0 {
		total := int(winners[0])
		for r := 1; r < n; r++ {
			b := make([]byte, 1)
			_, err := w.Recv(ctx, b, r, 3)
			must(err, "recv winner")
			total += int(b[0])
		}
		if c := binary.NativeEndian.Uint64(mem); c != adds*uint64(n) {
			failf("counter %d after %d fetch-adds", c, adds*n)
		}
		if l := binary.NativeEndian.Uint64(mem[8:]); total != 1 || l == 0 || l > uint64(n) {
			failf("compare-and-swap: %d winners, lock word %d", total, l)
		}
	} else {
		must(w.Send(ctx, winners, 0, 3), "send winner")
	}

	// Bad input never reaches the NIC.
	if err := ep.Put(ctx, right, keys[right], size-3, make([]byte, 4)); !errors.Is(err, ErrInvalid) {
		failf("put past the end: %v", err)
	}
	var r uint64
	if err := ep.FetchAndAdd(ctx, right, keys[right], 4, 1, &r); !errors.Is(err, ErrInvalid) {
		failf("unaligned fetch-add: %v", err)
	}
	// This process's own memory, through the loopback pair.
	must(ep.Put(ctx, me, keys[me], 100, []byte{7, 8, 9}), "put to self")
	must(ep.Flush(ctx, me), "flush self")
	if !bytes.Equal(mem[100:103], []byte{7, 8, 9}) {
		failf("put to self did not land")
	}
	if err := ep.Get(ctx, n, keys[right], 0, back); !errors.Is(err, ErrRank) {
		failf("get from rank %d: %v", n, err)
	}
	sync()
	return nil
}

func TestOneSidedNeedsVerbs(t *testing.T) { runOK(t, 2, "onesided") }

func TestOneSided(t *testing.T) {
	devs := testutil.RXEDevices(t)
	for _, n := range []int{2, 4} {
		runOK(t, n, "onesided", "RIVET_PROVIDER=verbs", "RIVET_VERBS_DEVICE="+devs[len(devs)-1]+","+devs[0])
	}
}
