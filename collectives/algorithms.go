//go:build linux

package collectives

import (
	"github.com/rivet-hpc/rivet/internal/reduce"

	"github.com/rivet-hpc/rivet/fabric"
)

// Schedule builders: each adds an algorithm's rounds to s for this rank
// (me of n). Buffers are byte views; esz is the element size, so blocks
// are split on element boundaries.

func barrierDissemination(s *fabric.Schedule, me, n int) {
	for k := 1; k < n; k <<= 1 {
		s.Send(nil, (me+k)%n)
		s.Recv(nil, (me-k+n)%n)
		s.Next()
	}
}

// barrierTree gathers zero-byte messages up a binomial tree to rank 0 and
// sends the release back down.
func barrierTree(s *fabric.Schedule, me, n int) {
	parent, mask := binomial(me, n)
	for m := mask >> 1; m > 0; m >>= 1 {
		if me+m < n {
			s.Recv(nil, me+m)
		}
	}
	s.Next()
	if parent >= 0 {
		s.Send(nil, parent)
		s.Next()
		s.Recv(nil, parent)
		s.Next()
	}
	for m := mask >> 1; m > 0; m >>= 1 {
		if me+m < n {
			s.Send(nil, me+m)
		}
	}
	s.Next()
}

// binomial returns a relative rank's parent (-1 at the root) in the
// binomial tree rooted at 0, and the mask below which its children lie:
// vr+m for each power of two m < mask with vr+m < n, largest subtree
// first when walked downwards.
func binomial(vr, n int) (parent, mask int) {
	parent, mask = -1, 1
	for mask < n {
		if vr&mask != 0 {
			return vr - mask, mask
		}
		mask <<= 1
	}
	return parent, mask
}

func rel(r, root, n int) int  { return (r - root + n) % n }
func abs(vr, root, n int) int { return (vr + root) % n }

func bcastBinomial(s *fabric.Schedule, buf []byte, me, n, root int) {
	vr := rel(me, root, n)
	parent, mask := binomial(vr, n)
	if parent >= 0 {
		s.Recv(buf, abs(parent, root, n))
		s.Next()
	}
	for m := mask >> 1; m > 0; m >>= 1 {
		if vr+m < n {
			s.Send(buf, abs(vr+m, root, n))
		}
	}
	s.Next()
}

// off is where block i of count elements split n ways starts (the first
// count%n blocks get one more element).
func off(count, n, i int) int { return i*(count/n) + min(i, count%n) }

// part is block i of b (count elements of esz bytes) split n ways.
func part(b []byte, esz, count, n, i int) []byte {
	return b[off(count, n, i)*esz : off(count, n, i+1)*esz]
}

// layout places n blocks in a buffer: equal blocks of blk elements when
// counts is nil, else counts[i] elements at displs[i].
type layout struct {
	counts, displs []int
	blk            int
}

func equalBlocks(blk int) layout { return layout{blk: blk} }

func (l layout) at(b []byte, esz, i int) []byte {
	if l.counts == nil {
		return b[i*l.blk*esz : (i+1)*l.blk*esz]
	}
	return b[l.displs[i]*esz : (l.displs[i]+l.counts[i])*esz]
}

func (l layout) count(i int) int {
	if l.counts == nil {
		return l.blk
	}
	return l.counts[i]
}

// bcastScatterAllgather is van de Geijn's broadcast for long messages:
// a binomial scatter of n blocks, then a ring allgather of them.
func bcastScatterAllgather(s *fabric.Schedule, buf []byte, esz, me, n, root int) {
	count := len(buf) / esz
	vr := rel(me, root, n)
	// Relative rank v owns block v. A node receives the blocks of its
	// subtree, [vr, vr+size), from its parent, and passes each child its
	// subtree's.
	span := func(lo, hi int) []byte { // blocks [lo, hi) by relative rank
		hi = min(hi, n)
		if lo >= hi {
			return nil
		}
		return buf[off(count, n, lo)*esz : off(count, n, hi)*esz]
	}
	mask := 1
	for mask < n && vr&mask == 0 {
		mask <<= 1
	}
	if vr != 0 {
		s.Recv(span(vr, vr+mask), abs(vr-mask, root, n))
		s.Next()
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < n {
			s.Send(span(vr+mask, vr+2*mask), abs(vr+mask, root, n))
		}
	}
	s.Next()
	// Blocks are in relative order; the ring runs over relative ranks.
	right, left := abs((vr+1)%n, root, n), abs((vr-1+n)%n, root, n)
	for step := 0; step < n-1; step++ {
		sb, rb := (vr-step+n)%n, (vr-step-1+n)%n
		s.Send(part(buf, esz, count, n, sb), right)
		s.Recv(part(buf, esz, count, n, rb), left)
		s.Next()
	}
}

// scratchFor returns scratch space for reductions by op: nil when op
// commutes (none is needed).
func scratchFor(s *fabric.Schedule, op reduce.Untyped, n int) []byte {
	if op.Commutative {
		return nil
	}
	return s.Scratch(n)
}

// reduceBinomial reduces acc (this rank's operand, overwritten) to
// relative rank 0, in relative-rank order; the caller keeps the order
// right for non-commutative ops by rooting at rank 0.
func reduceBinomial(s *fabric.Schedule, acc []byte, op reduce.Untyped, me, n, root int) {
	vr := rel(me, root, n)
	var tmp, scratch []byte
	for mask := 1; mask < n; mask <<= 1 {
		if vr&mask != 0 {
			s.Send(acc, abs(vr-mask, root, n))
			s.Next()
			return
		}
		if src := vr | mask; src < n {
			if tmp == nil {
				tmp, scratch = s.Scratch(len(acc)), scratchFor(s, op, len(acc))
			}
			s.Recv(tmp, abs(src, root, n))
			s.ReduceLeft(op.Fn, acc, tmp, scratch)
			s.Next()
		}
	}
}

// allreduceRecursiveDoubling: with n not a power of two, the first
// 2·rem ranks pair up (even into odd) so that a power of two take part,
// exchange and reduce log2 times, and the odd ones hand the result back.
// Operand order is kept, so it serves non-commutative ops too.
func allreduceRecursiveDoubling(s *fabric.Schedule, acc []byte, op reduce.Untyped, me, n int) {
	pof2 := 1
	for pof2*2 <= n {
		pof2 *= 2
	}
	rem := n - pof2
	tmp, scratch := s.Scratch(len(acc)), scratchFor(s, op, len(acc))
	newrank := -1
	switch {
	case me < 2*rem && me%2 == 0:
		s.Send(acc, me+1)
		s.Next()
	case me < 2*rem:
		s.Recv(tmp, me-1)
		s.Reduce(op.Fn, tmp, acc)
		s.Next()
		newrank = me / 2
	default:
		newrank = me - rem
	}
	if newrank >= 0 {
		for mask := 1; mask < pof2; mask <<= 1 {
			np := newrank ^ mask
			partner := np + rem
			if np < rem {
				partner = np*2 + 1
			}
			s.Send(acc, partner)
			s.Recv(tmp, partner)
			if np < newrank {
				s.Reduce(op.Fn, tmp, acc)
			} else {
				s.ReduceLeft(op.Fn, acc, tmp, scratch)
			}
			s.Next()
		}
	}
	if me < 2*rem {
		if me%2 == 1 {
			s.Send(acc, me-1)
		} else {
			s.Recv(acc, me+1)
		}
		s.Next()
	}
}

// allreduceRing: a ring reduce-scatter then a ring allgather over n
// blocks — bandwidth-optimal for long vectors; commutative ops only. Out
// of place (send not nil) it needs no copy and no scratch: each block is
// received into recv and reduced there with this process's operand from
// send, and the allgather then overwrites every block of recv.
func allreduceRing(s *fabric.Schedule, send, acc []byte, op reduce.Untyped, esz, me, n int) {
	count := len(acc) / esz
	right, left := (me+1)%n, (me-1+n)%n
	var tmp []byte
	if send == nil {
		tmp = s.Scratch(len(part(acc, esz, count, n, 0)))
	}
	for step := 0; step < n-1; step++ {
		sb, rb := (me-step+n)%n, (me-step-1+n)%n
		dst := part(acc, esz, count, n, rb)
		out := part(acc, esz, count, n, sb)
		if send != nil && step == 0 {
			out = part(send, esz, count, n, sb) // acc holds nothing of ours yet
		}
		if send != nil {
			s.Send(out, right)
			s.Recv(dst, left)
			s.Reduce(op.Fn, part(send, esz, count, n, rb), dst)
		} else {
			in := tmp[:len(dst)]
			s.Send(out, right)
			s.Recv(in, left)
			s.Reduce(op.Fn, in, dst)
		}
		s.Next()
	}
	for step := 0; step < n-1; step++ {
		sb, rb := (me+1-step+n)%n, (me-step+n)%n
		s.Send(part(acc, esz, count, n, sb), right)
		s.Recv(part(acc, esz, count, n, rb), left)
		s.Next()
	}
}

// allreduceReduceBcast: reduce to rank 0, then broadcast.
func allreduceReduceBcast(s *fabric.Schedule, acc []byte, op reduce.Untyped, esz, me, n int) {
	reduceBinomial(s, acc, op, me, n, 0)
	bcastBinomial(s, acc, me, n, 0)
}

// gatherLinear: the root receives every block at once (Gather, Gatherv).
func gatherLinear(s *fabric.Schedule, send, recv []byte, l layout, esz, me, n, root int) {
	if me != root {
		s.Send(send, root)
		s.Next()
		return
	}
	for r := 0; r < n; r++ {
		if r != me {
			s.Recv(l.at(recv, esz, r), r)
		}
	}
	s.Next()
}

// subtree returns the lowest set bit of relative rank vr (for the root,
// the first power of two ≥ n) and the size of vr's binomial subtree,
// relative ranks [vr, vr+sub).
func subtree(vr, n int) (mask, sub int) {
	mask = 1
	for mask < n && vr&mask == 0 {
		mask <<= 1
	}
	if vr == 0 {
		return mask, n
	}
	return mask, min(mask, n-vr)
}

// gatherBinomial: each node gathers its subtree's blocks, in relative
// order, and passes them up; the root puts them in rank order.
func gatherBinomial(s *fabric.Schedule, send, recv []byte, me, n, root int) {
	blk := len(send)
	vr := rel(me, root, n)
	mask, sub := subtree(vr, n)
	tmp := s.Scratch(sub * blk)
	copy(tmp, send)
	for m := 1; m < mask && vr+m < n; m <<= 1 {
		s.Recv(tmp[m*blk:min(2*m, n-vr)*blk], abs(vr+m, root, n))
	}
	s.Next()
	if vr != 0 {
		s.Send(tmp, abs(vr-mask, root, n))
		s.Next()
		return
	}
	for v := 0; v < n; v++ {
		r := abs(v, root, n)
		s.Copy(recv[r*blk:(r+1)*blk], tmp[v*blk:(v+1)*blk])
	}
	s.Next()
}

func scatterLinear(s *fabric.Schedule, send, recv []byte, l layout, esz, me, n, root int) {
	if me != root {
		s.Recv(recv, root)
		s.Next()
		return
	}
	for r := 0; r < n; r++ {
		if r != me {
			s.Send(l.at(send, esz, r), r)
		}
	}
	s.Next()
}

// scatterBinomial: the root sends each child its subtree's blocks, in
// relative order, and so on down.
func scatterBinomial(s *fabric.Schedule, send, recv []byte, me, n, root int) {
	blk := len(recv)
	vr := rel(me, root, n)
	mask, sub := subtree(vr, n)
	tmp := s.Scratch(sub * blk)
	if vr == 0 {
		for v := 0; v < n; v++ {
			r := abs(v, root, n)
			copy(tmp[v*blk:(v+1)*blk], send[r*blk:(r+1)*blk])
		}
	} else {
		s.Recv(tmp, abs(vr-mask, root, n))
		s.Next()
	}
	for m := mask >> 1; m > 0; m >>= 1 {
		if vr+m < n {
			s.Send(tmp[m*blk:min(2*m, n-vr)*blk], abs(vr+m, root, n))
		}
	}
	s.Copy(recv, tmp[:blk])
	s.Next()
}

// allgatherRing: n-1 steps, each passing one block to the right.
func allgatherRing(s *fabric.Schedule, recv []byte, l layout, esz, me, n int) {
	right, left := (me+1)%n, (me-1+n)%n
	for step := 0; step < n-1; step++ {
		s.Send(l.at(recv, esz, (me-step+n)%n), right)
		s.Recv(l.at(recv, esz, (me-step-1+n)%n), left)
		s.Next()
	}
}

// allgatherRecursiveDoubling: log2 n exchanges of doubling halves; n must
// be a power of two (the selector sees to it).
func allgatherRecursiveDoubling(s *fabric.Schedule, recv []byte, blk, me, n int) {
	for mask := 1; mask < n; mask <<= 1 {
		partner := me ^ mask
		mine, theirs := me&^(mask-1), partner&^(mask-1)
		s.Send(recv[mine*blk:(mine+mask)*blk], partner)
		s.Recv(recv[theirs*blk:(theirs+mask)*blk], partner)
		s.Next()
	}
}

// allgatherBruck: ceil(log2 n) steps for any n; blocks gather in a
// rotated buffer that is put in rank order at the end.
func allgatherBruck(s *fabric.Schedule, recv []byte, blk, me, n int) {
	tmp := s.Scratch(n * blk)
	copy(tmp, recv[me*blk:(me+1)*blk])
	for k := 1; k < n; k <<= 1 {
		cnt := min(k, n-k)
		s.Send(tmp[:cnt*blk], (me-k+n)%n)
		s.Recv(tmp[k*blk:(k+cnt)*blk], (me+k)%n)
		s.Next()
	}
	for i := 0; i < n; i++ {
		r := (me + i) % n
		s.Copy(recv[r*blk:(r+1)*blk], tmp[i*blk:(i+1)*blk])
	}
	s.Next()
}

// alltoallPairwise: n-1 steps, sending to me+k and receiving from me-k.
func alltoallPairwise(s *fabric.Schedule, send, recv []byte, sl, rl layout, esz, me, n int) {
	copy(rl.at(recv, esz, me), sl.at(send, esz, me))
	for k := 1; k < n; k++ {
		to, from := (me+k)%n, (me-k+n)%n
		s.Send(sl.at(send, esz, to), to)
		s.Recv(rl.at(recv, esz, from), from)
		s.Next()
	}
}

// alltoallLinear: every message at once, in one round.
func alltoallLinear(s *fabric.Schedule, send, recv []byte, sl, rl layout, esz, me, n int) {
	copy(rl.at(recv, esz, me), sl.at(send, esz, me))
	for k := 1; k < n; k++ {
		to, from := (me+k)%n, (me-k+n)%n
		s.Send(sl.at(send, esz, to), to)
		s.Recv(rl.at(recv, esz, from), from)
	}
	s.Next()
}

// alltoallBruck: ceil(log2 n) steps for small blocks: rotate, then in
// step k send every block whose index has bit k set to me+k, and rotate
// back at the end.
func alltoallBruck(s *fabric.Schedule, send, recv []byte, blk, me, n int) {
	tmp := s.Scratch(n * blk)
	for i := 0; i < n; i++ { // tmp[i] = the block for me+i
		r := (me + i) % n
		copy(tmp[i*blk:(i+1)*blk], send[r*blk:(r+1)*blk])
	}
	out := s.Scratch((n + 1) / 2 * blk) // at most half the blocks move per step
	in := s.Scratch((n + 1) / 2 * blk)
	for k := 1; k < n; k <<= 1 {
		j := 0
		for i := 0; i < n; i++ {
			if i&k != 0 {
				s.Copy(out[j*blk:(j+1)*blk], tmp[i*blk:(i+1)*blk])
				j++
			}
		}
		s.Next()
		s.Send(out[:j*blk], (me+k)%n)
		s.Recv(in[:j*blk], (me-k+n)%n)
		j = 0
		for i := 0; i < n; i++ {
			if i&k != 0 {
				s.Copy(tmp[i*blk:(i+1)*blk], in[j*blk:(j+1)*blk])
				j++
			}
		}
		s.Next()
	}
	for i := 0; i < n; i++ { // tmp[i] now came from me-i
		r := (me - i + n) % n
		s.Copy(recv[r*blk:(r+1)*blk], tmp[i*blk:(i+1)*blk])
	}
	s.Next()
}

// scanRecursiveDoubling: inclusive (or, with exclusive, exclusive)
// prefix reduction in rank order in log2 n exchanges.
func scanRecursiveDoubling(s *fabric.Schedule, send, recv []byte, op reduce.Untyped, me, n int, exclusive bool) {
	partial := s.Scratch(len(send))
	copy(partial, send)
	tmp, scratch := s.Scratch(len(send)), scratchFor(s, op, len(send))
	have := !exclusive // whether recv holds a value yet
	if !exclusive {
		copy(recv, send)
	}
	for mask := 1; mask < n; mask <<= 1 {
		partner := me ^ mask
		if partner >= n {
			continue
		}
		s.Send(partial, partner)
		s.Recv(tmp, partner)
		if partner < me {
			if have {
				s.Reduce(op.Fn, tmp, recv)
			} else {
				s.Copy(recv, tmp)
			}
			s.Reduce(op.Fn, tmp, partial)
			have = true
		} else {
			s.ReduceLeft(op.Fn, partial, tmp, scratch)
		}
		s.Next()
	}
}

// reduceScatterRing: n-1 steps passing partial sums of one block to the
// right; rank me ends with block me reduced. Commutative ops only.
func reduceScatterRing(s *fabric.Schedule, acc []byte, l layout, op reduce.Untyped, esz, me, n int) {
	right, left := (me+1)%n, (me-1+n)%n
	most := 0
	for i := 0; i < n; i++ {
		most = max(most, l.count(i))
	}
	tmp := s.Scratch(most * esz)
	for step := 0; step < n-1; step++ {
		sb, rb := (me-step-1+2*n)%n, (me-step-2+2*n)%n
		dst := l.at(acc, esz, rb)
		in := tmp[:len(dst)]
		s.Send(l.at(acc, esz, sb), right)
		s.Recv(in, left)
		s.Reduce(op.Fn, in, dst)
		s.Next()
	}
}

// allreduceRabenseifner: a reduce-scatter by recursive halving, then an
// allgather by recursive doubling, over the power of two of ranks left
// after folding the first 2·rem in pairs (as in recursive doubling). It
// moves as little data as the ring in 2·log2 p rounds instead of 2(p-1),
// and keeps operand order, so it serves non-commutative ops too.
func allreduceRabenseifner(s *fabric.Schedule, acc []byte, op reduce.Untyped, esz, me, n int) {
	p := 1
	for p*2 <= n {
		p *= 2
	}
	rem := n - p
	count := len(acc) / esz
	scratch := scratchFor(s, op, len(acc))
	real := func(np int) int {
		if np < rem {
			return np*2 + 1
		}
		return np + rem
	}
	r := -1
	switch {
	case me < 2*rem && me%2 == 0:
		s.Send(acc, me+1)
		s.Next()
	case me < 2*rem:
		tmp := s.Scratch(len(acc))
		s.Recv(tmp, me-1)
		s.Reduce(op.Fn, tmp, acc)
		s.Next()
		r = me / 2
	default:
		r = me - rem
	}
	if r >= 0 {
		span := func(lo, hi int) []byte { return acc[off(count, p, lo)*esz : off(count, p, hi)*esz] }
		tmp := s.Scratch(len(span(0, p/2+p%2)) + esz)
		// Halving pairs neighbours first (distance 1, then 2, …), so each
		// exchange joins two contiguous runs of ranks and operand order
		// holds; this process ends with the block at the bit-reversal of
		// its rank, and the allgather undoes the steps in reverse.
		lo, hi := 0, p
		for dist := 1; dist < p; dist *= 2 {
			partner := r ^ dist
			mid := lo + (hi-lo)/2
			var keepLo, keepHi, giveLo, giveHi int
			if r&dist == 0 {
				keepLo, keepHi, giveLo, giveHi = lo, mid, mid, hi
			} else {
				keepLo, keepHi, giveLo, giveHi = mid, hi, lo, mid
			}
			keep := span(keepLo, keepHi)
			in := tmp[:len(keep)]
			s.Send(span(giveLo, giveHi), real(partner))
			s.Recv(in, real(partner))
			if partner < r {
				s.Reduce(op.Fn, in, keep)
			} else {
				var sc []byte
				if scratch != nil {
					sc = scratch[:len(keep)]
				}
				s.ReduceLeft(op.Fn, keep, in, sc)
			}
			s.Next()
			lo, hi = keepLo, keepHi
		}
		for dist := p / 2; dist > 0; dist /= 2 {
			partner := r ^ dist
			w := hi - lo
			plo, phi := hi, hi+w
			if r&dist != 0 {
				plo, phi = lo-w, lo
			}
			s.Send(span(lo, hi), real(partner))
			s.Recv(span(plo, phi), real(partner))
			s.Next()
			lo, hi = min(lo, plo), max(hi, phi)
		}
	}
	if me < 2*rem {
		if me%2 == 1 {
			s.Send(acc, me-1)
		} else {
			s.Recv(acc, me+1)
		}
		s.Next()
	}
}
