package pmix

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// What this client tells the server it is: a simple client (a process the
// server registered before starting it) of openpmix 4.2.2's wire format.
const (
	clientVersion = "4.2.2" // the openpmix release whose format this speaks
	bfropsVersion = "v4"    // its buffer-packing module
	gdsModule     = "hash"  // job data in messages, not a shared-memory store
	bufNonDesc    = 1       // PMIX_BFROP_BUFFER_NON_DESC: no type tags
	flagClient    = 0       // PMIX_SIMPLE_CLIENT
	headerLen     = 16      // pindex, tag, nbytes, padding
	maxMessage    = 1 << 28 // more than 65,536 processes' job data
)

// Message tags: the server answers a request with the request's tag;
// those below firstTag are its own (event notifications, forwarded
// output), which this client does not ask for and skips.
const firstTag = 100

// statusReadyForHandshake is the reply asking for a security handshake
// after the connect message (PMIX_ERR_READY_FOR_HANDSHAKE); the native
// and none security modes never ask.
const statusReadyForHandshake = -14

// serverURI returns the server's address from the environment openpmix
// servers give their clients: the newest of PMIX_SERVER_URI41, …4, …3,
// …21 and …2 that is set, each "NSPACE.RANK;tcp4://HOST:PORT".
func serverURI() (server Proc, network, addr string, err error) {
	for _, name := range []string{"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21", "PMIX_SERVER_URI2"} {
		if v := os.Getenv(name); v != "" {
			server, network, addr, err = parseURI(v)
			if err != nil {
				return Proc{}, "", "", fmt.Errorf("pmix: %s=%q: %w", name, v, err)
			}
			return server, network, addr, nil
		}
	}
	if os.Getenv("PMIX_SERVER_URI") != "" {
		return Proc{}, "", "", errors.New("pmix: the server offers only PMIX_SERVER_URI, the Unix-socket transport of PMIx v1, which this client does not speak")
	}
	return Proc{}, "", "", errors.New("pmix: PMIX_NAMESPACE is set but no PMIX_SERVER_URI2 … PMIX_SERVER_URI41 names the server")
}

// parseURI splits "NSPACE.RANK;tcp4://HOST:PORT" (or tcp6://[HOST]:PORT).
func parseURI(uri string) (server Proc, network, addr string, err error) {
	id, where, ok := strings.Cut(uri, ";")
	if !ok {
		return Proc{}, "", "", errors.New("no ';' between the server's name and address")
	}
	dot := strings.LastIndexByte(id, '.')
	if dot < 0 {
		return Proc{}, "", "", fmt.Errorf("server name %q is not NSPACE.RANK", id)
	}
	rank, err := strconv.ParseUint(id[dot+1:], 10, 32)
	if err != nil {
		return Proc{}, "", "", fmt.Errorf("server name %q is not NSPACE.RANK", id)
	}
	scheme, hostport, ok := strings.Cut(where, "://")
	switch {
	case !ok:
		return Proc{}, "", "", fmt.Errorf("address %q has no scheme", where)
	case scheme == "tcp4":
		network = "tcp4"
	case scheme == "tcp6":
		network = "tcp6"
	default:
		return Proc{}, "", "", fmt.Errorf("transport %q: this client speaks tcp4 and tcp6", scheme)
	}
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		return Proc{}, "", "", fmt.Errorf("address %q: %v", hostport, err)
	}
	return Proc{Nspace: id[:dot], Rank: uint32(rank)}, network, hostport, nil
}

// securityModule picks from PMIX_SECURITY_MODE (the server's modules, in
// its order of preference) the first this client can speak.
func securityModule(modes string) (string, error) {
	if modes == "" {
		return "native", nil
	}
	for _, m := range strings.Split(modes, ",") {
		if m = strings.TrimSpace(m); m == "native" || m == "none" {
			return m, nil
		}
	}
	return "", fmt.Errorf("pmix: PMIX_SECURITY_MODE=%q: this client speaks native and none", modes)
}

// connectMessage builds the message a client opens with: a header in the
// host's byte order (openpmix reads it without conversion) and a payload
// of NUL-terminated strings, network-order 32-bit integers and single
// bytes.
func connectMessage(me Proc, security string) []byte {
	var p []byte
	p = append(p, security...)
	p = append(p, 0)
	// The credential: native security over TCP checks the uid and gid
	// the client states (host order); none takes no credential.
	var cred []byte
	if security == "native" {
		cred = binary.LittleEndian.AppendUint32(cred, uint32(os.Geteuid()))
		cred = binary.LittleEndian.AppendUint32(cred, uint32(os.Getegid()))
	}
	p = binary.BigEndian.AppendUint32(p, uint32(len(cred)))
	p = append(p, cred...)
	p = append(p, flagClient)
	p = append(p, me.Nspace...)
	p = append(p, 0)
	p = binary.BigEndian.AppendUint32(p, me.Rank)
	for _, s := range []string{clientVersion, bfropsVersion} {
		p = append(p, s...)
		p = append(p, 0)
	}
	p = append(p, bufNonDesc)
	p = append(p, gdsModule...)
	p = append(p, 0)
	// openpmix's clients count a byte they never fill (room for a
	// client-or-tool marker): the server takes it as an empty info blob.
	p = append(p, 0)
	h := make([]byte, headerLen, headerLen+len(p))
	binary.LittleEndian.PutUint32(h[0:], 0xffffffff) // pindex −1
	binary.LittleEndian.PutUint32(h[4:], 0xffffffff) // tag UINT32_MAX
	binary.LittleEndian.PutUint32(h[8:], uint32(len(p)))
	return append(h, p...)
}

// handshake sends the connect message on c and reads the server's
// answer: a network-order status, then, if it is success, this client's
// index in the server's table, which every later header carries.
func handshake(c io.ReadWriter, me Proc, security string) (pindex uint32, err error) {
	if _, err := c.Write(connectMessage(me, security)); err != nil {
		return 0, err
	}
	var b [4]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, fmt.Errorf("the server closed the connection without answering the handshake (it does not know %s rank %d, or does not speak openpmix v2.1 or later)", me.Nspace, me.Rank)
		}
		return 0, err
	}
	switch st := int32(binary.BigEndian.Uint32(b[:])); st {
	case 0:
	case statusReadyForHandshake:
		return 0, fmt.Errorf("%w: the server asks for a %s security handshake, which this client does not do", ErrProtocol, security)
	default:
		return 0, &StatusError{Op: "handshake", Status: st}
	}
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(b[:]), nil
}

// StatusError is a PMIx status other than success that the server
// returned.
type StatusError struct {
	Op     string
	Status int32
}

// Status codes this client names (pmix_common.h).
const (
	StatusNotFound       = -46
	StatusTimeout        = -24
	StatusUnreach        = -25
	StatusInvalidCred    = -12
	StatusNotSupported   = -47
	StatusLostConnection = -61
	StatusProcAborted    = -402
)

func (e *StatusError) Error() string {
	name := map[int32]string{
		-1: "PMIX_ERROR", StatusNotFound: "PMIX_ERR_NOT_FOUND", StatusTimeout: "PMIX_ERR_TIMEOUT",
		StatusUnreach: "PMIX_ERR_UNREACH", StatusInvalidCred: "PMIX_ERR_INVALID_CRED", -27: "PMIX_ERR_BAD_PARAM",
		StatusNotSupported: "PMIX_ERR_NOT_SUPPORTED", StatusLostConnection: "PMIX_ERR_LOST_CONNECTION",
		-52: "PMIX_ERR_PARTIAL_SUCCESS", StatusProcAborted: "PMIX_ERR_PROC_ABORTED",
	}[e.Status]
	if name == "" {
		name = "status " + strconv.Itoa(int(e.Status))
	}
	return fmt.Sprintf("pmix: %s: the server answered %s", e.Op, name)
}

// writeMsg sends one message: a network-order header, then the payload.
func writeMsg(w io.Writer, pindex, tag uint32, payload []byte) error {
	m := make([]byte, headerLen, headerLen+len(payload))
	binary.BigEndian.PutUint32(m[0:], pindex)
	binary.BigEndian.PutUint32(m[4:], tag)
	binary.BigEndian.PutUint32(m[8:], uint32(len(payload)))
	_, err := w.Write(append(m, payload...))
	return err
}

// readMsg reads one message.
func readMsg(r io.Reader) (tag uint32, payload []byte, err error) {
	var h [headerLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[8:])
	if n > maxMessage {
		return 0, nil, fmt.Errorf("%w: a %d-byte message", ErrProtocol, n)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return binary.BigEndian.Uint32(h[4:]), payload, nil
}

// deadline ends c's I/O once ctx is done; the returned func stops that.
// A connection whose I/O ctx ended is out of step and is not used again.
func deadline(ctx context.Context, c net.Conn) func() {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	return func() { stop() }
}
