package testutil

import (
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ThreadCPUs lists the distinct CPU masks of this process's threads, each
// as a comma-separated list of CPUs ("0,1"), sorted.
func ThreadCPUs() []string {
	tasks, _ := os.ReadDir("/proc/self/task")
	var masks []string
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		var set unix.CPUSet
		if unix.SchedGetaffinity(tid, &set) != nil {
			continue // the thread has gone
		}
		var on []string
		for _, c := range cpusOf(&set) {
			on = append(on, strconv.Itoa(c))
		}
		if m := strings.Join(on, ","); !slices.Contains(masks, m) {
			masks = append(masks, m)
		}
	}
	slices.Sort(masks)
	return masks
}

// CPUs lists the CPUs the calling thread may run on, ascending: a test
// that pins itself picks from these, as a machine's cgroup or a
// container's CPU set may leave out CPU 0.
func CPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, os.NewSyscallError("sched_getaffinity", err)
	}
	return cpusOf(&set), nil
}

// cpusOf lists the CPUs of set, ascending.
func cpusOf(set *unix.CPUSet) []int {
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}
