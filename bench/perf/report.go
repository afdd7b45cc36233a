//go:build linux

package perf

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/rivet-hpc/rivet/internal/godebug"
	"github.com/rivet-hpc/rivet/internal/sysmon"
)

const rule = "---------------------------------------------------------------------------------------"

var titles = map[string]string{
	WriteLat: "RDMA_Write Latency Test", ReadLat: "RDMA_Read Latency Test", AtomicLat: "Atomic FETCH_AND_ADD Latency Test",
	SendLat: "Send Latency Test", WriteBW: "RDMA_Write BW Test", ReadBW: "RDMA_Read BW Test",
}

func printHeader(w io.Writer, cfg Config, e *env) {
	title := titles[cfg.Test]
	if cfg.Test == AtomicLat && cfg.Atomic == "CMP_AND_SWAP" {
		title = "Atomic CMP_AND_SWAP Latency Test"
	}
	fmt.Fprintln(w, rule)
	fmt.Fprintf(w, "                    %s\n", title)
	fmt.Fprintf(w, " Device         : %s (Rivet verbs, pure Go)\n", e.ctx.Name())
	fmt.Fprintf(w, " Number of qps   : 1\t\tTransport type : IB\n")
	fmt.Fprintf(w, " Connection type : RC\t\tUsing SRQ      : OFF\n")
	if cfg.isBW() {
		fmt.Fprintf(w, " TX depth        : %d\n CQ Moderation   : %d\n", cfg.TxDepth, min(cqMod, cfg.TxDepth))
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", e.mtu.Bytes())
	fmt.Fprintf(w, " Link type       : Ethernet\n")
	fmt.Fprintf(w, " Max inline data : %d[B]\n", cfg.Inline)
	fmt.Fprintf(w, " Go runtime      : GOMAXPROCS %d, async preemption %s, sysmon %s\n", runtime.GOMAXPROCS(0), godebug.State(os.Getenv("GODEBUG")), sysmon.State())
	fmt.Fprintln(w, rule)
	ep := e.qp.Endpoint(e.gid)
	fmt.Fprintf(w, " local address: LID 0000 QPN %#06x PSN %#06x RKey %#08x VAddr %#016x\n GID: %s\n",
		ep.QPN, ep.PSN, e.mr.RKey(), e.mr.Addr(), ep.GID)
	fmt.Fprintln(w, rule)
	if cfg.Server == "" && (cfg.isBW() || cfg.Test == ReadLat || cfg.Test == AtomicLat) {
		return // the passive side reports nothing, as perftest's server
	}
	if cfg.isBW() {
		fmt.Fprintln(w, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
	} else {
		fmt.Fprintln(w, latencyColumns)
	}
}

func printRow(w io.Writer, cfg Config, r Result) {
	if cfg.Histogram { // latency tests only: defaults rejects it for bandwidth
		printSamples(w, r.Samples, !cfg.Unsorted)
		fmt.Fprintln(w, rule)
		fmt.Fprintln(w, latencyColumns)
	}
	if cfg.isBW() {
		fmt.Fprintf(w, " %-10d %-10d     %-7.2f            %-7.2f\t\t   %.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
		return
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	fmt.Fprintf(w, " %-7d %-7d        %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		r.Size, r.Iters, us(r.Min), us(r.Max), us(r.Typical), us(r.Avg), us(r.Stdev), us(r.P99), us(r.P999))
}

func printFooter(w io.Writer) { fmt.Fprintln(w, rule) }

const latencyColumns = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "

// printSamples prints one latency per line as perftest's -H and -U do
// ("#, usec", then "N, value"), sorted or in the order measured. Unlike
// perftest's sorted list it leaves out no iteration.
func printSamples(w io.Writer, samples []time.Duration, sorted bool) {
	if sorted {
		samples = slices.Clone(samples)
		slices.Sort(samples)
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "#, usec")
	for i, s := range samples {
		fmt.Fprintf(bw, "%d, %.6g\n", i+1, float64(s)/1e3)
	}
	bw.Flush()
}
