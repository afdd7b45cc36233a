package ftsim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCalibration holds the model against our runs: $FTSIM_CALIBRATE
// names a CSV of measured times (unset: the test is skipped;
// lab/ftsim-calibrate.sh measures them and sets it), rows of
// platform,ranks,ppn,op,µs with op one of latency (osu_latency 8 B),
// barrier, allreduce (4 B, recursive doubling; dissemination for the
// barrier: the model's references), iagree and revoke (ft_recover's
// largest per-rank mean: when the last rank finished).
//
// The model has one constant a platform and size: the time of a hop h,
// a message's latency and both its CPU costs (L = 0.4h, o = 0.3h, g =
// 0.1h, as in Cluster; no jitter, nobody descheduled). Everything the
// model computes scales with h, so h is fitted to the two references —
// the geometric mean of measured over modelled, barrier and allreduce —
// and the agreement and the revoke are then predicted with no constant
// of their own: measured over predicted is how far the model's account
// of the protocols (their hops, their fan-in) is from ours.
func TestCalibration(t *testing.T) {
	file := os.Getenv("FTSIM_CALIBRATE")
	if file == "" {
		t.Skip("FTSIM_CALIBRATE=file.csv holds the model against measured times: lab/ftsim-calibrate.sh")
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		platform   string
		ranks, ppn int
	}
	measured := map[key]map[string]float64{}
	var keys []key
	for i, row := range rows {
		if i == 0 && row[0] == "platform" {
			continue
		}
		if len(row) != 5 {
			t.Fatalf("%s:%d: want platform,ranks,ppn,op,µs, have %q", file, i+1, row)
		}
		ranks, err1 := strconv.Atoi(row[1])
		ppn, err2 := strconv.Atoi(row[2])
		us, err3 := strconv.ParseFloat(row[4], 64)
		if err := errors.Join(err1, err2, err3); err != nil || ranks < 2 || ppn < 1 || us <= 0 {
			t.Fatalf("%s:%d: %q: %v", file, i+1, row, err)
		}
		k := key{row[0], ranks, ppn}
		if measured[k] == nil {
			measured[k] = map[string]float64{}
			keys = append(keys, k)
		}
		measured[k][row[3]] = us
	}

	var b strings.Builder
	fmt.Fprintf(&b, "| platform | ranks | osu_latency 8 B | hop h, fitted | barrier: measured, model | allreduce: measured, model | iagree: measured, predicted, ratio | revoke: measured, predicted, ratio |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|\n")
	for _, k := range keys {
		m := measured[k]
		for _, op := range []string{"barrier", "allreduce", "iagree", "revoke"} {
			if m[op] == 0 {
				t.Fatalf("%s: %v has no %s", file, k, op)
			}
		}
		unit := calibrationModel(k.ppn, time.Microsecond)
		model := map[string]float64{}
		for op, p := range map[string]Protocol{"barrier": Barrier, "allreduce": Allreduce, "iagree": Agree, "revoke": Revoke} {
			sc := Scenario{Protocol: p, N: k.ranks, Model: unit}
			r := Run(sc, 1)
			if err := r.Err(sc); err != nil {
				t.Fatal(err)
			}
			model[op] = float64(r.Done) / float64(time.Microsecond)
		}
		h := math.Sqrt(m["barrier"] / model["barrier"] * m["allreduce"] / model["allreduce"])
		lat := "—"
		if m["latency"] > 0 {
			lat = num(m["latency"])
		}
		cell := func(op string) string {
			return num(m[op]) + ", " + num(h*model[op])
		}
		predicted := func(op string) string {
			return fmt.Sprintf("%s, %s, **%.2f**", num(m[op]), num(h*model[op]), m[op]/(h*model[op]))
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", k.platform, k.ranks, lat, num(h),
			cell("barrier"), cell("allreduce"), predicted("iagree"), predicted("revoke"))
	}
	t.Logf("µs; model: L = 0.4h, o = 0.3h, g = 0.1h, no jitter\n%s", b.String())
}

// calibrationModel is Cluster's shape with a hop of h: one latency
// everywhere (a platform is one kind of link), ppn processes a node.
func calibrationModel(ppn int, h time.Duration) Model {
	m := Cluster()
	m.PPN = ppn
	m.LNode, m.LNet = 4*h/10, 4*h/10
	m.O = 3 * h / 10
	m.G = h / 10
	m.ByteNode, m.ByteNet = 0, 0
	m.Jitter = 0
	return m
}

// num prints a time in µs with three significant digits or so, never in
// exponent form.
func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
