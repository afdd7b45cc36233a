//go:build linux

package verbs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

const maxMsg = 8 << 20 // rxe's port max_msg_sz

// dataSizes runs from 1 byte to the largest message, crossing the MTU
// (1024), the inline limit and page sizes.
var dataSizes = []int{1, 8, 63, 256, 257, 1024, 1025, 4096, 65537, 1 << 20, maxMsg}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
}

func equalOrReport(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes differ from byte %d", what, len(want), i)
	}
}

// TestDataPaths moves data with every operation at every size, between two
// QPs on one device (loopback RC) and between two devices.
func TestDataPaths(t *testing.T) {
	for _, p := range devicePairs(t) {
		t.Run(p[0]+"-"+p[1], func(t *testing.T) {
			cfg := sideConfig{bufSize: 2 * maxMsg, QPConfig: QPConfig{MaxInline: 256}}
			a, b := connectPair(t, p[0], p[1], cfg)
			src, dst := a.mr.Bytes(), b.mr.Bytes()
			for _, size := range dataSizes {
				inlines := []SendFlags{0}
				if size <= 256 {
					inlines = append(inlines, Inline)
				}
				for _, inl := range inlines {
					name := fmt.Sprintf("%d%s", size, map[SendFlags]string{0: "", Inline: "-inline"}[inl])
					t.Run("write-"+name, func(t *testing.T) {
						fill(src[:size], uint64(size))
						clear(dst[maxMsg : maxMsg+size])
						post(t, a, SendWR{ID: 1, Op: OpRDMAWrite, Flags: Signaled | inl,
							Local: []SGE{{MR: a.mr, Length: uint32(size)}}, Remote: b.mr.Remote().At(maxMsg)})
						equalOrReport(t, "written", dst[maxMsg:maxMsg+size], src[:size])
					})
					t.Run("send-"+name, func(t *testing.T) {
						fill(src[:size], uint64(size)+1)
						clear(dst[:size])
						if err := b.qp.PostRecv(RecvWR{ID: 2, Local: []SGE{{MR: b.mr, Length: uint32(size)}}}); err != nil {
							t.Fatal(err)
						}
						post(t, a, SendWR{ID: 3, Op: OpSendWithImm, Imm: uint32(size) * 3, Flags: Signaled | inl,
							Local: []SGE{{MR: a.mr, Length: uint32(size)}}})
						wc := waitWC(t, b.rcq, 1, 10*time.Second)
						mustOK(t, wc)
						if wc[0].ID != 2 || wc[0].Opcode != WCRecv || wc[0].ByteLen != uint32(size) ||
							wc[0].Flags&WCWithImm == 0 || wc[0].Imm != uint32(size)*3 {
							t.Errorf("receive completion %+v", wc[0])
						}
						equalOrReport(t, "received", dst[:size], src[:size])
					})
				}
				t.Run(fmt.Sprintf("read-%d", size), func(t *testing.T) {
					fill(dst[:size], uint64(size)+2)
					clear(src[maxMsg : maxMsg+size])
					post(t, a, SendWR{ID: 4, Op: OpRDMARead, Flags: Signaled,
						Local: []SGE{{MR: a.mr, Offset: maxMsg, Length: uint32(size)}}, Remote: b.mr.Remote()})
					equalOrReport(t, "read", src[maxMsg:maxMsg+size], dst[:size])
				})
				t.Run(fmt.Sprintf("write-imm-%d", size), func(t *testing.T) {
					fill(src[:size], uint64(size)+3)
					if err := b.qp.PostRecv(RecvWR{ID: 5}); err != nil {
						t.Fatal(err)
					}
					post(t, a, SendWR{ID: 6, Op: OpRDMAWriteWithImm, Imm: 0xdeadbeef, Flags: Signaled,
						Local: []SGE{{MR: a.mr, Length: uint32(size)}}, Remote: b.mr.Remote().At(7)})
					wc := waitWC(t, b.rcq, 1, 10*time.Second)
					mustOK(t, wc)
					if wc[0].ID != 5 || wc[0].Opcode != WCRecvRDMAWithImm || wc[0].Imm != 0xdeadbeef || wc[0].ByteLen != uint32(size) {
						t.Errorf("write-with-immediate completion %+v", wc[0])
					}
					equalOrReport(t, "written with immediate", dst[7:7+size], src[:size])
				})
			}
		})
	}
}

// post posts one signaled request and waits for its successful completion.
func post(t *testing.T, s *side, wr SendWR) {
	t.Helper()
	if err := s.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	wc := waitWC(t, s.scq, 1, 10*time.Second)
	mustOK(t, wc)
	if wc[0].ID != wr.ID {
		t.Fatalf("completion for %d, want %d", wc[0].ID, wr.ID)
	}
}

func TestAtomics(t *testing.T) {
	for _, p := range devicePairs(t) {
		t.Run(p[0]+"-"+p[1], func(t *testing.T) {
			a, b := connectPair(t, p[0], p[1], sideConfig{})
			target := b.mr.Remote().At(64)
			binary.NativeEndian.PutUint64(b.mr.Bytes()[64:], 100)
			result := []SGE{{MR: a.mr, Offset: 8, Length: 8}}
			old := func() uint64 { return binary.NativeEndian.Uint64(a.mr.Bytes()[8:]) }
			remote := func() uint64 { return binary.NativeEndian.Uint64(b.mr.Bytes()[64:]) }

			post(t, a, SendWR{ID: 1, Op: OpFetchAdd, Flags: Signaled, Local: result, Remote: target, CompareAdd: 23})
			if old() != 100 || remote() != 123 {
				t.Errorf("fetch-add: returned %d, remote %d; want 100, 123", old(), remote())
			}
			post(t, a, SendWR{ID: 2, Op: OpCompareSwap, Flags: Signaled, Local: result, Remote: target, CompareAdd: 999, Swap: 7})
			if old() != 123 || remote() != 123 {
				t.Errorf("failed compare-swap: returned %d, remote %d; want 123, 123", old(), remote())
			}
			post(t, a, SendWR{ID: 3, Op: OpCompareSwap, Flags: Signaled, Local: result, Remote: target, CompareAdd: 123, Swap: 1 << 60})
			if old() != 123 || remote() != 1<<60 {
				t.Errorf("compare-swap: returned %d, remote %d; want 123, 2^60", old(), remote())
			}
			// Many adds in one batch sum up.
			wrs := make([]SendWR, 50)
			for i := range wrs {
				wrs[i] = SendWR{ID: uint64(10 + i), Op: OpFetchAdd, Local: result, Remote: target, CompareAdd: 1}
			}
			wrs[len(wrs)-1].Flags = Signaled
			if err := a.qp.PostSend(wrs...); err != nil {
				t.Fatal(err)
			}
			mustOK(t, waitWC(t, a.scq, 1, 10*time.Second))
			if remote() != 1<<60+50 {
				t.Errorf("after 50 adds remote = %d", remote()-1<<60)
			}
		})
	}
}

// TestDeepQueueUnsignaled streams far more writes than the send queue
// holds, signaling one in eight: the ring wraps hundreds of times and
// slots come back as the device completes them, signaled or not. One
// goroutine does everything, so the QPs and CQs are Unlocked, as the
// fabric's are.
func TestDeepQueueUnsignaled(t *testing.T) {
	for _, p := range devicePairs(t) {
		t.Run(p[0]+"-"+p[1], func(t *testing.T) {
			a, b := connectPair(t, p[0], p[1], sideConfig{QPConfig: QPConfig{MaxSendWR: 16, MaxRecvWR: 16, Unlocked: true},
				cqSize: 64, unlockedCQ: true})
			const total, every, size = 20000, 8, 64
			src := a.mr.Bytes()
			for i := 0; i < 4096; i++ {
				binary.NativeEndian.PutUint64(src[i*size:], uint64(i))
			}
			wcs := make([]WorkCompletion, 16)
			signaled, done := 0, 0
			deadline := time.Now().Add(60 * time.Second)
			for i := 0; i < total; {
				wr := SendWR{ID: uint64(i), Op: OpRDMAWrite, Local: []SGE{{MR: a.mr, Offset: uint64(i%4096) * size, Length: size}},
					Remote: b.mr.Remote().At(uint64(i%4096) * size)}
				if i%every == every-1 {
					wr.Flags = Signaled
				}
				err := a.qp.PostSend(wr)
				if errors.Is(err, ErrQueueFull) {
					if time.Now().After(deadline) {
						t.Fatalf("stuck at %d of %d", i, total)
					}
				} else if err != nil {
					t.Fatal(err)
				} else {
					if wr.Flags&Signaled != 0 {
						signaled++
					}
					i++
				}
				n, _ := a.scq.Poll(wcs)
				mustOK(t, wcs[:n])
				done += n
			}
			mustOK(t, waitWC(t, a.scq, signaled-done, 30*time.Second))
			// The last write was signaled: every one before it is
			// complete too.
			if n := a.qp.SendQueued(); n != 0 {
				t.Errorf("%d sends queued after the last completed", n)
			}
			for i := 0; i < 4096; i++ {
				if got := binary.NativeEndian.Uint64(b.mr.Bytes()[i*size:]); got != uint64(i) {
					t.Fatalf("slot %d holds %d", i, got)
				}
			}
			t.Logf("%d writes through a %d-slot send ring (%d laps)", total, a.qp.sq.Capacity(), total/int(a.qp.sq.Capacity()))

			// The receive ring wraps too: 5000 messages through 16 slots.
			const msgs = 5000
			posted, got := 0, 0
			for posted < 16 {
				if err := b.qp.PostRecv(RecvWR{ID: uint64(posted), Local: []SGE{{MR: b.mr, Offset: uint64(posted%16) * 8, Length: 8}}}); err != nil {
					t.Fatal(err)
				}
				posted++
			}
			rwcs := make([]WorkCompletion, 16)
			sent := 0
			for got < msgs {
				if sent < msgs && sent-got < 8 {
					binary.NativeEndian.PutUint64(src, uint64(sent))
					if err := a.qp.PostSend(SendWR{ID: uint64(sent), Op: OpSend, Flags: Signaled | Inline, Local: []SGE{{MR: a.mr, Length: 8}}}); err == nil {
						sent++
					} else if !errors.Is(err, ErrQueueFull) {
						t.Fatal(err)
					}
				}
				n, _ := a.scq.Poll(wcs)
				mustOK(t, wcs[:n])
				n, _ = b.rcq.Poll(rwcs)
				for _, wc := range rwcs[:n] {
					if err := wc.Err(); err != nil {
						t.Fatal(err)
					}
					off := (wc.ID % 16) * 8
					if v := binary.NativeEndian.Uint64(b.mr.Bytes()[off:]); v != uint64(got) {
						t.Fatalf("message %d carried %d (out of order?)", got, v)
					}
					got++
					if posted < msgs {
						if err := b.qp.PostRecv(RecvWR{ID: uint64(posted), Local: []SGE{{MR: b.mr, Offset: uint64(posted%16) * 8, Length: 8}}}); err != nil {
							t.Fatal(err)
						}
						posted++
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("received %d of %d", got, msgs)
				}
			}
		})
	}
}
