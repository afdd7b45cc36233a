//go:build linux

package fabric

import (
	"time"

	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// A provider moves frames between this process and the peers it reaches,
// in the spirit of a libfabric provider: ordered messages to each peer
// (the matching engine above builds tagged messaging on them), and reads
// of a peer's exposed memory (rendezvous now, one-sided RMA later). The
// shared-memory provider is the first; the verbs provider slots in beside
// it, chosen per peer.
//
// Providers are driven only under the engine's lock: nothing in a
// provider runs on its own, and progress happens inside calls.
type provider interface {
	name() string
	// eagerMax is the largest payload send carries in one frame; longer
	// messages go by rendezvous.
	eagerMax() int
	// send queues one frame for peer (a world rank). It returns false,
	// leaving nothing queued, when the peer's queue has no room; frames
	// to one peer arrive in the order sent. For an RTS, payload is the
	// message the peer will read (a provider may stage it).
	send(peer int, h *wire.Header, payload []byte) bool
	// poll hands up to budget arrived frames to the engine (deliver) and
	// returns how many it handed over. A payload is valid only during its
	// deliver call.
	poll(e *engine, budget int) int
	// read starts moving the rendezvous message announced at addr (with
	// key) into dst, for receive r of message id. It reports done when the
	// data is in dst (or err says why not); otherwise the provider later
	// calls engine.readDone. (Fields, not the header: a header pointer
	// through this interface would move every polled header to the heap.)
	read(peer int, r *op, dst []byte, id, addr uint64, key uint32) (done bool, err error)
	// closed reports whether peer shut down cleanly (Close), as opposed
	// to dying; only meaningful once the peer is gone.
	closed(peer int) bool
	close() error
}

// A sendFailer is a provider that can come to be unable to reach a live
// peer (the shared-memory provider, when /dev/shm has no room for the
// ring of a peer it first sends to): the sends queued for it then fail
// with sendErr's error, instead of waiting for room that never comes.
type sendFailer interface {
	sendErr(peer int) error
}

// A directProvider can hand one peer's next frame straight to a blocking
// receive (engine.recvDirect) and leaves that peer's frames to it in
// poll while engine.direct names the peer.
type directProvider interface {
	// takeDirect looks at peer's next frame, if one has arrived. If it
	// is an eager message that matches (ctx, src, tag) and fits in buf,
	// it copies the payload into buf and returns its length and tag with
	// taken. Any other frame it handles as poll would (deliver), and
	// reports it with moved.
	takeDirect(e *engine, peer int, ctx uint32, src, tag int, buf []byte) (n, gotTag int, taken, moved bool)
}

// A prober is a provider that can check on its peers while a call waits,
// for transports that notice a dead peer only when traffic to it fails.
type prober interface {
	probe(now time.Time, e *engine)
}

// A failureListener is a provider that holds state per peer beyond its
// frames (the shared-memory pipeline's transfers) and must drop it when
// the engine marks that peer failed.
type failureListener interface {
	peerFailed(e *engine, peer int, cause error)
}
