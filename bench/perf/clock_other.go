//go:build !amd64

package perf

func rdtsc() uint64 { return uint64(nanotime()) }

const haveTSC = false
