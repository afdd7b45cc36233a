// Package critpath measures a ping-pong's own critical path: the time
// from a process seeing a message arrive to it ringing the doorbell of
// its next send. Everything else in a round trip over rxe is the kernel's
// and the wire's; this part is the fabric's own code, and under emulation
// it is too short for a profiler and too noisy for a timed run.
//
// It works only in binaries built with the rivetprobe tag on amd64 (go
// build -tags rivetprobe), where it reads the time-stamp counter. In
// every other build its functions are empty, and the calls to them in the
// fabric compile to nothing. It keeps one process-wide tally without
// locks: it is for benchmarks with one goroutine sending and receiving.
package critpath
