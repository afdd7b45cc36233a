//go:build linux

package verbs

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

// TestSRQ: two senders, each connected to its own queue pair at one
// receiver; both receiver queue pairs take their receives from one SRQ.
// Every message lands in the next buffer of the shared pool, whichever
// queue pair it came to, completes on the receive CQ with that queue
// pair's number, and holds exactly what was sent. A QP with an SRQ
// refuses receives of its own; the SRQ refuses to close while QPs use it.
func TestSRQ(t *testing.T) {
	dev := testutil.RXEDevices(t)[0]
	ctx, err := Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	if ctx.Attr().MaxSRQ == 0 {
		t.Fatalf("%s reports no SRQs", dev)
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	if _, err := pd.NewSRQ(SRQConfig{MaxWR: ctx.Attr().MaxSRQWR + 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("an SRQ deeper than the device's: %v, want ErrInvalid", err)
	}
	srq, err := pd.NewSRQ(SRQConfig{MaxWR: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer srq.Close()
	if srq.Cap() < 16 || srq.Free() != srq.Cap() {
		t.Fatalf("SRQ capacity %d, free %d", srq.Cap(), srq.Free())
	}
	scq, err := ctx.NewCQ(CQConfig{Size: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer scq.Close()
	rcq, err := ctx.NewCQ(CQConfig{Size: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer rcq.Close()
	const slot = 4096
	mr, err := pd.Alloc(16*slot, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	g, err := hw.GIDByNetdev(ctx.Device().Ports[0].Netdev)
	if err != nil {
		t.Fatal(err)
	}

	var recv [2]*QP
	var send [2]*side
	for i := range recv {
		if recv[i], err = pd.NewQP(QPConfig{SendCQ: scq, RecvCQ: rcq, SRQ: srq}); err != nil {
			t.Fatal(err)
		}
		defer recv[i].Close()
		send[i] = openSide(t, dev, sideConfig{bufSize: slot})
		if err := send[i].qp.Connect(recv[i].Endpoint(g.GID), ConnectConfig{GIDIndex: -1}); err != nil {
			t.Fatal(err)
		}
		if err := recv[i].Connect(send[i].endpoint(), ConnectConfig{GIDIndex: -1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := recv[0].PostRecv(RecvWR{Local: []SGE{{MR: mr, Length: slot}}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a receive posted to a QP with an SRQ: %v, want ErrInvalid", err)
	}
	wrs := make([]RecvWR, 8)
	for i := range wrs {
		wrs[i] = RecvWR{ID: uint64(i), Local: []SGE{{MR: mr, Offset: uint64(i * slot), Length: slot}}}
	}
	if err := srq.PostRecv(wrs...); err != nil {
		t.Fatal(err)
	}

	// Three messages from each sender, interleaved.
	const per = 3
	for k := range per {
		for i, s := range send {
			msg := fmt.Sprintf("sender %d message %d", i, k)
			copy(s.mr.Bytes(), msg)
			if err := s.qp.PostSend(SendWR{ID: uint64(k), Op: OpSend, Flags: Signaled, Local: []SGE{{MR: s.mr, Length: uint32(len(msg))}}}); err != nil {
				t.Fatal(err)
			}
			mustOK(t, waitWC(t, s.scq, 1, 10*time.Second))
		}
	}
	wcs := waitWC(t, rcq, 2*per, 10*time.Second)
	mustOK(t, wcs)
	got := map[uint32]int{}
	seen := map[uint64]bool{}
	for _, wc := range wcs {
		i := 0
		if wc.QPN == recv[1].QPN() {
			i = 1
		} else if wc.QPN != recv[0].QPN() {
			t.Fatalf("a receive completed for QP %#x, not one of the SRQ's", wc.QPN)
		}
		if wc.Opcode != WCRecv || wc.ID >= uint64(len(wrs)) || seen[wc.ID] {
			t.Fatalf("completion %+v: want a receive of a buffer posted once", wc)
		}
		seen[wc.ID] = true
		body := string(mr.Bytes()[int(wc.ID)*slot:][:wc.ByteLen])
		if want := fmt.Sprintf("sender %d message %d", i, got[wc.QPN]); body != want {
			t.Errorf("QP %#x received %q, want %q (in order per connection)", wc.QPN, body, want)
		}
		got[wc.QPN]++
	}
	if got[recv[0].QPN()] != per || got[recv[1].QPN()] != per {
		t.Errorf("receives per QP: %v, want %d each", got, per)
	}
	if srq.Free() != srq.Cap()-(len(wrs)-2*per) {
		t.Errorf("SRQ free %d of %d after %d of %d receives were consumed", srq.Free(), srq.Cap(), 2*per, len(wrs))
	}

	if err := srq.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("closing an SRQ that QPs use: %v, want ErrBusy", err)
	}
	for _, qp := range recv {
		if err := qp.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Close(); err != nil {
		t.Fatalf("closing the SRQ after its QPs: %v", err)
	}
	if err := srq.PostRecv(wrs[0]); !errors.Is(err, ErrClosed) {
		t.Errorf("a receive posted to a closed SRQ: %v, want ErrClosed", err)
	}
}
