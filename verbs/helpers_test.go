//go:build linux

package verbs

import (
	"context"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/internal/testutil"
)

// side is one end of a test connection: its own device context, PD, CQs,
// QP and one registered buffer.
type side struct {
	opened   []interface{ Close() error } // in creation order
	ctx      *Context
	pd       *PD
	scq, rcq *CQ
	qp       *QP
	mr       *MR
	gid      hw.GID
}

type sideConfig struct {
	QPConfig
	bufSize    int
	cqSize     int
	unlockedCQ bool // CQConfig.Unlocked for both CQs
}

func openSide(t testing.TB, dev string, cfg sideConfig) *side {
	t.Helper()
	ctx, err := Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	s := &side{ctx: ctx, opened: []interface{ Close() error }{ctx}}
	t.Cleanup(func() { s.close(t) })
	if s.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	s.opened = append(s.opened, s.pd)
	if cfg.cqSize == 0 {
		cfg.cqSize = 1024
	}
	if s.scq, err = ctx.NewCQ(CQConfig{Size: cfg.cqSize, Unlocked: cfg.unlockedCQ}); err != nil {
		t.Fatal(err)
	}
	s.opened = append(s.opened, s.scq)
	if s.rcq, err = ctx.NewCQ(CQConfig{Size: cfg.cqSize, Unlocked: cfg.unlockedCQ}); err != nil {
		t.Fatal(err)
	}
	s.opened = append(s.opened, s.rcq)
	if cfg.bufSize == 0 {
		cfg.bufSize = 1 << 20
	}
	if s.mr, err = s.pd.Alloc(cfg.bufSize, AccessAll); err != nil {
		t.Fatal(err)
	}
	s.opened = append(s.opened, s.mr)
	qc := cfg.QPConfig
	qc.SendCQ, qc.RecvCQ = s.scq, s.rcq
	if s.qp, err = s.pd.NewQP(qc); err != nil {
		t.Fatal(err)
	}
	s.opened = append(s.opened, s.qp)
	d := ctx.Device()
	g, err := hw.GIDByNetdev(d.Ports[0].Netdev)
	if err != nil {
		t.Fatal(err)
	}
	s.gid = g.GID
	return s
}

// close closes what openSide made, children first; every Close must work.
func (s *side) close(t testing.TB) {
	t.Helper()
	for i := len(s.opened) - 1; i >= 0; i-- {
		if err := s.opened[i].Close(); err != nil {
			t.Errorf("close %T: %v", s.opened[i], err)
		}
	}
}

func (s *side) endpoint() Endpoint { return s.qp.Endpoint(s.gid) }

// connectPair opens two sides on devA and devB (the same device means
// loopback RC) and connects their QPs.
func connectPair(t testing.TB, devA, devB string, cfg sideConfig) (*side, *side) {
	t.Helper()
	a, b := openSide(t, devA, cfg), openSide(t, devB, cfg)
	cc := ConnectConfig{GIDIndex: -1}
	if err := a.qp.Connect(b.endpoint(), cc); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.endpoint(), cc); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// devicePairs are the (A, B) device pairs data tests run over: loopback on
// the first device, and across two devices when the topology has them.
func devicePairs(t *testing.T) [][2]string {
	devs := testutil.RXEDevices(t)
	pairs := [][2]string{{devs[0], devs[0]}}
	if len(devs) > 1 {
		pairs = append(pairs, [2]string{devs[0], devs[1]})
	}
	return pairs
}

// waitWC busy-polls cq until n completions arrived or the limit passed.
func waitWC(t testing.TB, cq *CQ, n int, limit time.Duration) []WorkCompletion {
	t.Helper()
	wcs := make([]WorkCompletion, n)
	got := 0
	deadline := time.Now().Add(limit)
	for got < n {
		k, err := cq.Poll(wcs[got:])
		if err != nil {
			t.Fatal(err)
		}
		got += k
		if k == 0 && time.Now().After(deadline) {
			t.Fatalf("%d of %d completions after %v", got, n, limit)
		}
	}
	return wcs
}

func mustOK(t testing.TB, wcs []WorkCompletion) {
	t.Helper()
	for i := range wcs {
		if err := wcs[i].Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
