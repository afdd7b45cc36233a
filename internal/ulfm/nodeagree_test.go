package ulfm

import "testing"

// words are state words with a hook run between a Load and what follows
// it: another member's step, interleaved where shared memory allows.
type words struct {
	w      []uint64
	onLoad func(i int)
}

func (w *words) Load(i int) uint64 {
	v := w.w[i]
	if w.onLoad != nil {
		f := w.onLoad
		w.onLoad = nil
		f(i)
	}
	return v
}

func (w *words) CAS(i int, old, new uint64) bool {
	if w.w[i] != old {
		return false
	}
	w.w[i] = new
	return true
}

// TestNodeAgreement: every member ends alike — all through the node, or
// all falling back — whichever of a late publisher and a member that
// holds it failed moves its state word first.
func TestNodeAgreement(t *testing.T) {
	none := func(int) bool { return false }
	held := func(i int) bool { return i == 2 } // member 2 is held failed
	t.Run("everyone published", func(t *testing.T) {
		w := &words{w: make([]uint64, 3)}
		var as []*NodeAgreement
		for i := range 3 {
			as = append(as, NewNodeAgreement(w, i, 3, 1))
			if as[i].Publish(func() {}) != NodeWaiting {
				t.Fatalf("member %d could not publish", i)
			}
		}
		for i, a := range as {
			if st := a.Poll(none); st != NodeDone {
				t.Fatalf("member %d: %v, want done", i, st)
			}
		}
	})
	t.Run("abandoned first: the late publisher falls back too", func(t *testing.T) {
		w := &words{w: make([]uint64, 3)}
		a0, a1, a2 := NewNodeAgreement(w, 0, 3, 1), NewNodeAgreement(w, 1, 3, 1), NewNodeAgreement(w, 2, 3, 1)
		a0.Publish(func() {})
		a1.Publish(func() {})
		if st := a0.Poll(held); st != NodeFell {
			t.Fatalf("member 0: %v, want fell (2 abandoned)", st)
		}
		if st := a2.Publish(func() {}); st != NodeFell {
			t.Fatalf("member 2 published over the abandon: %v", st)
		}
		if st := a1.Poll(none); st != NodeFell {
			t.Fatalf("member 1: %v, want fell", st)
		}
	})
	t.Run("published between the look and the abandon: everyone completes", func(t *testing.T) {
		w := &words{w: make([]uint64, 3)}
		a0, a1, a2 := NewNodeAgreement(w, 0, 3, 1), NewNodeAgreement(w, 1, 3, 1), NewNodeAgreement(w, 2, 3, 1)
		a0.Publish(func() {})
		a1.Publish(func() {})
		w.onLoad = func(i int) {
			if i == 0 {
				w.onLoad = func(i int) {
					if i == 1 {
						w.onLoad = func(i int) {
							if i == 2 {
								a2.Publish(func() {}) // after 0 read its word, before its CAS
							}
						}
					}
				}
			}
		}
		if st := a0.Poll(held); st != NodeDone {
			t.Fatalf("member 0: %v, want done (2 published before the abandon)", st)
		}
		for i, a := range []*NodeAgreement{a1, a2} {
			if st := a.Poll(none); st != NodeDone {
				t.Fatalf("member %d: %v, want done", i+1, st)
			}
		}
	})
	t.Run("a member whose ctx ended publishes once", func(t *testing.T) {
		w := &words{w: make([]uint64, 2)}
		a := NewNodeAgreement(w, 0, 2, 1)
		writes := 0
		a.Publish(func() { writes++ })
		b := NewNodeAgreement(w, 0, 2, 1)
		b.Publish(func() { writes++ })
		if writes != 1 {
			t.Fatalf("published %d times", writes)
		}
	})
}
