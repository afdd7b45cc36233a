//go:build linux

package perf

import (
	"context"
	"time"

	"github.com/rivet-hpc/rivet/verbs"
)

// bw is ib_write_bw and ib_read_bw: keep TxDepth requests outstanding,
// signal one in cqMod, and time the whole stream.
func (e *env) bw(ctx context.Context, size int) (*Result, error) {
	_, _, off := e.halves(size)
	op := verbs.OpRDMAWrite
	if e.cfg.Test == ReadBW {
		op = verbs.OpRDMARead
	}
	wr := verbs.SendWR{Op: op, Local: []verbs.SGE{{MR: e.mr, Length: uint32(size)}}, Remote: e.remote.At(off)}
	iters, depth := e.cfg.Iters, e.cfg.TxDepth
	mod := min(cqMod, depth)
	posted, done := 0, 0
	var peak float64
	last := nanotime()
	begin := last
	deadline := time.Now().Add(spinLimit)
	for spins := 0; done < iters; spins++ {
		for posted < iters && posted-done < depth {
			wr.Flags = 0
			if size <= e.cfg.Inline && op == verbs.OpRDMAWrite {
				wr.Flags |= verbs.Inline
			}
			if (posted+1)%mod == 0 || posted+1 == iters {
				wr.Flags |= verbs.Signaled
			}
			if err := e.qp.PostSend(wr); err != nil {
				return nil, err
			}
			posted++
		}
		n, err := e.reap(e.scq)
		if err != nil {
			return nil, err
		}
		for i := 0; i < n; i++ {
			k := min(mod, iters-done)
			done += k
			now := nanotime()
			if dt := now - last; dt > 0 {
				peak = max(peak, float64(k*size)/(float64(dt)/1e9))
			}
			last = now
			deadline = time.Now().Add(spinLimit)
		}
		if n == 0 && spins&0xffff == 0xffff {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if time.Now().After(deadline) {
				return nil, errTimeout
			}
		}
	}
	secs := float64(nanotime()-begin) / 1e9
	const mib = 1 << 20
	return &Result{Size: size, Iters: iters, BWPeak: peak / mib, BWAvg: float64(size*iters) / secs / mib,
		MsgRate: float64(iters) / secs / 1e6}, nil
}
