package perf

// rdtsc reads the time-stamp counter, unfenced, as perftest's get_cycles
// does.
func rdtsc() uint64

const haveTSC = true
