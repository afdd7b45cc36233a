//go:build linux

package bootstrap

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/rivet-hpc/rivet/internal/pmi"
	"github.com/rivet-hpc/rivet/internal/pmix"
)

// A Slurm step started without PMI (srun --mpi=none) still says who is
// who: SLURM_PROCID, the step's size and each task's node. The ranks meet
// at a store that rank 0 hosts on the step's first node, at a port derived
// from the job and step ids (or RIVET_RENDEZVOUS_PORT), admitting only
// holders of RIVET_JOB_SECRET. The other ranks reach that node by the
// address Slurm itself uses for it, never by resolving its name unless
// Slurm has no other: a Slurm node name need not be a host name.

func haveSlurm() bool {
	return os.Getenv("SLURM_PROCID") != "" && slurmNtasks() != "" && slurmNodelist() != ""
}

func slurmNodelist() string {
	for _, k := range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return ""
}

// slurmNtasks is the step's size: srun sets SLURM_STEP_NUM_TASKS, and
// SLURM_NTASKS to the same number.
func slurmNtasks() string {
	if v := os.Getenv("SLURM_STEP_NUM_TASKS"); v != "" {
		return v
	}
	return os.Getenv("SLURM_NTASKS")
}

// slurmStep reads this task's rank and the step's size from the
// environment, and checks that its variables agree with each other.
func slurmStep() (rank, size int, err error) {
	rank, err1 := strconv.Atoi(os.Getenv("SLURM_PROCID"))
	size, err2 := strconv.Atoi(slurmNtasks())
	if err1 != nil || err2 != nil || size < 1 || rank < 0 || rank >= size {
		return 0, 0, fmt.Errorf("bootstrap: SLURM_PROCID=%q SLURM_STEP_NUM_TASKS=%q do not name a rank in a step", os.Getenv("SLURM_PROCID"), slurmNtasks())
	}
	if n := os.Getenv("SLURM_NTASKS"); n != "" && n != strconv.Itoa(size) {
		return 0, 0, fmt.Errorf("bootstrap: the Slurm step has %d tasks (SLURM_STEP_NUM_TASKS) but SLURM_NTASKS=%s: the environment was changed after srun set it", size, n)
	}
	return rank, size, nil
}

// slurmNodeID is the index of this task's node in its step.
func slurmNodeID() (int, bool) {
	n, err := strconv.Atoi(os.Getenv("SLURM_NODEID"))
	return n, err == nil && n >= 0
}

// slurmServesPMI tells whether jobid, a PMI server's name for the job, is
// srun's: Slurm's PMI plugin names the job "jobid.stepid".
func slurmServesPMI(jobid string) bool {
	j, s := os.Getenv("SLURM_JOB_ID"), os.Getenv("SLURM_STEP_ID")
	return j != "" && s != "" && jobid == j+"."+s
}

// checkSlurmPMI checks, when srun's PMI plugin serves this process, that
// it agrees with the step's environment on rank and size.
func checkSlurmPMI(c *pmi.Client) error {
	if !slurmServesPMI(c.JobID()) {
		return nil
	}
	return checkSlurmStep("PMI", c.Rank(), c.Size())
}

// checkSlurmPMIx is checkSlurmPMI for srun --mpi=pmix, whose plugin names
// the job "slurm.pmix.JOBID.STEPID".
func checkSlurmPMIx(c *pmix.Client) error {
	if !isSlurmPMIx(c) {
		return nil
	}
	return checkSlurmStep("PMIx", c.Rank(), c.Size())
}

// isSlurmPMIx reports whether c's server is srun's (its namespace is the
// step's: slurm.pmix.JOB.STEP), not, say, an mpirun's in an allocation.
func isSlurmPMIx(c *pmix.Client) bool {
	j, s := os.Getenv("SLURM_JOB_ID"), os.Getenv("SLURM_STEP_ID")
	return j != "" && s != "" && c.Nspace() == "slurm.pmix."+j+"."+s
}

// checkSlurmStep checks that srun's server (PMI or PMIx) and the step's
// environment agree on rank and size.
func checkSlurmStep(server string, rank, size int) error {
	r, n, err := slurmStep()
	if err != nil {
		return err
	}
	if r != rank || n != size {
		return fmt.Errorf("bootstrap: srun's %s server says rank %d of %d, but the step's environment says rank %d of %d (SLURM_PROCID, SLURM_STEP_NUM_TASKS)", server, rank, size, r, n)
	}
	return nil
}

func slurmBootstrap(ctx context.Context) (Bootstrap, error) {
	rank, size, err := slurmStep()
	if err != nil {
		return nil, err
	}
	node, ok := slurmNodeID()
	if !ok {
		return nil, fmt.Errorf("bootstrap: SLURM_NODEID=%q is not a node of the step", os.Getenv("SLURM_NODEID"))
	}
	if rank == 0 && node != 0 {
		return nil, fmt.Errorf("bootstrap: rank 0 runs on node %d of the Slurm step, not its first, where the other ranks look for it: use srun --mpi=pmi2, or a distribution that starts at the first node", node)
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
	host, err := slurmNodeAddr(ctx, hosts[0])
	if err != nil {
		return nil, err
	}
	p := strconv.Itoa(port)
	b, err := joinStore(ctx, ":"+p, net.JoinHostPort(host, p), rank, size, secret)
	if err != nil {
		return nil, err
	}
	b.launcher = "slurm"
	if err := b.Put(ctx, slurmNodeKey, []byte(strconv.Itoa(node))); err != nil {
		b.Close()
		return nil, err
	}
	return slurmStore{b}, nil
}

// slurmNodeKey is where each task of a step without PMI says its node.
const slurmNodeKey = "slurm-node"

// slurmStore is the store of a Slurm step without PMI, where every rank
// has put its SLURM_NODEID.
type slurmStore struct{ *storeBootstrap }

// Nodes is each rank's SLURM_NODEID.
func (b slurmStore) Nodes(ctx context.Context) ([]int, error) {
	nodes := make([]int, b.Size())
	for r := range nodes {
		v, err := b.Get(ctx, r, slurmNodeKey)
		if err != nil {
			return nil, err
		}
		if nodes[r], err = strconv.Atoi(string(v)); err != nil || nodes[r] < 0 {
			return nil, fmt.Errorf("bootstrap: rank %d says it runs on Slurm node %q", r, v)
		}
	}
	return nodes, nil
}

// slurmNodeAddr is the address at which this task reaches Slurm node
// name: RIVET_RENDEZVOUS_ADDR if set; loopback on that node itself; the
// node's address in SLURM_NODE_ALIASES (Slurm's cloud nodes); the
// NodeAddr that slurmctld holds for it (scontrol); and only failing all
// of those the name itself, for the system's resolver.
func slurmNodeAddr(ctx context.Context, name string) (string, error) {
	if v := os.Getenv("RIVET_RENDEZVOUS_ADDR"); v != "" {
		return v, nil
	}
	if os.Getenv("SLURMD_NODENAME") == name {
		return "127.0.0.1", nil
	}
	if a, ok := aliasAddr(os.Getenv("SLURM_NODE_ALIASES"), name); ok {
		return a, nil
	}
	if a, err := scontrolNodeAddr(ctx, name); err == nil {
		return a, nil
	} else if ctx.Err() != nil {
		return "", fmt.Errorf("bootstrap: asking Slurm for the address of node %s: %w", name, ctx.Err())
	}
	return name, nil
}

// aliasAddr finds name in SLURM_NODE_ALIASES, "name:addr:host,…", where
// an IPv6 addr is bracketed.
func aliasAddr(aliases, name string) (string, bool) {
	for _, a := range strings.Split(aliases, ",") {
		n, rest, ok := strings.Cut(a, ":")
		if !ok || n != name {
			continue
		}
		if v6, ok := strings.CutPrefix(rest, "["); ok {
			addr, _, ok := strings.Cut(v6, "]")
			return addr, ok && addr != ""
		}
		addr, _, _ := strings.Cut(rest, ":")
		return addr, addr != ""
	}
	return "", false
}

// scontrolNodeAddr asks slurmctld for node name's NodeAddr.
func scontrolNodeAddr(ctx context.Context, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "scontrol", "-o", "show", "node", name).Output()
	if err != nil {
		return "", err
	}
	for _, f := range strings.Fields(string(out)) {
		if a, ok := strings.CutPrefix(f, "NodeAddr="); ok && a != "" {
			return a, nil
		}
	}
	return "", fmt.Errorf("bootstrap: scontrol gives no NodeAddr for %s", name)
}

// slurmPort is RIVET_RENDEZVOUS_PORT, or a port in 20000–32767 that
// every task of the step derives alike from SLURM_JOB_ID and
// SLURM_STEP_ID, so that concurrent steps rarely collide. The range ends
// below Linux's ephemeral ports (32768–60999 by default): a port there may
// be any connection's local end (30000–59999, as before, once met rank 0
// with "bind: address already in use" and failed the step).
const slurmPortMin, slurmPortMax = 20000, 32767

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
	return slurmPortMin + int(h.Sum32()%(slurmPortMax-slurmPortMin+1)), nil
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
