//go:build linux

package bootstrap

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
)

// A Slurm step started without PMI (srun --mpi=none) still says who is
// who: SLURM_PROCID and SLURM_NTASKS. The ranks meet at a store that rank
// 0 hosts on the first node of SLURM_STEP_NODELIST, at a port derived
// from the job and step ids (or RIVET_RENDEZVOUS_PORT), admitting only
// holders of RIVET_JOB_SECRET.

func haveSlurm() bool {
	return os.Getenv("SLURM_PROCID") != "" && os.Getenv("SLURM_NTASKS") != "" && slurmNodelist() != ""
}

func slurmNodelist() string {
	for _, k := range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return ""
}

func slurmBootstrap(ctx context.Context) (Bootstrap, error) {
	rank, err1 := strconv.Atoi(os.Getenv("SLURM_PROCID"))
	size, err2 := strconv.Atoi(os.Getenv("SLURM_NTASKS"))
	if err1 != nil || err2 != nil || size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("bootstrap: SLURM_PROCID=%q SLURM_NTASKS=%q do not name a rank in a job", os.Getenv("SLURM_PROCID"), os.Getenv("SLURM_NTASKS"))
	}
	hosts, err := ParseHostlist(slurmNodelist())
	if err != nil {
		return nil, err
	}
	port, err := slurmPort()
	if err != nil {
		return nil, err
	}
	secret := os.Getenv("RIVET_JOB_SECRET")
	if secret == "" {
		return nil, fmt.Errorf("%w: under Slurm without PMI, export one random value to the step (or use srun --mpi=pmi2)", ErrNoSecret)
	}
	b, err := joinStore(ctx, hosts[0]+":"+strconv.Itoa(port), rank, size, secret)
	if err != nil {
		return nil, err
	}
	b.(*storeBootstrap).launcher = "slurm"
	return b, nil
}

// slurmPort is RIVET_RENDEZVOUS_PORT, or a port in 30000–59999 that
// every task of the step derives alike from SLURM_JOB_ID and
// SLURM_STEP_ID, so that concurrent steps rarely collide.
func slurmPort() (int, error) {
	if v := os.Getenv("RIVET_RENDEZVOUS_PORT"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > 65535 {
			return 0, fmt.Errorf("bootstrap: RIVET_RENDEZVOUS_PORT=%q is not a port", v)
		}
		return p, nil
	}
	job := os.Getenv("SLURM_JOB_ID")
	if job == "" {
		job = os.Getenv("SLURM_JOBID")
	}
	h := fnv.New32a()
	h.Write([]byte(job + "." + os.Getenv("SLURM_STEP_ID")))
	return 30000 + int(h.Sum32()%30000), nil
}

// maxHosts bounds what a hostlist may expand to: "a[0-9999]b[0-9999]"
// names 10^8 hosts, which no job has and no memory holds.
const maxHosts = 1 << 20

// ParseHostlist expands a Slurm hostlist such as "nid[001-003,010],login1"
// into host names, keeping zero padding ("nid001", …).
func ParseHostlist(s string) ([]string, error) {
	var out []string
	for _, item := range splitOutsideBrackets(s) {
		if item == "" {
			continue
		}
		hosts, err := expandHost(item)
		if err == nil && len(out)+len(hosts) > maxHosts {
			err = fmt.Errorf("more than %d hosts", maxHosts)
		}
		if err != nil {
			return nil, fmt.Errorf("bootstrap: hostlist %q: %w", s, err)
		}
		out = append(out, hosts...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bootstrap: hostlist %q names no host", s)
	}
	return out, nil
}

func splitOutsideBrackets(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// expandHost expands the first bracket group of item and recurses on the
// rest, so "a[1-2]b[3-4]" gives a1b3 a1b4 a2b3 a2b4.
func expandHost(item string) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if strings.ContainsAny(item, "]") {
			return nil, fmt.Errorf("unbalanced ']' in %q", item)
		}
		return []string{item}, nil
	}
	end := strings.IndexByte(item[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("unbalanced '[' in %q", item)
	}
	end += open
	prefix, body, rest := item[:open], item[open+1:end], item[end+1:]
	if strings.ContainsAny(prefix, "]") {
		return nil, fmt.Errorf("unbalanced ']' in %q", item)
	}
	tails, err := expandHost(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(body, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a > b || lo == "" {
			return nil, fmt.Errorf("bad range %q", r)
		}
		if b-a > 1<<16 {
			return nil, fmt.Errorf("range %q is too long", r)
		}
		if len(out)+(b-a+1)*len(tails) > maxHosts {
			return nil, fmt.Errorf("more than %d hosts", maxHosts)
		}
		for n := a; n <= b; n++ {
			num := fmt.Sprintf("%0*d", len(lo), n)
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
		}
	}
	return out, nil
}
