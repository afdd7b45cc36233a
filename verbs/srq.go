//go:build linux

package verbs

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/rxe"
	"github.com/rivet-hpc/rivet/internal/uverbs"
)

// SRQConfig configures a shared receive queue.
type SRQConfig struct {
	// MaxWR is the number of receives it holds at least (the device may
	// give more: see SRQ.Cap); 0 means 128.
	MaxWR int
	// MaxSGE is the most SGEs a receive may have; 0 means 1.
	MaxSGE int
}

// SRQ is a shared receive queue (ibv_srq): receives that every queue
// pair made with it (QPConfig.SRQ) consumes, in the order messages
// arrive, whichever peer sent them. The receive memory a process sets
// aside is then one pool, whatever the number of its connections; the
// completions still come on each queue pair's receive CQ, and
// WorkCompletion.QPN says which queue pair took the message. A send that
// finds the SRQ empty waits for the receiver-not-ready retries
// (ConnectConfig.RNRRetry) — the sender's NIC sends again; nothing is
// dropped while they last.
type SRQ struct {
	pd     *PD
	handle uint32
	srqn   uint32

	lifetime // children: the QPs that use it; mu guards ring
	ring     *rxe.Queue
	maxSGE   int
}

// NewSRQ creates a shared receive queue.
func (pd *PD) NewSRQ(cfg SRQConfig) (*SRQ, error) {
	c := pd.ctx
	if cfg.MaxWR == 0 {
		cfg.MaxWR = 128
	}
	if cfg.MaxSGE == 0 {
		cfg.MaxSGE = 1
	}
	switch {
	case cfg.MaxWR < 1 || cfg.MaxWR > c.attr.MaxSRQWR:
		return nil, invalid("SRQ depth %d (1 to %d)", cfg.MaxWR, c.attr.MaxSRQWR)
	case cfg.MaxSGE < 1 || cfg.MaxSGE > c.attr.MaxSRQSGE:
		return nil, invalid("SRQ SGE count %d (1 to %d)", cfg.MaxSGE, c.attr.MaxSRQSGE)
	}
	if err := pd.acquire(); err != nil {
		return nil, err
	}
	r, err := c.uv.CreateSRQ(uverbs.CreateSRQ{UserHandle: c.nextID.Add(1), PDHandle: pd.handle,
		MaxWR: uint32(cfg.MaxWR), MaxSGE: uint32(cfg.MaxSGE)})
	if err != nil {
		pd.release()
		return nil, c.wrap(err)
	}
	s := &SRQ{pd: pd, handle: r.SRQHandle, srqn: r.SRQN, lifetime: lifetime{kind: "SRQ"}}
	buf, err := c.uv.MmapRing(r.MI)
	if err == nil {
		if s.ring, err = rxe.NewQueue(buf); err != nil {
			unix.Munmap(buf)
		}
	}
	if err != nil {
		c.uv.DestroySRQ(r.SRQHandle)
		pd.release()
		return nil, c.wrap(fmt.Errorf("SRQ ring: %w", err))
	}
	s.ring.InitProducer()
	// What fits in a slot bounds what the kernel reported, whichever is less.
	s.maxSGE = min(int(r.MaxSGE), (int(s.ring.ElemSize())-rxe.RecvWQEHeaderSize)/rxe.SGESize)
	return s, nil
}

// Num is the SRQ's number (srq_num).
func (s *SRQ) Num() uint32 { return s.srqn }

// Cap is how many receives the SRQ holds.
func (s *SRQ) Cap() int { return int(s.ring.Capacity()) }

// Free is how many more receives fit now.
func (s *SRQ) Free() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0
	}
	return int(s.ring.Free())
}

// PostRecv posts receives to the SRQ, all or none: ErrQueueFull when
// they do not all fit. Their buffers must be in regions of the SRQ's
// protection domain, with local write access.
func (s *SRQ) PostRecv(wrs ...RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("verbs: SRQ %#x: %w", s.srqn, ErrClosed)
	}
	return postRecvs(s.ring, s.pd, s.maxSGE, wrs, "SRQ", s.srqn)
}

// Close destroys the SRQ; queue pairs using it must be closed first.
// Receives still posted are dropped with it.
func (s *SRQ) Close() error {
	c := s.pd.ctx
	return s.close("queue pairs using it are", func() error {
		_, err := c.uv.DestroySRQ(s.handle)
		return c.wrapIf(err)
	}, func() error {
		// The kernel keeps the ring until the last mapping goes.
		err := unix.Munmap(s.ring.Bytes())
		s.pd.release()
		return err
	})
}
