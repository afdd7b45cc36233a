package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"image"
	_ "image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotutil"

	"github.com/rivet-hpc/rivet/bench/results"
)

func load(t *testing.T, name string) results.Table {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "results", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tables, err := results.Parse(f, name)
	if err != nil {
		t.Fatal(err)
	}
	return tables[0]
}

// svgParts reads an SVG's texts and the paths drawn in each stroke
// colour, with the points of each path.
func svgParts(t *testing.T, b []byte) (texts []string, paths map[string][]int) {
	t.Helper()
	paths = map[string][]int{}
	dec := xml.NewDecoder(bytes.NewReader(b))
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return texts, paths
		}
		if err != nil {
			t.Fatalf("the SVG does not parse: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			inText = e.Name.Local == "text"
			if e.Name.Local != "path" {
				continue
			}
			var d, style string
			for _, a := range e.Attr {
				switch a.Name.Local {
				case "d":
					d = a.Value
				case "style":
					style = a.Value
				}
			}
			for _, s := range strings.Split(style, ";") {
				if c, ok := strings.CutPrefix(s, "stroke:"); ok {
					paths[c] = append(paths[c], strings.Count(d, "L")+strings.Count(d, "M"))
				}
			}
		case xml.CharData:
			if inText {
				texts = append(texts, strings.TrimSpace(string(e)))
			}
		case xml.EndElement:
			inText = false
		}
	}
}

func hex(i int) string {
	r, g, b, _ := plotutil.Color(i).RGBA()
	return fmt.Sprintf("#%02X%02X%02X", r>>8, g>>8, b>>8)
}

// TestSVG checks the structure of a chart of two real outputs: its
// title, axes and legend, a line through every size of each series in
// its own colour, and the ratio panel.
func TestSVG(t *testing.T) {
	a, b := load(t, "rivet-osu_latency.txt"), load(t, "ompi-osu_latency.txt")
	var out bytes.Buffer
	if err := Draw(&out, []Series{{Label: "Rivet", Table: a}, {Label: "Open MPI", Table: b}}, Options{}); err != nil {
		t.Fatal(err)
	}
	texts, paths := svgParts(t, out.Bytes())
	all := strings.Join(texts, "|")
	for _, want := range []string{"OSU MPI Latency Test v7.4", "Size (bytes)", "Avg Latency (us)", "Rivet", "Open MPI", "Rivet / Open MPI", "ratio", "1K"} {
		if !strings.Contains(all, want) {
			t.Errorf("no text %q among %q", want, texts)
		}
	}
	for i, tb := range []results.Table{a, b} {
		sized := 0
		for _, r := range tb.Rows {
			if x, _ := r.Size(); x > 0 {
				sized++
			}
		}
		found := false
		for _, n := range paths[hex(i)] {
			found = found || n == sized
		}
		if !found {
			t.Errorf("series %d: no line of %d points in %s (paths of %v points)", i, sized, hex(i), paths[hex(i)])
		}
	}
	if strings.Count(all, "Size (bytes)") != 2 {
		t.Errorf("%d size axes, want 2 (the curves and the ratio)", strings.Count(all, "Size (bytes)"))
	}

	// One series: no ratio panel.
	out.Reset()
	if err := Draw(&out, []Series{{Label: "Rivet", Table: a}}, Options{Title: "mine"}); err != nil {
		t.Fatal(err)
	}
	texts, _ = svgParts(t, out.Bytes())
	if all := strings.Join(texts, "|"); strings.Contains(all, "ratio") || !strings.Contains(all, "mine") {
		t.Errorf("one series: texts %q", texts)
	}
}

// TestKeyAxis: a table keyed by something other than a message size —
// lab/scale.sh's memory against the number of processes — has its axis
// named for its key column.
func TestKeyAxis(t *testing.T) {
	tables, err := results.Parse(strings.NewReader("# node memory\n# Processes   PSS (MiB)\n8 24\n64 190\n256 850\n"), "scale")
	if err != nil || len(tables) != 1 {
		t.Fatalf("%d tables, %v", len(tables), err)
	}
	var out bytes.Buffer
	if err := Draw(&out, []Series{{Label: "Rivet", Table: tables[0]}, {Label: "same", Table: tables[0]}}, Options{}); err != nil {
		t.Fatal(err)
	}
	texts, _ := svgParts(t, out.Bytes())
	if all := strings.Join(texts, "|"); strings.Count(all, "Processes") != 2 || strings.Contains(all, "bytes") || !strings.Contains(all, "PSS (MiB)") {
		t.Errorf("texts %q, want two axes of Processes and one of PSS (MiB)", texts)
	}
}

// TestPNG: a PNG of the width and height asked for (a third more with a
// ratio panel).
func TestPNG(t *testing.T) {
	a := load(t, "rivet-osu_bw.txt")
	var out bytes.Buffer
	if err := Draw(&out, []Series{{Label: "a", Table: a}, {Label: "b", Table: a}}, Options{Format: "png"}); err != nil {
		t.Fatal(err)
	}
	cfg, kind, err := image.DecodeConfig(&out)
	if err != nil || kind != "png" {
		t.Fatalf("not a PNG: %v %q", err, kind)
	}
	if r := float64(cfg.Height) / float64(cfg.Width); r < 0.99 || r > 1.01 { // (16 by 12 cm, plus 4)
		t.Errorf("%dx%d", cfg.Width, cfg.Height)
	}
}

// TestErrors: what cannot be drawn is an error naming the series.
func TestErrors(t *testing.T) {
	lat, bw, rec := load(t, "rivet-osu_latency.txt"), load(t, "rivet-osu_bw.txt"), load(t, "rivet-ft_recover.txt")
	other := lat
	other.Rows = []results.Row{{Key: "3", Values: []float64{1}}}
	for _, tc := range []struct {
		s    []Series
		o    Options
		want string
	}{
		{nil, Options{}, "no series"},
		{[]Series{{Label: "rec", Table: rec}}, Options{}, `rec: "Rivet Fault-Tolerance Recovery Test: 2 ranks" has no sizes`},
		{[]Series{{Label: "lat", Table: lat}, {Label: "bw", Table: bw}}, Options{}, `lat is in "us" and bw in "MB/s"`},
		{[]Series{{Label: "lat", Table: lat}, {Label: "odd", Table: other}}, Options{}, "lat and odd have no size in common"},
		{[]Series{{Label: "lat", Table: lat, Column: 3}}, Options{}, "lat: no value column 3"},
		{[]Series{{Label: "lat", Table: lat}}, Options{Format: "gif"}, `format "gif"`},
	} {
		err := Draw(io.Discard, tc.s, tc.o)
		if !errors.Is(err, ErrChart) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}
