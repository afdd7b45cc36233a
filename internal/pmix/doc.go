// Package pmix is a cgo-free client of openpmix servers — Open MPI's
// mpirun (4.x), PRRTE's prterun, Slurm's srun --mpi=pmix — for what a Rivet
// process needs of its launcher: its rank, the job's size, where each rank
// runs, and a put/commit/fence/get exchange of endpoint addresses.
//
// The PMIx Standard defines an API, not a wire format; what follows is the
// format openpmix 4.2.2 speaks to a client that declares itself as this
// one does, learned from openpmix's source (src/mca/ptl, bfrops, psquash,
// gds/hash, src/client, src/server) and checked against Open MPI 4.1.4's
// mpirun and Slurm 22.05's mpi/pmix_v4.
//
// # Finding the server
//
// A server gives each process it starts PMIX_NAMESPACE and PMIX_RANK (the
// process's name), PMIX_SECURITY_MODE (its security modules, preferred
// first) and its address in PMIX_SERVER_URI41, …4, …3, …21 and …2 (the
// newest a client understands wins): "NSPACE.RANK;tcp4://HOST:PORT", or
// tcp6://[HOST]:PORT. openpmix 4 serves TCP only; v1's Unix socket
// (PMIX_SERVER_URI) is gone.
//
// # Connecting
//
// The client opens with one message: a 16-byte header — pindex −1, tag
// 0xffffffff, the payload's length, 4 bytes of padding — in the host's
// byte order (the server reads it without conversion), then:
//
//	security module name, NUL-terminated ("native" or "none")
//	credential length, 32-bit big-endian, then the credential:
//	    native over TCP: the client's euid and egid, 32 bits each, host order
//	process type, 1 byte: 0, a simple client (one the server registered)
//	namespace, NUL-terminated; rank, 32-bit big-endian
//	openpmix version, NUL-terminated ("4.2.2": the server adapts to it)
//	buffer format, NUL-terminated ("v4")
//	buffer type, 1 byte: 1, not self-describing
//	data store module, NUL-terminated ("hash": job data comes in messages)
//	one byte of zero, which openpmix's clients count and never fill
//
// The server answers a 32-bit big-endian status: 0, or −14 to ask for a
// security handshake (native and none never do), or an error, after which
// it hangs up. A server that does not know the namespace and rank, or the
// format, hangs up without answering. On 0 a second 32-bit word follows:
// the client's index in the server's table, which it puts in every later
// header.
//
// # Messages
//
// Every later message has the same header in network byte order: the
// client's index, a tag, the payload's length, padding. A request carries
// a tag of the client's choosing from 100 up; the server answers with the
// same tag. Tags below 100 are the server's own (event notifications,
// forwarded output): this client skips them.
//
// # Buffers
//
// Payloads are openpmix buffers of the v4 format, not self-describing: a
// value carries no type tag where both sides know its type. A top-level
// pack of n values of a type is the count n (an int32) and the values; a
// value inside another is packed bare. Integers are in flex128 (flex.go):
// unsigned ones as base-128 digits, signed ones folded so the sign is bit
// 0; 16-, 32- and 64-bit integers, sizes, ranks, data types and counts all
// use it, one-byte types (bool, byte, command, scope, states) are raw.
// Then, by type:
//
//	string        int32 length counting the NUL, the bytes, NUL (length 0: NULL)
//	byte object   size, bytes; buffer: its own type byte, then as a byte object
//	proc          namespace string, rank
//	value         data type, then the value of that type
//	info          key string, directive flags (uint32), value
//	key-value     key string, value
//	data array    element type, count, the elements
//	pid_t         a type tag (the unsigned type it packs as), the integer
//	float, double a string, printed "%f"
//	regex         "pmix…" and "raw:…" bare NUL-terminated; otherwise a string
//
// # Requests
//
// Each request's payload opens with its command, a top-level pack of one
// byte:
//
//	job data (0)  nothing more. The answer: the namespace, then key-values
//	              to the end — job-level data (pmix.job.size …), one
//	              pmix.node.arr data array of infos a node, and one
//	              pmix.pblob byte object a process, holding its rank and
//	              its key-values (pmix.nodeid, pmix.hname, pmix.lrank …).
//	commit (2)    scope (3, global), then a buffer of the staged key-values.
//	              The answer: a status.
//	fence (3)     the number of procs and the procs (this namespace, rank
//	              wildcard), the number of infos and the infos
//	              (pmix.collect = true). The answer, once every process has
//	              entered: a status.
//	get (4)       namespace, rank, the number of infos (0), the key. The
//	              answer: a status, then one byte object a process, each
//	              holding the proc and every key-value it committed.
//	finalize (5)  nothing more. The answer: a status; a process that exits
//	              without it is one the server counts as failed.
package pmix
